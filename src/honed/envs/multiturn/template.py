"""A tokenizer's chat template, used token-exactly for conversations with tools.

The prompt is the template's own rendering of the messages *with the tool schemas*
(`apply_chat_template(..., tools=...)`), so the model sees its tools the way it was trained to.
After that, nothing the model wrote is ever rendered or tokenised again: a trajectory is the
model's sampled ids, then the template's tokens for the tool results and the next turn's header
(`bridge_ids`), then the model's next sampled ids, and so on. Only the bridge is tokenised, and
it is found by rendering the conversation before and after the new messages and taking the
difference, starting right after the model's end-of-turn token (a template that writes `\\n`
after `<|im_end|>` gets that newline into the bridge, not into the model's turn).

Templates that ignore `tools` (SmolLM2's, for one) would hide the tools from the model; then
honed describes them itself in a system message, in the format the parser reads (`hermes`
unless `tool_format` says otherwise), and says so once in the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from honed.envs.multiturn.toolcalls import TOOL_FORMATS, ToolCall, format_calls, parse_tool_calls
from honed.errors import HonedError
from honed.types import Message

log = logging.getLogger(__name__)

_noted: set[str] = set()  # templates already reported as not rendering tools (one log line each)


def detect_format(source: str) -> str | None:
    """The tool-call format a chat template's source teaches, or `None` if it names none."""
    if "<tool_call>" in source:
        return "hermes"
    if "<|python_tag|>" in source or "ipython" in source:
        return "llama3_json"
    return None


