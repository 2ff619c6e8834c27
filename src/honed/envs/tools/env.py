"""`ToolEnv` (type `tools`): the user's tasks, tools and rewards, in multi-turn episodes.

    envs:
      - name: lookup
        type: tools
        args:
          path: data.jsonl                 # `prompt` (text) or `messages` (chat), any columns
          tools: [my_tools:lookup, my_tools:calculator]
          reward: [my_rewards:correct, my_rewards:format]
          reward_weights: [1.0, 0.2]
          max_turns: 6
          tool_timeout: 10                 # seconds per call

Each episode starts from the row's prompt, rendered by the policy's chat template with the
tools' schemas. A turn with tool calls gets the results back as `tool` messages (errors
included: an unknown tool, bad arguments, an exception, a timeout or an unreadable call is an
error message and the episode goes on); a turn without calls is the final answer. Rollouts are
token-exact (`honed.envs.multiturn`): only the model's tokens are trained on.

Reward functions have TRL's signature and receive, per completion, `prompts` (the row's prompt
as written), `completions` (the messages after the prompt: assistant turns with `tool_calls`,
`tool` results, and the final answer last, so `completion[-1]["content"]` is the answer when
the episode ended on one), `completion_ids` (the episode's ids after the prompt, tool results
included), `messages` (the whole conversation), `trajectory` (turns, calls, results, why it
ended) and every column of the row.

`reference_field` names a column holding a reference conversation (OpenAI messages after the
prompt: assistant turns with `tool_calls`, then the final assistant answer; tool messages may
be left out, since the tools are run to fill them in): warm-start trains on it, token-exact,
and `honed eval` reports it as the reference solver. `baselines` names functions
(`{label: module:function}`) that map a row to an answer without the policy: the simplest rules
a trained agent must beat, reported beside it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from honed.envs.base import Generator, Table
from honed.envs.dataset import RESERVED, JsonlData, scores_of
from honed.envs.multiturn import (
    ChatFormat,
    Episode,
    chat_format,
    openai_call,
    parse_tool_calls,
    run_episodes,
)
from honed.envs.multiturn.episode import ANSWER, LENGTH, MAX_TURNS, Turn
from honed.envs.tools.functions import load_tools
from honed.envs.tools.report import episode_row, tool_report
from honed.envs.tools.toolbox import ToolBox
from honed.errors import HonedError, finite_number, positive_int
from honed.reach import ImportSpec
from honed.text import valid_text
from honed.types import Group, Item, Message, Prompt, Sample, Trajectory, derive_seed, prompt_text
from honed.user_code import load_object

# What multi-turn environments pass to reward functions beside TRL's arguments.
MULTI_TURN_ARGS = ("messages", "trajectory")
TOOL_ERROR_NAME = "tool_call_error"  # the `name` of the tool message an unreadable call gets


def _prompt_field(path: str, prompt_field: str | None) -> str:
    """`prompt_field` as given, else `prompt`, or `messages` when the file's first row has that
    and no `prompt`."""
    if prompt_field is not None:
        return prompt_field
    try:
        with Path(path).open("rb") as lines:
            for raw in lines:
                if raw.strip():
                    first = json.loads(raw)
                    break
            else:
                first = {}
    except (OSError, ValueError):
        return "prompt"  # reading the file again reports the problem with its line number
    if isinstance(first, dict) and "prompt" not in first and "messages" in first:
        return "messages"
    return "prompt"


class ToolEnv(JsonlData):
    """Tasks from a JSONL file, solved with tools over several turns (see the module docstring)."""

    type_name = "tools"

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        path: str,
        tools: list[str],
        reward: Any,
        reward_weights: Any = None,
        reward_timeout: float | None = 60.0,
        max_turns: int = 4,
        tool_timeout: float = 10.0,
        tool_format: str = "auto",
        max_turn_tokens: int | None = None,
        max_result_chars: int = 4000,
        system_prompt: str | None = None,
        prompt_field: str | None = None,
        reference_field: str | None = None,
        baselines: dict[str, str] | None = None,
        test_path: str | None = None,
        validation_path: str | None = None,
        test_fraction: float = 0.1,
        validation_fraction: float = 0.0,
        success_threshold: float = 1.0,
    ) -> None:
        super().__init__(name, seed, _prompt_field(path, prompt_field))
        self.max_turns = positive_int(self.where, "max_turns", max_turns)
        self.max_turn_tokens = (
            None
            if max_turn_tokens is None
            else positive_int(self.where, "max_turn_tokens", max_turn_tokens)
        )
        self.tool_timeout = finite_number(self.where, "tool_timeout", tool_timeout)
        if self.tool_timeout <= 0:
            raise self._fail(f"tool_timeout must be positive, got {tool_timeout!r}")
        self.max_result_chars = positive_int(self.where, "max_result_chars", max_result_chars)
        self.tool_format = tool_format
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise self._fail(f"system_prompt must be text, got {system_prompt!r}")
        self.system_prompt = system_prompt
        self.success_threshold = finite_number(self.where, "success_threshold", success_threshold)
        rows = self._load(path, test_path, validation_path, test_fraction, validation_fraction)
        reserved = (*RESERVED, *MULTI_TURN_ARGS)
        self._score_columns(rows, reserved, reference_field, reward, reward_weights, reward_timeout)
        self.tool_specs = tools
        self.baseline_specs = dict(baselines or {})
        self._load_code()

    def _load_code(self) -> None:
        self.toolbox = ToolBox(
            load_tools(self.tool_specs, self.where), self.tool_timeout, self.max_result_chars
        )
        self.baselines = {}
        for label, spec in self.baseline_specs.items():
            fn = load_object(ImportSpec.named(spec, "baseline"), "baseline")
            if not callable(fn):
                raise self._fail(f"baseline '{label}' ({spec}) is not callable")
            self.baselines[str(label)] = fn

    def __getstate__(self) -> dict[str, Any]:
        # tools and baselines loaded from files cannot be pickled by reference; a Ray worker
        # imports them again
        state = dict(self.__dict__)
        del state["toolbox"], state["baselines"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._load_code()

    # ------------------------------------------------------------------ prompts

    def prompt(self, item: Item) -> list[Message]:
        """The row's prompt as chat messages (a text prompt is the user's turn), after the
        environment's system prompt unless the row has its own."""
        prompt: Prompt = item.data[self.prompt_field]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        return [dict(m) for m in messages]

    def chat(self, generator: object) -> ChatFormat:
        return chat_format(generator, self.where, self.toolbox.schemas, self.tool_format)

    # ------------------------------------------------------------------ rollouts

    def rollout(
        self,
        items: Sequence[Item],
        generator: Generator,
        num_generations: int,
        seed: int,
        first_generation: int = 0,
        *,
        tools_disabled: bool = False,
    ) -> list[Group]:
        """One group per item (generations `first_generation`, ... of each, seeded as in the
        whole group); with `tools_disabled`, every call gets an error back (the evaluation's
        "no tools" baseline)."""
        chat = self.chat(generator)
        toolbox = self.toolbox.disabled() if tools_disabled else self.toolbox
        episodes = self.start(items, num_generations, chat)
        generations = range(first_generation, first_generation + num_generations)
        flat = [(item, g) for item in items for g in generations]
        run_episodes(
            episodes,
            generator,  # type: ignore[arg-type]  # chat_format checked it is a ChatGenerator
            chat,
            lambda i, turn: derive_seed(seed, flat[i][0].key, flat[i][1], turn),
            lambda took: self.respond(took, chat, toolbox),
            self.max_turns,
            self.max_turn_tokens,
        )
        trajectories = self.trajectories([item for item, _ in flat], episodes)
        return [
            Group(
                self.name,
                item.key,
                trajectories[i * num_generations : (i + 1) * num_generations],
                level=item.level,
            )
            for i, item in enumerate(items)
        ]

    def start(self, items: Sequence[Item], copies: int, chat: ChatFormat) -> list[Episode]:
        """`copies` fresh episodes per item, sharing the item's prompt ids."""
        episodes = []
        for item in items:
            prompt = self.prompt(item)
            ids = chat.prompt_ids(prompt)
            episodes += [Episode(prompt, ids) for _ in range(copies)]
        return episodes

    def respond(
        self, episodes: list[Episode], chat: ChatFormat, toolbox: ToolBox | None = None
    ) -> list[list[Message] | None]:
        """Parse each episode's new turn; run the calls of the episodes still going (all
        together); their tool messages, or `None` for a final answer."""
        parsed = []
        calls, owners = [], []
        for episode in episodes:
            turn = episode.turns[-1]
            found = parse_tool_calls(turn.text, chat.tool_format)
            index = len(episode.turns) - 1
            for j, call in enumerate(found.calls):
                call.id = f"call_{index}_{j}"
            turn.content, turn.calls = found.content, found.calls
            turn.format_errors, turn.repaired = found.errors, found.repaired
            message: Message = {"role": "assistant", "content": found.content}
            if found.calls:
                message["tool_calls"] = [c.message() for c in found.calls]
            episode.messages.append(message)
            parsed.append(found)
            if not episode.done and not found.final:
                calls += found.calls
                owners += [episode] * len(found.calls)
        results = iter((toolbox or self.toolbox).run(calls))
        replies: list[list[Message] | None] = []
        for episode, found in zip(episodes, parsed, strict=True):
            if episode.done or found.final:
                replies.append(None)
                continue
            turn = episode.turns[-1]
            messages: list[Message] = []
            for call in found.calls:
                result = next(results)
                turn.results.append(
                    {
                        "name": call.name,
                        "content": result.content,
                        "error": result.error,
                        "tool": result.tool,
                        "seconds": result.seconds,
                    }
                )
                messages.append(
                    {
                        "role": "tool",
                        "name": call.name,
                        "tool_call_id": call.id,
                        "content": result.content,
                    }
                )
            for problem in found.errors:
                messages.append(
                    {"role": "tool", "name": TOOL_ERROR_NAME, "content": f"Error: {problem}"}
                )
            episode.messages += messages
            replies.append(messages)
        return replies

    # ------------------------------------------------------------------ scoring

    def trajectories(self, items: Sequence[Item], episodes: list[Episode]) -> list[Trajectory]:
        """Score finished episodes with the reward functions (all in one batch)."""
        if not episodes:
            return []
        kwargs: dict[str, list[Any] | None] = {
            "prompts": [item.data[self.prompt_field] for item in items],
            "completions": [list(e.messages) for e in episodes],
            "completion_ids": [list(e.ids) for e in episodes],
            "messages": [[*e.prompt, *e.messages] for e in episodes],
            "trajectory": [e.trajectory() for e in episodes],
        }
        for column in self.columns:
            kwargs[column] = [item.data.get(column) for item in items]
        scores = scores_of(self.rewards(items, kwargs), self.success_threshold)
        out = []
        for episode, score in zip(episodes, scores, strict=True):
            records = [
                {"tool": r["tool"], "error": r["error"], "seconds": r["seconds"]}
                for turn in episode.turns
                for r in turn.results
            ]
            out.append(
                Trajectory(
                    segments=[episode.segment()],
                    reward=score.reward,
                    success=score.success,
                    components=score.components,
                    prompt_text=prompt_text(episode.prompt),
                    completion_text=transcript(episode),
                    info={**score.info, "tool_calls": records, "episode": episode.trajectory()},
                )
            )
        return out

    def score_conversations(
        self,
        items: Sequence[Item],
        conversations: Sequence[Sequence[Message]],
        truncated: Sequence[bool] | None = None,
    ) -> list[Trajectory]:
        """Score episodes that happened elsewhere: each conversation is the OpenAI messages after
        the item's prompt (assistant turns with wire-format `tool_calls`, `tool` messages
        answering them by `tool_call_id`), as the skill loop's target produced them through a
        server's native tool calling. Scored by the same reward functions, with the same
        `trajectory` records, as a rollout of the policy."""
        truncated = truncated or [False] * len(items)
        episodes = [
            self.episode_from_messages(item, list(messages), cut)
            for item, messages, cut in zip(items, conversations, truncated, strict=True)
        ]
        return self.trajectories(items, episodes)

    def episode_from_messages(self, item: Item, messages: list[Message], cut: bool) -> Episode:
        """An `Episode` (without tokens) from a conversation after the prompt. A call that
        cannot be read is a format error; a result counts as an error when it starts with
        `Error:` (how the toolbox reports every failure); the episode ended on an answer when
        its last assistant turn called nothing, else it ran out of turns (or was cut)."""
        episode = Episode(self.prompt(item), [])
        answers = {
            m.get("tool_call_id"): _text(m.get("content"))
            for m in messages
            if isinstance(m, dict) and m.get("role") == "tool"
        }
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            content = _text(message.get("content"))
            turn = Turn(content, content=content)
            entries = message.get("tool_calls") or []
            replies: list[Message] = []
            for entry in entries if isinstance(entries, list) else [entries]:
                call, problem = openai_call(entry)
                result = answers.get(call.id if call else _entry_id(entry))
                if call is None:
                    turn.format_errors.append(problem)
                    name = TOOL_ERROR_NAME
                else:
                    turn.calls.append(call)
                    name = call.name
                    if result is not None:
                        known = call.name if call.name in self.toolbox.tools else None
                        error = result.startswith("Error:")
                        turn.results.append(
                            {
                                "name": name,
                                "content": result,
                                "error": error,
                                "tool": known,
                                "seconds": 0.0,
                            }
                        )
                if result is not None:
                    reply = {"role": "tool", "name": name, "content": result}
                    replies.append({**reply, "tool_call_id": call.id if call else ""})
            episode.turns.append(turn)
            record: Message = {"role": "assistant", "content": content}
            if turn.calls:
                record["tool_calls"] = [c.message() for c in turn.calls]
            episode.messages += [record, *replies]
        last = episode.turns[-1] if episode.turns else None
        final = last is not None and not (last.calls or last.format_errors)
        episode.stop = LENGTH if cut else ANSWER if final else MAX_TURNS
        return episode

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """Per episode: turns, tool calls, share that used a tool, tool error rate (calls that
        failed and unreadable calls, over all attempted), truncation rate, share that ran out of
        turns; and the reward functions' timeouts and unreadable verdicts."""
        episodes = [
            t.info["episode"] for g in groups for t in g.trajectories if "episode" in t.info
        ]
        out = {f"episodes/{self.name}/{k}": v for k, v in episode_row(episodes).items()}
        return {**out, **self.reward_metrics(groups)}

    # ------------------------------------------------------------------ references

    def sft_examples(self, item: Item) -> list[tuple[Prompt, str]]:
        """None: a multi-turn reference is a token sequence with a mask (`sft_sequences`)."""
        return []

    def sft_sequences(
        self, item: Item, policy: Any
    ) -> list[tuple[list[int], list[int], list[int]]]:
        """The reference conversation as (prompt ids, ids after the prompt, loss mask)."""
        episode = self.reference_episode(item, self.chat_for_policy(policy))
        return [] if episode is None else [(episode.prompt_ids, episode.ids, episode.mask)]

    def chat_for_policy(self, policy: Any) -> ChatFormat:
        if not getattr(policy, "chat_template", False):
            raise HonedError(
                f"{self.where} renders conversations with the chat template: set "
                "policy.chat_template: true"
            )
        return ChatFormat(
            policy.tokenizer, policy.end_of_turn_id, self.toolbox.schemas, self.tool_format
        )

    def reference_turns(self, item: Item) -> list[Message] | None:
        """The row's reference assistant turns, checked (`None` without a reference)."""
        if self.reference_field is None or item.data.get(self.reference_field) is None:
            return None
        value = item.data[self.reference_field]
        turns = [m for m in value if isinstance(m, dict) and m.get("role") == "assistant"]
        if not isinstance(value, list) or not turns:
            raise HonedError(
                f"{self.where}: item '{item.key}': the reference '{self.reference_field}' must be "
                "a list of chat messages with at least one assistant turn"
            )
        return turns

    def reference_episode(self, item: Item, chat: ChatFormat) -> Episode | None:
        """The reference replayed through the same code as a rollout: its turns as the template
        writes them, parsed back, the tools run, the results bridged in."""
        turns = self.reference_turns(item)
        if turns is None:
            return None
        prompt = self.prompt(item)
        episode = Episode(prompt, chat.prompt_ids(prompt))
        for message in turns:
            history = [*prompt, *episode.history]
            ids = chat.assistant_ids(history, message)
            text = chat.decode(ids[:-1])
            episode.add_model_turn(Sample([], ids, [0.0] * len(ids), text, False), len(ids), chat)
            reply = self.respond([episode], chat)[0]
            if reply is None:
                episode.stop = ANSWER
                return episode
            episode.add_reply(reply, chat)
        raise HonedError(
            f"{self.where}: item '{item.key}': the reference ends with tool calls; its last "
            "assistant turn must be the final answer"
        )

    # ------------------------------------------------------------------ evaluation

    def report(
        self,
        agents: Mapping[str, Generator],
        split: str = "test",
        num_items: int | None = None,
        seed: int = 0,
    ) -> Table:
        """The reference solver, the `baselines` rules, and each agent with and without its
        tools, on the same items (`report.py`)."""
        return tool_report(self, agents, list(self.items(split))[:num_items], seed)


def _text(content: Any) -> str:
    """A message's `content` as text (`None`, as with tool calls, is empty)."""
    return valid_text(content) if isinstance(content, str) else ""


def _entry_id(entry: Any) -> str | None:
    ident = entry.get("id") if isinstance(entry, dict) else None
    return ident if isinstance(ident, str) else None


def transcript(episode: Episode) -> str:
    """The episode for people (samples.jsonl, the run viewer): each turn and its results."""
    lines = []
    for turn in episode.turns:
        lines.append(f"> {turn.text}")
        lines += [f"= {r['content']}" for r in turn.results]
        lines += [f"= Error: {e}" for e in turn.format_errors]
    lines.append(f"[{episode.stop}]")
    return "\n".join(lines)
