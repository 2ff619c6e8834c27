"""verifiers' turn methods, called by honed's own loop in the order verifiers' rollout calls them.

`MultiTurnEnv.rollout` is, per episode: `init_state`, `setup_state`, then until `is_completed`:
the next prompt (the first turn's is the dataset prompt, later ones the conversation so far and
`env_response`'s messages), a model response, `add_model_response`; then `cleanup` (which renders
`state["completion"]`) and, for a group, `rubric.score_group`. honed runs exactly these steps with
the model response replaced by its own sample, so every stop condition, `env_response`, tool,
state update and reward function of the environment runs as written, while the tokens stay
honed's:

- **policy episodes** (`run_policy`): all episodes of a batch advance a turn at a time in one
  batched `generate` call; a turn's ids are the sampled ids, the environment's messages are
  bridged in by the chat template (masked), and nothing the model wrote is tokenised again
  (`honed.envs.multiturn`). Tool calls are read from the turn in the template's format and
  handed to the environment as verifiers' `ToolCall`s.
- **chat sessions** (`open_chats`, `advance_chats`, `replay`): the skill loop's target, a served
  chat model, answers instead, through the server's native tool calling.

honed's limits are verifiers' own: the policy's budget of model tokens over an episode (the
trainer's `max_completion_length`) is the environment's `max_total_completion_tokens` while honed
rolls it out (the smaller, if it sets one), so its `max_total_completion_tokens_reached` stop
condition ends an episode whose budget ran out (the turn cut there is truncated, as verifiers
marks a response cut at its length limit); the turn limit is the environment's `max_turns`
(`VerifiersEnv` gives one to an environment that has none). honed names one end of its own in
`state["stop_condition"]`: `end`, when the model ends the sequence with a token that does not
close a turn, so the chat template cannot go on. A `vf.Error` raised by the environment ends
the episode as verifiers' loop does (its `has_error` stop condition); any other exception stops
the run, naming the method and the item.

Every coroutine runs on honed's background event loop (`honed.envs.aio`), so clients the
environment created once stay on one loop across steps.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.envs.aio import background_loop
from honed.envs.multiturn import (
    TOOL_FORMATS,
    ChatFormat,
    ChatGenerator,
    Episode,
    chat_format,
    parse_tool_calls,
)
from honed.envs.multiturn.episode import END, LENGTH
from honed.envs.verifiers import messages as convert
from honed.errors import HonedError
from honed.types import Item, Message, Sample, derive_seed

# A recorded conversation that stopped while the environment expected another turn.
CUT_SHORT = "cut_short"


@dataclass
class Run:
    """One episode: its verifiers state and, for the policy, its token-exact `Episode`."""

    item: Item
    generation: int
    state: Any
    prompt: list[Any] = field(default_factory=list)  # what the next model turn answers
    chat: Any = None  # ChatFormat, or _Completion for a text prompt
    episode: Episode | None = None
    tools: bool = False
    format_errors: int = 0
    exchanged: list[Message] = field(default_factory=list)  # a chat session's messages
    rubric_errors: list[str] = field(default_factory=list)


class _Completion:
    """A completion-style prompt (text, verifiers' `TextMessage`): one turn, which the policy's
    end token closes; there is no template to continue the conversation with."""

    def __init__(self, policy: Any, where: str) -> None:
        self.end_of_turn_id = policy.end_id
        self.decode = policy.decode
        self.where = where

    def bridge_ids(self, history: list[Message], new: list[Message]) -> list[int]:
        raise HonedError(
            f"{self.where}: the environment answered a completion-style (text) prompt, which "
            "has no chat template to continue the conversation with; give multi-turn "
            "environments chat prompts"
        )


class _RubricErrors(logging.Handler):
    """The errors a rubric logs while scoring: verifiers scores a reward function that raises
    0 and only logs it, so honed counts them (`reward/<env>/rubric_errors`) and warns."""

    def __init__(self, rubric: Any) -> None:
        super().__init__(logging.ERROR)
        self.loggers = [r.logger for r in _rubrics(rubric)]
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> _RubricErrors:
        for logger in self.loggers:
            logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for logger in self.loggers:
            logger.removeHandler(self)


def _rubrics(rubric: Any) -> list[Any]:
    inner = getattr(rubric, "rubrics", None)
    if not isinstance(inner, list):
        return [rubric]
    return [rubric, *(r for sub in inner for r in _rubrics(sub))]


def _client_class(vf: Any) -> type:
    """A verifiers `Client` that never answers: `init_state` wants one, and honed samples the
    policy itself. An environment that asks it for a response (calling `get_model_response`
    from its own methods) gets an error that says so."""

    class HonedSamples(vf.Client):
        where = "a verifiers environment"

        def setup_client(self, config: Any) -> None:
            return None

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise HonedError(
                f"{self.where} asked verifiers' client for a model response (get_model_response "
                "from its own methods); honed samples the policy itself and offers no client"
            )

        async def to_native_tool(self, tool: Any) -> Any:
            return await self.get_response()

        async def to_native_prompt(self, messages: Any) -> Any:
            return await self.get_response()

        async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
            return await self.get_response()

        async def raise_from_native_response(self, response: Any) -> None:
            await self.get_response()

        async def from_native_response(self, response: Any) -> Any:
            return await self.get_response()

        async def close(self) -> None:
            return None

    return HonedSamples


class Turns:
    """One verifiers environment's turn methods (see the module docstring)."""

    def __init__(self, vf: Any, env: Any, where: str) -> None:
        from verifiers.utils.message_utils import maybe_normalize_messages

        self.vf = vf
        self.env = env
        self.where = where
        self.client = _client_class(vf)(None)
        self.client.where = where
        self.normalize = maybe_normalize_messages

    # ------------------------------------------------------------------ plumbing

    def run(self, awaitables: Sequence[Awaitable[Any]]) -> list[Any]:
        """Await all on the background loop, concurrently; their results in order."""

        async def gather() -> list[Any]:
            return list(await asyncio.gather(*awaitables))

        if not awaitables:
            return []
        return asyncio.run_coroutine_threadsafe(gather(), background_loop()).result()

    def _fail(self, method: str, item: Item, exc: BaseException) -> HonedError:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return HonedError(f"{self.where}: {method} raised {reason} (item '{item.key}')")

    async def _call(self, method: str, run: Run, awaitable: Awaitable[Any]) -> Any:
        """The environment's own coroutine; a `vf.Error` is the episode's error (its
        `has_error` stop condition ends it), anything else stops the run."""
        try:
            return await awaitable
        except HonedError:
            raise
        except self.vf.Error as exc:
            if isinstance(exc, self.vf.OverlongPromptError):
                run.state["prompt_too_long"] = True
                run.state["is_truncated"] = True
            else:
                run.state["error"] = exc
            return None
        except Exception as exc:
            raise self._fail(method, run.item, exc) from exc

    @staticmethod
    def _stop(state: Any, reason: str, truncated: bool) -> None:
        state["is_completed"] = True
        state["stop_condition"] = reason
        if truncated:
            state["is_truncated"] = True

    # ------------------------------------------------------------------ the turn methods

    async def start(self, item: Item, generation: int = 0) -> Run:
        """`init_state` from the item's dataset row, then the environment's `setup_state`."""
        try:
            state = await self.env.init_state(dict(item.data), self.client, "honed", None)
        except Exception as exc:
            raise self._fail("init_state", item, exc) from exc
        run = Run(item, generation, state)
        replaced = await self._call("setup_state", run, self.env.setup_state(state))
        if replaced is not None:
            run.state = replaced
        run.prompt = list(run.state["prompt"])
        return run

    async def prepare(self, run: Run, cut: str | None = None) -> list[Any] | None:
        """The messages the next model turn follows (none before the first), or `None` when the
        episode is over: the environment's stop conditions first, then the end `cut` honed saw
        in the last turn (`length`, `end`), then `env_response` (which may end it too)."""
        state = run.state
        if await self._completed(run):
            return None
        if cut is not None:
            self._stop(state, cut, cut == LENGTH)
            return None
        if not state["trajectory"]:
            return []
        last = state["trajectory"][-1]
        messages = [*last["prompt"], *last["completion"]]
        reply = await self._call("env_response", run, self.env.env_response(messages, state))
        if reply is None or state.get("final_env_response") is not None:
            await self._completed(run)
            return None
        reply = self.normalize(reply, field_name="env_response")
        run.prompt = [*messages, *reply]
        return list(reply)

    async def _completed(self, run: Run) -> bool:
        try:
            return bool(await self.env.is_completed(run.state))
        except Exception as exc:
            raise self._fail("is_completed", run.item, exc) from exc

    async def take(self, run: Run, response: Any) -> None:
        """The model's turn into the state, as verifiers records a client's response."""
        self.env.increment_state_usage_from_response(run.state, response)
        await self._call(
            "add_model_response", run, self.env.add_model_response(run.state, run.prompt, response)
        )

    async def finish(self, run: Run) -> None:
        """`cleanup`: the environment's cleanup handlers, which render `state["completion"]`."""
        try:
            await self.env.cleanup(run.state)
        except Exception as exc:
            raise self._fail("cleanup", run.item, exc) from exc

    async def score(self, groups: Sequence[Sequence[Run]]) -> None:
        """Each group's rewards and metrics by the rubric, as verifiers scores a group. Groups
        are scored one after another (the states of a group concurrently, as verifiers does),
        so the errors the rubric logs are each group's own."""
        for group in groups:
            await self._score(group)

    async def _score(self, runs: Sequence[Run]) -> None:
        states = [r.state for r in runs]
        rubric = self.env.rubric
        with _RubricErrors(rubric) as errors:
            try:
                if self.env.score_rollouts:
                    await rubric.score_group(states)
                else:
                    await rubric.dummy_score_group(states)
                for state in states:
                    await rubric.cleanup(state)
            except Exception as exc:
                raise self._fail("the rubric", runs[0].item, exc) from exc
        for run in runs:
            run.rubric_errors = list(errors.messages)

    # ------------------------------------------------------------------ chat sessions

    async def replay(self, item: Item, conversation: Sequence[Message], cut: bool) -> Run:
        """A conversation that happened elsewhere (a cached answer of the skill loop's target)
        played through a fresh state: its assistant turns are the responses, the environment
        answers them again, so its state is what the rubric reads."""
        run = await self.start(item)
        turns = [m for m in conversation if isinstance(m, dict) and m.get("role") == "assistant"]
        for k, message in enumerate(turns):
            if await self.prepare(run) is None:
                break
            truncated = cut and k == len(turns) - 1
            reply = convert.response(
                self.vf, convert.from_openai(self.vf, message), truncated, 0, 0
            )
            await self.take(run, reply)
        else:
            if await self.prepare(run, LENGTH if cut else None) is not None:
                self._stop(run.state, CUT_SHORT, False)
        await self.finish(run)
        return run


# ---------------------------------------------------------------------- the policy's episodes


def open_episode(
    turns: Turns,
    run: Run,
    generator: ChatGenerator,
    formats: dict[str, ChatFormat],
    tool_format: str,
) -> None:
    """The run's prompt ids: the chat template's rendering of its prompt messages with its
    tools, or a completion-style text prompt tokenised as it is."""
    prompt = run.state["prompt"]
    schemas = convert.tool_schemas(run.state.get("tool_defs") or [])
    run.tools = bool(schemas)
    if len(prompt) == 1 and prompt[0].get("role") == "text":
        if schemas:
            raise HonedError(
                f"{turns.where}: item '{run.item.key}' offers tools with a completion-style "
                "(text) prompt; tools need chat prompts"
            )
        policy = generator.policy
        text = convert.text_of(prompt[0].get("content"), turns.where)
        run.chat = _Completion(policy, turns.where)
        run.episode = Episode([], [int(i) for i in policy.tokenizer(text)["input_ids"]])
        return
    key = json.dumps(schemas, sort_keys=True)
    if key not in formats:  # without tools no call is read, so the template need teach none
        formats[key] = chat_format(
            generator, turns.where, schemas, tool_format if schemas else TOOL_FORMATS[0]
        )
    run.chat = formats[key]
    messages = convert.openai_messages(prompt, turns.where)
    run.episode = Episode(messages, run.chat.prompt_ids(messages))


def model_turn(turns: Turns, run: Run, sample: Sample, budget: int) -> Any:
    """The sampled turn appended to the episode (cut to the budget left), and the
    `vf.Response` it is to the environment: its text, its tool calls and its exact ids."""
    episode = run.episode
    assert episode is not None
    before = len(episode.ids)
    context = episode.context()
    turn = episode.add_model_turn(sample, budget - episode.model_tokens, run.chat)
    ids, logprobs = episode.ids[before:], episode.logprobs[before:]
    if run.tools:
        parsed = parse_tool_calls(turn.text, run.chat.tool_format)
        index = len(run.state["trajectory"])
        message, unreadable = convert.from_parsed(turns.vf, parsed, turn.text, index)
        run.format_errors += int(unreadable)
    else:
        message = turns.vf.AssistantMessage(content=turn.text)
    truncated = episode.truncated
    return convert.response(
        turns.vf, message, truncated, len(context), len(ids), (context, ids, logprobs)
    )


def run_policy(
    turns: Turns,
    items: Sequence[Item],
    generator: Any,
    num_generations: int,
    seed: int,
    tool_format: str,
) -> list[list[Run]]:
    """`num_generations` scored episodes per item, grouped by item (see the module docstring).

    The token budget is the generator's `max_tokens` over the whole episode (the model's tokens
    only), as in honed's `tools` environment; each turn is seeded from (seed, item, generation,
    turn), so an episode is the same in any batch or process."""
    if not isinstance(generator, ChatGenerator) or not hasattr(generator.policy, "tokenizer"):
        raise HonedError(
            f"{turns.where} runs episodes token by token and needs a generator backed by a "
            f"policy (its tokenizer and chat template); got {type(generator).__name__}"
        )
    budget = int(generator.params.max_tokens)
    own = turns.env.max_total_completion_tokens
    turns.env.set_max_total_completion_tokens(budget if own <= 0 else min(own, budget))
    try:
        return _run_policy(turns, items, generator, num_generations, seed, tool_format, budget)
    finally:
        turns.env.set_max_total_completion_tokens(own)


def _run_policy(
    turns: Turns,
    items: Sequence[Item],
    generator: Any,
    num_generations: int,
    seed: int,
    tool_format: str,
    budget: int,
) -> list[list[Run]]:
    runs: list[Run] = turns.run([turns.start(i, g) for i in items for g in range(num_generations)])
    formats: dict[str, ChatFormat] = {}
    for run in runs:
        open_episode(turns, run, generator, formats, tool_format)
    live = list(runs)
    turn = 0
    while live:
        cuts = []
        for run in live:
            episode = run.episode
            assert episode is not None
            if not episode.done and episode.model_tokens >= budget:
                episode.stop = LENGTH
            cuts.append(episode.stop if episode.stop in (LENGTH, END) else None)
        replies = turns.run([turns.prepare(r, c) for r, c in zip(live, cuts, strict=True)])
        going = []
        for run, reply in zip(live, replies, strict=True):
            if reply is None:
                continue
            if reply:
                run.episode.add_reply(convert.openai_messages(reply, turns.where), run.chat)  # type: ignore[union-attr]
            going.append(run)
        live = going
        if not live:
            break
        samples = generator.generate(
            [r.episode.context() for r in live],  # type: ignore[union-attr]
            [derive_seed(seed, r.item.key, r.generation, turn) for r in live],
        )
        responses = [model_turn(turns, r, s, budget) for r, s in zip(live, samples, strict=True)]
        turns.run([turns.take(r, x) for r, x in zip(live, responses, strict=True)])
        turn += 1
    turns.run([turns.finish(r) for r in runs])
    groups = [runs[i : i + num_generations] for i in range(0, len(runs), num_generations)]
    turns.run([turns.score(groups)])
    return groups