def describe_tools(tools: Sequence[dict[str, Any]], tool_format: str) -> str:
    """A system-message description of the tools, for templates that do not render them."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = format_calls([ToolCall("<tool name>", {"<argument>": "<value>"})], tool_format)
    return (
        "You can call the tools described by these JSON schemas:\n"
        f"<tools>\n{schemas}\n</tools>\n"
        f"To call a tool, reply with:\n{example}\n"
        "Each result comes back in a tool message. When you have the answer, reply with it "
        "and no tool call."
    )


class ChatFormat:
    """How one tokenizer's chat template turns a conversation with tools into token ids.

    `end_of_turn_id` is the special token the template closes an assistant turn with (the
    policy's stop token); `tools` are the tools' JSON schemas; `tool_format` is `auto` (from
    the template's source) or one of `TOOL_FORMATS`.
    """

    def __init__(
        self,
        tokenizer: Any,
        end_of_turn_id: int | None,
        tools: Sequence[dict[str, Any]] = (),
        tool_format: str = "auto",
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise HonedError(
                "a multi-turn environment needs a tokenizer with a chat template; set "
                "policy.chat_template: true and use an instruct model (or the tiny policy)"
            )
        if end_of_turn_id is None:
            raise HonedError(
                "the chat template closes assistant turns with no special token, so honed cannot "
                "tell where a turn ends; use a model whose template does (set "
                "policy.chat_template: true)"
            )
        if tool_format != "auto" and tool_format not in TOOL_FORMATS:
            raise HonedError(
                f"tool_format must be auto or one of {', '.join(TOOL_FORMATS)}, got {tool_format!r}"
            )
        self.tokenizer = tokenizer
        self.end_of_turn_id = int(end_of_turn_id)
        self.end_of_turn = tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
        self.tools = list(tools)
        self.renders_tools = not self.tools or self._renders_tools()
        source = str(tokenizer.chat_template)
        if tool_format == "auto":
            found = detect_format(source) if self.renders_tools else "hermes"
            if found is None and not self.tools:
                found = "hermes"  # nothing to describe; a call written anyway is read as Hermes'
            if found is None:
                raise HonedError(
                    "cannot tell which tool-call format this chat template teaches (no "
                    "<tool_call> or <|python_tag|> in it); set the environment's tool_format "
                    f"to one of {', '.join(TOOL_FORMATS)}"
                )
            tool_format = found
        self.tool_format = tool_format
        self.tool_note = None if self.renders_tools else describe_tools(self.tools, tool_format)
        if self.tool_note and source not in _noted:
            _noted.add(source)
            log.info(
                "the chat template does not render tools; honed describes them in a system "
                "message in the %s format",
                tool_format,
            )

    # ------------------------------------------------------------------ rendering

    def _renders_tools(self) -> bool:
        probe = [{"role": "user", "content": "honed-tools-probe"}]
        with_tools = self._apply(probe, True, self.tools)
        return with_tools != self._apply(probe, True, None)

    def _apply(
        self, messages: list[Message], generation: bool, tools: list[dict[str, Any]] | None
    ) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=generation, tokenize=False
            )
        except Exception as exc:  # jinja errors and the templates' own raise_exception
            raise HonedError(
                f"the chat template could not render the conversation: {type(exc).__name__}: {exc}"
            ) from exc
        return str(text)

    def with_tools(self, messages: list[Message]) -> list[Message]:
        """The messages as the template sees them: with honed's tool description in the system
        message when the template does not render tools itself."""
        if self.tool_note is None:
            return list(messages)
        if messages and messages[0]["role"] == "system":
            system = {**messages[0], "content": messages[0]["content"] + "\n\n" + self.tool_note}
            return [system, *messages[1:]]
        return [{"role": "system", "content": self.tool_note}, *messages]

    def render(self, messages: list[Message], generation: bool) -> str:
        tools = self.tools if self.renders_tools and self.tools else None
        return self._apply(self.with_tools(messages), generation, tools)

    def tokenize(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        """Text of model ids, as the policy decodes its samples (special tokens dropped)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    # ------------------------------------------------------------------ token ids

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The prompt's ids: the conversation with the tools and the generation prompt."""
        return self.tokenize(self.render(messages, True))

    def bridge_ids(self, history: list[Message], new: list[Message]) -> list[int]:
        """The template's ids between the model's end-of-turn token (the last token of
        `history`'s last assistant turn) and the model's next turn: `new` (tool results, a user
        reply) and the next generation prompt."""
        before = self.render(history, False)
        after = self.render([*history, *new], True)
        if not after.startswith(before):
            raise HonedError(
                "the chat template renders earlier messages differently once more follow (it "
                "is not prefix-preserving), so a conversation cannot be continued token-exactly"
            )
        cut = before.rfind(self.end_of_turn)
        if cut < 0:
            raise HonedError(
                f"the chat template does not close the assistant's turn with {self.end_of_turn!r}"
            )
        return self.tokenize(before[cut + len(self.end_of_turn) :] + after[len(before) :])

    def assistant_ids(self, history: list[Message], message: Message) -> list[int]:
        """A reference assistant turn as the model should write it, with its end-of-turn token:
        the template's own rendering of the message (tool calls included) when it renders
        them, else its content followed by the calls in `tool_format`."""
        return [*self.tokenize(self.assistant_text(history, message)), self.end_of_turn_id]

    def assistant_text(self, history: list[Message], message: Message) -> str:
        calls = [_call_of(c) for c in message.get("tool_calls") or []]
        content = message.get("content") or ""
        before = self.render(history, True)
        # A message with tool calls may have no `content` (OpenAI's format allows it); templates
        # that read it unguarded (SmolLM2's) would fail on it.
        after = self.render([*history, {**message, "content": content}], False)
        if after.startswith(before):
            body = after[len(before) :]
            end = body.find(self.end_of_turn)
            body = body if end < 0 else body[:end]
            read = parse_tool_calls(body, self.tool_format)
            same = [(c.name, c.arguments) for c in read.calls] == [
                (c.name, c.arguments) for c in calls
            ]
            if same and not read.errors and content.strip() in body:
                return body  # the template's own writing, and it reads back as these calls
        return "\n".join(p for p in (content, format_calls(calls, self.tool_format)) if p)


def _call_of(entry: dict[str, Any]) -> ToolCall:
    """A `ToolCall` from an OpenAI `tool_calls` entry (arguments as an object or JSON text)."""
    function = entry.get("function", entry)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    return ToolCall(str(function["name"]), dict(arguments), str(entry.get("id", "")))
