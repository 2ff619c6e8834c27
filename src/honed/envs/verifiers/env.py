"""`VerifiersEnv` (type `verifiers`): a verifiers environment, trained on as it is.

    envs:
      - name: wordle
        type: verifiers
        args:
          env: my_verifiers_env          # a package or module with load_environment, or a .py file
          env_args: {num_train_examples: 200}

The environment comes from its own `load_environment(**env_args)` (`loading.py`). honed takes
from it:

- **items**: its dataset's rows (`prompt` as chat messages or text, `answer`, `info`, `task`,
  any other column; the system prompt and few-shot turns are in the prompt, where verifiers
  puts them), keyed by a hash of the prompt; its eval dataset is the test split, or, when it
  has none, a `test_fraction` of the rows cut by that hash. Splits never share a prompt.
- **rewards**: its rubric, scoring each group as verifiers does (every function and weight,
  sync or async, group-level ones), so the reward is the rubric's; every metric the rubric
  reports, weight 0 included, is a reward component logged as `reward/<env>/<name>`. Success
  is a reward at or above `success_threshold` (the environment's own `pass_threshold` unless
  set).
- **episodes**: its turn methods driven by honed's loop (`episodes.py`), token-exact, for the
  policy in training and evaluation; through a chat server's native tool calling for the skill
  loop's target (the `ChatEpisodes` methods).
"""

from __future__ import annotations

import json
import math
import numbers
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from typing import Any

from honed.envs.base import ChatEpisode, Generator
from honed.envs.dataset import JsonlData
from honed.envs.multiturn.episode import LENGTH
from honed.envs.multiturn.template import TOOL_FORMATS
from honed.envs.verifiers import messages as convert
from honed.envs.verifiers.episodes import Run, Turns, run_policy
from honed.envs.verifiers.loading import import_verifiers, load_environment
from honed.errors import finite_number, positive_int
from honed.reach import ImportSpec
from honed.types import Group, Item, Message, Prompt, Trajectory, prompt_text

# Finished chat sessions kept for their scoring (by item and conversation); enough for any
# batch, bounded for sessions whose scoring never comes (a request that failed mid-way).
_FINISHED_KEPT = 4096


