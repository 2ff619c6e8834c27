"""The target at work: answering items with a skill in its system prompt, scored by the env.

Any single-turn honed environment works: the target's reply goes to the environment's own
scorer (`score_batch`), whose `success` is the hard score and `reward` the soft one. So do
`tools` environments: the target acts through the server's native tool calling
(`honed.skills.agent`), the environment's reward functions score the whole conversation, and
the rollout keeps it (`Rollout.messages`: tool calls and results) for the reflector.

Every rollout is cached under (skill hash, environment, item key), in memory and in a JSONL file
in the run directory; the skill hash is prefixed by a fingerprint of what else shapes the answer
(the target model, its sampling settings and the system-prompt preamble), so changing the target
never serves stale answers. The gate scores the current skill on the same selection items at every
step, evaluations repeat for the initial and best skill, and training batches repeat items, so
the cache saves most target calls; being on disk, it also spares a resumed run from paying for
them again. A cached answer is exact when the target samples greedily (`temperature: 0`, the
default); with sampling, an item answered once with a skill keeps that answer for that skill.

Answers are cached one by one as they arrive, so a batch cut short (a server that fails, a
crash) keeps what was already paid for. Only answers are cached: a request that gave no usable
reply (retries spent, every attempt empty) is a *failed* rollout, left out of the scores,
counted, and asked again next time. A reply cut at `max_tokens` is a real answer under the cap:
scored and cached as it is, and marked `truncated`. A reasoning model's reasoning is kept apart
from its answer (`Rollout.reasoning`); the environment scores the answer only.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from honed.envs.base import SingleTurnEnv
from honed.errors import HonedError
from honed.models.chat import ChatClient, ChatFailure, ChatModelConfig, ChatReply, Messages
from honed.runs.files import append_text, atomic_write_text, read_text
from honed.skills.agent import Conversation, is_tool_env, run_conversations
from honed.skills.document import SkillDocument
from honed.text import valid_text, valid_values
from honed.types import Item, Prompt, prompt_text


@dataclass(frozen=True)
class Rollout:
    """One answer of the target to one item with one skill, and its scores.

    `error` is set when no answer came (the request failed): such a rollout has no scores
    (`hard` and `soft` are 0 and mean nothing), is never cached and is left out of every mean.
    """

    env: str
    item_key: str
    prompt: str
    reply: str
    hard: float
    soft: float
    expected: str | None = None
    kind: str | None = None
    cached: bool = False
    reasoning: str = ""
    truncated: bool = False
    error: str | None = None
    messages: list[dict[str, Any]] | None = None  # a tools environment's conversation

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def failed(self) -> bool:
        """An answer that is not an exact success: what the failure reflections look at."""
        return self.answered and self.hard < 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollout:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Scores:
    """A skill's scores on a set of items: means of hard and soft scores (over environments,
    each environment's own mean counting once, so a large one does not drown a small one), over
    the `n` items answered; `failed` items got no answer and count in neither."""

    hard: float
    soft: float
    n: int
    failed: int = 0

    def to_dict(self) -> dict[str, float]:
        return {"hard": self.hard, "soft": self.soft, "n": self.n, "failed": self.failed}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def aggregate(rollouts: Sequence[Rollout]) -> Scores:
    by_env: dict[str, list[Rollout]] = defaultdict(list)
    answered = [r for r in rollouts if r.answered]
    for r in answered:
        by_env[r.env].append(r)
    hard = _mean([_mean([r.hard for r in rs]) for rs in by_env.values()])
    soft = _mean([_mean([r.soft for r in rs]) for rs in by_env.values()])
    return Scores(hard, soft, len(answered), len(rollouts) - len(answered))


def metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """`hard`, `soft` and `failed` (items without an answer, left out of the means), then per
    environment and per kind: what evaluation tables show."""
    scores = aggregate(rollouts)
    out = {"hard": scores.hard, "soft": scores.soft, "failed": float(scores.failed)}
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if not r.answered:
            continue
        groups[r.env].append(r)
        if r.kind is not None:
            groups[f"{r.env}/{r.kind}"].append(r)
    for name, rs in sorted(groups.items()):
        out[f"{name}/hard"] = _mean([r.hard for r in rs])
        out[f"{name}/soft"] = _mean([r.soft for r in rs])
    return out


def system_prompt(preamble: str, skill: SkillDocument) -> str | None:
    """What the target's system prompt holds: the preamble and the skill; nothing when the
    skill is empty, so that an empty skill measures the bare model."""
    if not skill.text.strip():
        return None
    return f"{preamble.strip()}\n\n{skill.text.strip()}\n"


class RolloutCache:
    """Rollouts by (skill key, environment, item key), appended to a JSONL file as they come;
    the skill key is the target fingerprint and the skill's hash (`TargetRunner.run`).

    The file is a log, not a document: a crash can cut only its last line short, and loading
    drops such a line (rewriting the file without it) instead of failing.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._entries: dict[str, Rollout] = {}
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.is_file():
            self._load(self.path)

    @staticmethod
    def key(skill_key: str, env: str, item_key: str) -> str:
        return f"{skill_key}/{env}/{item_key}"

    def _load(self, path: Path) -> None:
        text = read_text(path)
        lines = text.splitlines()
        good = []
        for line in lines:
            try:
                row = json.loads(line)
                self._entries[row["key"]] = Rollout.from_dict(row["rollout"])
            except (ValueError, KeyError, TypeError):
                continue
            good.append(line)
        if len(good) < len(lines) or (text and not text.endswith("\n")):
            atomic_write_text(path, "".join(f"{line}\n" for line in good))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, skill_key: str, env: str, item_key: str) -> Rollout | None:
        found = self._entries.get(self.key(skill_key, env, item_key))
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put_many(self, skill_key: str, rollouts: Sequence[Rollout]) -> None:
        lines = []
        for r in rollouts:
            key = self.key(skill_key, r.env, r.item_key)
            self._entries[key] = r
            lines.append(json.dumps({"key": key, "rollout": r.to_dict()}) + "\n")
        if self.path is not None and lines:
            append_text(self.path, "".join(lines))


