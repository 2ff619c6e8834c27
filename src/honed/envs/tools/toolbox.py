"""Running the calls of one turn of every episode: errors become messages, time is limited.

All calls of a turn, across all the rollouts of a step, are run together: `async def` tools
concurrently on the background loop (`honed.envs.aio`), each limited to `timeout` seconds;
synchronous tools one after another, in call order, each in a thread of its own so that the same
limit applies (user code need not be thread-safe). Whatever goes wrong (an unknown tool, bad
arguments, an exception, a timeout) becomes the call's result text, starting with `Error:`, and
the episode goes on: the model learns from the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from honed.envs.aio import Outcome, call_in_thread, start_all
from honed.envs.multiturn.toolcalls import ToolCall
from honed.envs.tools.functions import Tool, result_text


@dataclass
class ToolResult:
    """What one call gave back. `tool` is the tool's name when the call reached a tool (else
    `None`: an unknown name is the model's, and never becomes a metric name)."""

    content: str
    error: bool
    tool: str | None = None
    seconds: float = 0.0
    timed_out: bool = False


class ToolBox:
    """The environment's tools by name, with their time limit and the size of their results."""

    def __init__(
        self, tools: Sequence[Tool], timeout: float, max_result_chars: int, enabled: bool = True
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self.timeout = timeout
        self.max_result_chars = max_result_chars
        self.enabled = enabled

    def disabled(self) -> ToolBox:
        """The same tools (and schemas), every call answered with an error: what an agent does
        without its tools, all else equal."""
        return ToolBox(list(self.tools.values()), self.timeout, self.max_result_chars, False)

    @property
    def schemas(self) -> list[dict]:
        return [t.schema for t in self.tools.values()]

    def run(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """One result per call, in order."""
        if not self.enabled:
            return [ToolResult("Error: tools are disabled", True) for _ in calls]
        results: list[ToolResult | None] = [None] * len(calls)
        pending: list[int] = []
        for i, call in enumerate(calls):
            tool = self.tools.get(call.name)
            if tool is None:
                names = ", ".join(self.tools)
                results[i] = ToolResult(
                    f"Error: there is no tool '{call.name}'; the tools are: {names}", True
                )
                continue
            problem = tool.argument_problem(call.arguments)
            if problem:
                results[i] = ToolResult(
                    f"Error: bad arguments for '{call.name}': {problem}", True, call.name
                )
            elif tool.is_async:
                pending.append(i)
        started = start_all(
            [self.tools[calls[i].name].fn(**calls[i].arguments) for i in pending], self.timeout
        )
        waiting = set(pending)
        for i, call in enumerate(calls):
            if results[i] is None and i not in waiting:
                outcome = call_in_thread(self.tools[call.name].fn, call.arguments, self.timeout)
                results[i] = self._result(call.name, outcome)
        for i, outcome in zip(pending, started.result(), strict=True):
            results[i] = self._result(calls[i].name, outcome)
        return [r for r in results if r is not None]

    def _result(self, name: str, outcome: Outcome) -> ToolResult:
        if outcome.timed_out:
            text = f"Error: the tool '{name}' did not finish within {self.timeout:g} s"
            return ToolResult(text, True, name, outcome.seconds, timed_out=True)
        if outcome.error is not None:
            error = outcome.error
            text = result_text(f"Error: {type(error).__name__}: {error}", self.max_result_chars)
            return ToolResult(text, True, name, outcome.seconds)
        return ToolResult(
            result_text(outcome.value, self.max_result_chars), False, name, outcome.seconds
        )