class VerifiersEnv(JsonlData):
    """A verifiers environment (see the module docstring).

    `max_turns` becomes the environment's own turn limit where it sets none (`max_turns=-1`,
    MultiTurnEnv's default): an episode needs one in the skill loop, where no token budget spans
    the turns; `tool_format` is how tool calls are read from the policy's turns (`auto`:
    from the chat template, as for the `tools` environment).
    """

    type_name = "verifiers"

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        env: ImportSpec | str,
        env_args: dict[str, Any] | None = None,
        test_fraction: float = 0.1,
        validation_fraction: float = 0.0,
        success_threshold: float | None = None,
        max_turns: int = 10,
        tool_format: str = "auto",
    ) -> None:
        super().__init__(name, seed, "prompt")
        if env_args is not None and not isinstance(env_args, dict):
            raise self._fail(f"env_args must be a mapping, got {env_args!r}")
        self.spec = env
        self.env_args = dict(env_args or {})
        if tool_format != "auto" and tool_format not in TOOL_FORMATS:
            raise self._fail(
                f"tool_format must be auto or one of {', '.join(TOOL_FORMATS)}, got {tool_format!r}"
            )
        self.tool_format = tool_format
        turn_limit = positive_int(self.where, "max_turns", max_turns)
        test_fraction = self._check_fraction("test_fraction", test_fraction)
        validation_fraction = self._check_fraction("validation_fraction", validation_fraction)
        self.vf = import_verifiers()
        self.env = load_environment(self.where, env, self.env_args)
        self.success_threshold = finite_number(
            self.where,
            "success_threshold",
            self.env.pass_threshold if success_threshold is None else success_threshold,
        )
        if self.env.max_turns <= 0:
            self.env.max_turns = turn_limit
        self.max_turns = self.env.max_turns
        self.turns = Turns(self.vf, self.env, self.where)
        self._splits = self._assign(*self._rows(test_fraction, validation_fraction))
        self._finished: OrderedDict[tuple[str, str], Run] = OrderedDict()

    def _rows(
        self, test_fraction: float, validation_fraction: float
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, float]]:
        """The rows by split, and the held-out splits to cut from the train rows (by hash)."""
        rows: dict[str, list[dict[str, Any]]] = {}
        carved: dict[str, float] = {}
        try:
            train = self.env.build_dataset()
            held_out = self.env.build_eval_dataset()
        except Exception as exc:  # the user's dataset builder failing
            raise self._fail(f"building its dataset raised {type(exc).__name__}: {exc}") from exc
        rows["train"] = [] if train is None else train.to_list()
        if held_out is None:
            carved["test"] = test_fraction
        else:
            rows["test"] = held_out.to_list()
        carved["validation"] = validation_fraction
        if sum(carved.values()) > 1.0:
            raise self._fail("test_fraction + validation_fraction must be at most 1")
        for split, split_rows in rows.items():
            for row in split_rows:
                if not isinstance(row.get("prompt"), str | list) or not row["prompt"]:
                    raise self._fail(
                        f"a row of its {split} dataset has no prompt (columns: {', '.join(row)})"
                    )
        return rows, carved

    # ------------------------------------------------------------------ the environment

    def prompt(self, item: Item) -> Prompt:
        """The row's prompt as the model is asked it: chat messages (system prompt and
        few-shot turns included), or text for a completion-style environment."""
        prompt = item.data["prompt"]
        if isinstance(prompt, str):
            return prompt
        from verifiers.utils.message_utils import normalize_messages

        return convert.openai_messages(normalize_messages(prompt), self.where)

    def sft_examples(self, item: Item) -> list[tuple[Prompt, str]]:
        """None: a verifiers environment's `answer` is what its rubric checks against, not a
        completion to imitate."""
        return []

    def rollout(
        self, items: Sequence[Item], generator: Generator, num_generations: int, seed: int
    ) -> list[Group]:
        groups = run_policy(self.turns, items, generator, num_generations, seed, self.tool_format)
        return [
            Group(self.name, item.key, [self._trajectory(r) for r in runs], level=item.level)
            for item, runs in zip(items, groups, strict=True)
        ]

    def _trajectory(self, run: Run) -> Trajectory:
        state = run.state
        reward = state.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
            raise self._fail(f"its rubric gave item '{run.item.key}' the reward {reward!r}")
        components = {}
        for metric, value in (state.get("metrics") or {}).items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise self._fail(
                    f"its rubric's metric '{metric}' is {value!r} for item '{run.item.key}'; "
                    "metrics must be numbers"
                )
            components[str(metric)] = float(value)
        completion = convert.openai_messages(state.get("completion") or [], self.where)
        info: dict[str, Any] = {
            "stop": state.get("stop_condition"),
            "turns": len(state["trajectory"]),
            "messages": completion,
        }
        if run.format_errors:
            info["tool_call_format_errors"] = run.format_errors
        if state.get("error") is not None:
            info["error"] = f"{type(state['error']).__name__}: {state['error']}"
        if run.rubric_errors:
            info["rubric_errors"] = run.rubric_errors
        return Trajectory(
            segments=[] if run.episode is None else [run.episode.segment()],
            reward=float(reward),
            success=float(math.isfinite(reward) and reward >= self.success_threshold),
            components=components,
            prompt_text=prompt_text(convert.openai_messages(state["prompt"], self.where)),
            completion_text=transcript(completion),
            info=info,
        )

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """Per episode: model turns, the share truncated, that ended in an error, and that
        ended by each stop condition; turns whose tool calls could not be read, and reward
        functions that raised (verifiers scores them 0), counted over the step."""
        infos = [(t.info, t.truncated) for g in groups for t in g.trajectories]
        if not infos:
            return {}
        n = len(infos)
        prefix = f"episodes/{self.name}"
        out = {
            f"{prefix}/turns": sum(float(i.get("turns", 0)) for i, _ in infos) / n,
            f"{prefix}/truncated": sum(float(cut) for _, cut in infos) / n,
            f"{prefix}/errors": sum("error" in i for i, _ in infos) / n,
            f"{prefix}/tool_call_format_errors": float(
                sum(i.get("tool_call_format_errors", 0) for i, _ in infos)
            ),
            f"reward/{self.name}/rubric_errors": float(
                sum(len(g.trajectories[0].info.get("rubric_errors", [])) for g in groups)
            ),
        }
        stops: dict[str, int] = defaultdict(int)
        for info, _ in infos:
            stops[str(info.get("stop"))] += 1
        for stop, count in sorted(stops.items()):
            out[f"{prefix}/stop/{stop}"] = count / n
        return out

    # ------------------------------------------------------------------ the skill loop's target

    def open_chats(self, items: Sequence[Item]) -> list[ChatEpisode]:
        """One session per item, each with the tools its state offers (as OpenAI schemas)."""
        runs: list[Run] = self.turns.run([self.turns.start(item) for item in items])
        return [ChatEpisode(convert.tool_schemas(r.state.get("tool_defs") or []), r) for r in runs]

    def advance_chats(
        self, chats: Sequence[ChatEpisode], messages: Sequence[Message], truncated: Sequence[bool]
    ) -> list[list[Message] | None]:
        """Each session's reply (an assistant message as the server sent it, `tool_calls`
        included; a call without an id gets one, written into the message) into its state; the
        messages the environment answers with, or `None` once the episode is over."""
        runs: list[Run] = [c.handle for c in chats]
        responses = []
        for run, message, cut in zip(runs, messages, truncated, strict=True):
            turn = len(run.state["trajectory"])
            for k, entry in enumerate(message.get("tool_calls") or []):
                if isinstance(entry, dict) and not entry.get("id"):
                    entry["id"] = f"call_{turn}_{k}"
            run.exchanged.append(message)
            reply = convert.from_openai(self.vf, message)
            responses.append(convert.response(self.vf, reply, cut, 0, 0))
        self.turns.run([self.turns.take(r, x) for r, x in zip(runs, responses, strict=True)])
        cuts = [LENGTH if cut else None for cut in truncated]
        replies = self.turns.run(
            [self.turns.prepare(r, c) for r, c in zip(runs, cuts, strict=True)]
        )
        out: list[list[Message] | None] = []
        done = []
        for run, reply in zip(runs, replies, strict=True):
            if reply is None:
                done.append(run)
                out.append(None)
                continue
            answer = convert.openai_messages(reply, self.where)
            run.exchanged += answer
            out.append(answer)
        self.turns.run([self.turns.finish(r) for r in done])
        for run in done:
            self._finished[_conversation_key(run.item, run.exchanged)] = run
            while len(self._finished) > _FINISHED_KEPT:
                self._finished.popitem(last=False)
        return out

    def score_conversations(
        self,
        items: Sequence[Item],
        conversations: Sequence[Sequence[Message]],
        truncated: Sequence[bool] | None = None,
    ) -> list[Trajectory]:
        """Conversations after the prompt scored by the rubric: a session's own state when the
        conversation is one this environment just played, else the conversation replayed
        through a fresh state (`Turns.replay`). Replies to the same item form one group."""
        truncated = truncated or [False] * len(items)
        runs: list[Run | None] = []
        replays = []
        for item, conversation, cut in zip(items, conversations, truncated, strict=True):
            run = self._finished.pop(_conversation_key(item, conversation), None)
            runs.append(run)
            if run is None:
                replays.append(self.turns.replay(item, list(conversation), bool(cut)))
        replayed = iter(self.turns.run(replays))
        done = [run if run is not None else next(replayed) for run in runs]
        by_item: dict[str, list[Run]] = defaultdict(list)
        for run in done:
            by_item[run.item.key].append(run)
        self.turns.run([self.turns.score(list(by_item.values()))])
        return [self._trajectory(run) for run in done]

    def reference_turns(self, item: Item) -> list[Message] | None:
        """The row's `answer` as the expected final turn the reflector is shown (none when the
        answer is not text)."""
        answer = item.data.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            return None
        return [{"role": "assistant", "content": answer}]


def _conversation_key(item: Item, conversation: Sequence[Message]) -> tuple[str, str]:
    return item.key, json.dumps(list(conversation), sort_keys=True, default=str)


def transcript(messages: Sequence[Message]) -> str:
    """The conversation after the prompt, for people (samples.jsonl, the run viewer)."""
    lines = []
    for message in messages:
        role = message.get("role")
        lines.append(f"[{role}] {message.get('content') or ''}".rstrip())
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines.append(f"[call] {function.get('name')}({function.get('arguments')})")
    return "\n".join(lines)