def check_single_turn(envs: Mapping[str, Any]) -> dict[str, SingleTurnEnv]:
    """The environments, after checking each can be driven by a chat model: one prompt, one
    reply and a scorer for replies, or a `tools` environment (`honed.skills.agent`)."""
    for name, env in envs.items():
        if is_tool_env(env):
            continue
        if not (
            callable(getattr(env, "prompt", None)) and callable(getattr(env, "score_batch", None))
        ):
            raise HonedError(
                f"environment '{name}' ({type(env).__name__}) is not single-turn: the skill loop "
                "needs prompt(item) and score_batch(items, replies), or a tools environment"
            )
    return dict(envs)


def target_fingerprint(config: ChatModelConfig, preamble: str) -> str:
    """A short hash of everything but the skill that decides the target's answers (not the
    server's address: the same model moved to another port answers the same)."""
    fields = config.model_dump(include={"model", "temperature", "max_tokens", "extra_body"})
    text = json.dumps({**fields, "preamble": preamble}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class TargetRunner:
    """Answers items with a skill through the target client, scores them, caches the result.

    `max_failed_fraction`: once more than this share of a call's requests have failed, the
    requests not yet sent are not sent (their rollouts fail too): a broken server should cost
    seconds, not a batch of retries.
    """

    def __init__(
        self,
        client: ChatClient,
        envs: Mapping[str, SingleTurnEnv],
        preamble: str,
        cache: RolloutCache | None = None,
        max_failed_fraction: float = 1.0,
    ) -> None:
        self.client = client
        self.envs = check_single_turn(envs)
        self.preamble = preamble
        self.cache = cache if cache is not None else RolloutCache()
        self.fingerprint = target_fingerprint(client.config, preamble)
        self.max_failed_fraction = max_failed_fraction

    def messages(self, skill: SkillDocument, prompt: Prompt) -> Messages:
        """The request for one item; a chat prompt's own system message follows the skill's."""
        turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        own = [m["content"] for m in turns if m["role"] == "system"]
        turns = [m for m in turns if m["role"] != "system"]
        system = system_prompt(self.preamble, skill)
        if own:
            system = "\n\n".join([*([system.rstrip()] if system else []), *own])
        head = [] if system is None else [{"role": "system", "content": system}]
        return [*head, *turns]

    def run(self, skill: SkillDocument, items: Sequence[Item], stage: str) -> list[Rollout]:
        """One rollout per item, in order; each distinct item is asked at most once per skill."""
        digest = f"{self.fingerprint}-{skill.content_hash}"
        known: dict[tuple[str, str], Rollout] = {}
        todo: dict[tuple[str, str], Item] = {}
        hits: dict[tuple[str, str], tuple[Item, Rollout]] = {}
        for item in items:
            ident = (item.env, item.key)
            if ident in hits or ident in todo:
                continue
            hit = self.cache.get(digest, item.env, item.key)
            # an empty answer is no answer, whoever cached it (earlier honed versions did)
            if hit is None or not _usable(hit, is_tool_env(self.envs[item.env])):
                todo[ident] = item
            else:
                hits[ident] = (item, hit)
        # A cached reply is scored again, never taken at the cache file's word: the file sits
        # in a run directory, which may come from someone else.
        cached = [item for item, _ in hits.values()]
        answers = [_Answer.of(hit) for _, hit in hits.values()]
        for rollout in self._score(cached, answers):
            known[(rollout.env, rollout.item_key)] = replace(rollout, cached=True)
        fresh = self._answer(skill, digest, list(todo.values()), stage)
        known.update(((r.env, r.item_key), r) for r in fresh)
        return [known[(item.env, item.key)] for item in items]

    def _answer(
        self, skill: SkillDocument, digest: str, items: list[Item], stage: str
    ) -> list[Rollout]:
        """Ask the target; each answer is scored and cached the moment it arrives. Items of
        `tools` environments are conversations with the tools, one batch per environment."""
        if not items:
            return []
        prompts = [self.envs[item.env].prompt(item) for item in items]
        out: list[Rollout | None] = [None] * len(items)
        plain = [i for i, item in enumerate(items) if not is_tool_env(self.envs[item.env])]
        batches = [(None, plain)] if plain else []
        for name in dict.fromkeys(item.env for item in items):
            if is_tool_env(self.envs[name]):
                batches.append((name, [i for i, item in enumerate(items) if item.env == name]))
        for name, indices in batches:
            requests = [self.messages(skill, prompts[i]) for i in indices]
            if name is None:
                replies: Any = self.client.complete_many(requests, stage)
                give_up = self.max_failed_fraction * len(indices)
            else:
                replies = run_conversations(
                    self.client,
                    self.envs[name],
                    requests,
                    stage,
                    self.max_failed_fraction,
                    [items[i] for i in indices],
                )
            failures = 0
            for k, result in replies:
                index = indices[k]
                item = items[index]
                if isinstance(result, ChatFailure):
                    out[index] = self._failed(item, prompts[index], str(result))
                    failures += 1
                    if name is None and failures > give_up:
                        replies.cancel()
                    continue
                (rollout,) = self._score([item], [_Answer.of(result)])
                self.cache.put_many(digest, [rollout])
                out[index] = rollout
        unsent = "not sent: too many of the batch's requests had failed"
        return [
            r if r is not None else self._failed(items[i], prompts[i], unsent)
            for i, r in enumerate(out)
        ]

    def _failed(self, item: Item, prompt: Prompt, error: str) -> Rollout:
        env = self.envs[item.env]
        return Rollout(
            env=item.env,
            item_key=item.key,
            prompt=prompt_text(prompt),
            reply="",
            hard=0.0,
            soft=0.0,
            expected=_expected(env, item),
            kind=_kind(env, item),
            error=error,
        )

    def _score(self, items: list[Item], answers: list[_Answer]) -> list[Rollout]:
        """Each answer scored by its item's environment, in order."""
        prompts = [self.envs[item.env].prompt(item) for item in items]
        by_env: dict[str, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            by_env[item.env].append(i)
        out: list[Rollout | None] = [None] * len(items)
        for name, indices in by_env.items():
            env = self.envs[name]
            scores = _scores(env, [items[i] for i in indices], [answers[i] for i in indices])
            for i, (hard, soft) in zip(indices, scores, strict=True):
                item = items[i]
                if not (math.isfinite(hard) and math.isfinite(soft)):
                    raise HonedError(
                        f"environment '{name}' returned a non-finite score (success {hard}, "
                        f"reward {soft}) for item '{item.key}'"
                    )
                out[i] = Rollout(
                    env=name,
                    item_key=item.key,
                    prompt=prompt_text(prompts[i]),
                    reply=answers[i].text,
                    hard=hard,
                    soft=soft,
                    expected=_expected(env, item),
                    kind=_kind(env, item),
                    reasoning=answers[i].reasoning,
                    truncated=answers[i].truncated,
                    messages=answers[i].messages,
                )
        return [r for r in out if r is not None]


@dataclass(frozen=True)
class _Answer:
    """What an item's score and record are made from: the answer, reasoning, whether it was
    cut at `max_tokens`, and a tools environment's conversation after the prompt."""

    text: str
    reasoning: str = ""
    truncated: bool = False
    messages: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, source: ChatReply | Conversation | Rollout) -> _Answer:
        if isinstance(source, ChatReply):
            return cls(source.text, source.reasoning, source.truncated)
        if isinstance(source, Conversation):
            reasoning = "\n\n".join(source.reasoning)
            return cls(source.answer, reasoning, source.truncated, source.after_prompt)
        reasoning = source.reasoning if isinstance(source.reasoning, str) else ""
        messages = valid_values(source.messages) if isinstance(source.messages, list) else None
        return cls(
            valid_text(source.reply), valid_text(reasoning), source.truncated is True, messages
        )


def _usable(hit: Rollout, tools: bool) -> bool:
    """Whether a cached rollout holds an answer: text, and for a tools environment the
    conversation it came from (an empty answer is no answer, whoever cached it)."""
    if tools and not isinstance(hit.messages, list):
        return False
    return isinstance(hit.reply, str) and bool(hit.reply.strip())


def _scores(env: Any, items: list[Item], answers: list[_Answer]) -> list[tuple[float, float]]:
    """(hard, soft) per answer: a tools environment scores the whole conversation with its
    reward functions, any other scores the reply."""
    if is_tool_env(env):
        done = env.score_conversations(
            items, [a.messages or [] for a in answers], [a.truncated for a in answers]
        )
        return [(float(t.success), float(t.reward)) for t in done]
    scores = env.score_batch(items, [a.text for a in answers])
    return [(float(s.success), float(s.reward)) for s in scores]


def _expected(env: Any, item: Item) -> str | None:
    """The reference answer the reflector is shown: the environment's, or the final answer of
    a tools environment's reference conversation."""
    if is_tool_env(env):
        turns = env.reference_turns(item)
        content = turns[-1].get("content") if turns else None
        return content if isinstance(content, str) else None
    return env.reference(item)


def _kind(env: SingleTurnEnv, item: Item) -> str | None:
    """A label to report scores by: the environment's item kind if it has one, else the level."""
    item_kind = getattr(env, "item_kind", None)
    if callable(item_kind):
        return item_kind(item)
    return None if item.level is None else f"level_{item.level}"


def evaluation_items(
    envs: Mapping[str, SingleTurnEnv], split: str, num_items: int | None
) -> list[Item]:
    """The first `num_items` items of each environment's split (all with `None`): a fixed
    selection, so every skill is measured on the same items and cache hits are possible."""
    items: list[Item] = []
    for env in envs.values():
        chosen = list(env.items(split))
        items += chosen if num_items is None else chosen[:num_items]
    return items
