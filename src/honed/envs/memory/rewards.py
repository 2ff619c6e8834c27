"""Mem-α's reward: r_t = r1 + r2_t + compression_weight·r3 + validity_weight·r4_t for chunk t
(Mem-α's beta and gamma), each part reported.

- r1, accuracy: the reader's mean score over the instance's questions (one per trajectory).
- r2_t, tool success: the share of chunk t's calls that succeeded.
- r3, compression: `1 - memory_tokens / input_tokens` (one per trajectory); negative when the
  memory holds more than the input; `clip` sets an optional floor.
- r4_t, validity: the judge's mean verdict on what chunk t wrote (successful inserts and
  updates; deletes write nothing and are not judged).

A chunk without calls scores `no_call_credit` on r2 and r4: 0 by default, as in the official
code (`generation.py`: no function call, reward 0.0; the judge's mean over no calls is 0.0).
`no_call_credit: 1` is honed's earlier deviation, kept as an option: a well-formed empty reply
(`[]`, nothing failed, nothing invalid written) then earns full marks, so the agent is not paid
to write chatter; on a small policy it also pays silence more than imperfect writes
(docs/memory.md). A reply that cannot be parsed scores 0 on both either way, and a chunk whose
calls all failed gets r4 = 0.

An LLM judge's reply is parsed strictly (`parse_verdict`): "Not valid." and `{"VALID": false}`
are INVALID, and a reply that gives no verdict (empty, a refusal, an unfinished `<think>`,
both words with nothing to decide between them) is no verdict at all. Such a write is left out
of r4's mean and counted in the `judge_errors` component; a chunk none of whose writes got a
verdict scores r4 = 0, as an unrecognised reply did in the official code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from honed.envs.memory.metrics import json_object
from honed.envs.memory.retrieval import Chat
from honed.envs.memory.store import CORE, EPISODIC, SEMANTIC, ToolResult
from honed.errors import HonedError, did_you_mean

JUDGES = ("rule", "llm")

_TIME = re.compile(
    r"\b(day|week|month|year|step|turn|session|timestamp)\s*#?\d+"
    r"|\b\d{1,4}[-/:.]\d{1,2}\b|\b(1[89]|20)\d{2}\b|\b\d{1,2}\s*(am|pm)\b"
    r"|\b(mon|tues|wednes|thurs|fri|satur|sun)day\b"
    r"|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d"
    r"|\b(yesterday|today|tonight|tomorrow|morning|afternoon|evening|noon|midnight)\b"
    r"|\b(last|next|this)\s+(week|month|year|night|time)\b|\bago\b",
    re.IGNORECASE,
)
_PLACEHOLDERS = {
    "none", "n a", "na", "null", "empty", "placeholder", "todo", "tbd", "nothing", "unknown",
    "no information", "text", "content", "core", "memory",
}  # fmt: skip
_WORDS = re.compile(r"\w+")


class Judge(Protocol):
    """Says whether one written entry is valid content for its store, in [0, 1], or None when
    it could not say (an LLM judge's reply without a verdict)."""

    def validity(self, store: str, content: str, others: Sequence[str]) -> float | None: ...


@dataclass
class RuleJudge:
    """The default, offline judge, after the official judge prompts.

    Core: not empty, not a placeholder, does not talk about "core memory". Semantic: one short
    atomic statement (2 to `max_fact_words` words, a single sentence) that is not a
    near-duplicate (word-set Jaccard >= `near_duplicate`) of another entry in the store.
    Episodic: carries a time (a day or step number, a date, a clock time, a weekday, ...).
    """

    max_fact_words: int = 20
    near_duplicate: float = 0.8

    def validity(self, store: str, content: str, others: Sequence[str]) -> float:
        words = _WORDS.findall(content.lower())
        if store == CORE:
            return float(
                bool(words)
                and " ".join(words) not in _PLACEHOLDERS
                and "core memory" not in " ".join(words)
            )
        if store == EPISODIC:
            return float(bool(words) and _TIME.search(content) is not None)
        if not 2 <= len(words) <= self.max_fact_words or re.search(r"[.!?]\s+\S", content.strip()):
            return 0.0
        mine = set(words)
        for other in others:
            theirs = set(_WORDS.findall(other.lower()))
            if len(mine & theirs) / len(mine | theirs) >= self.near_duplicate:
                return 0.0
        return 1.0


# What the LLM judge accepts per store, after the official per-store judge prompts.
_CRITERIA = {
    CORE: "a concise summary of persistent key information; INVALID if it is empty, a "
    "placeholder, or talks about 'core memory' itself",
    SEMANTIC: "a short atomic statement of a fact or piece of knowledge",
    EPISODIC: "an event together with its time or date and context",
}


class ChatJudge:
    """An LLM judge answering VALID or INVALID per entry, with one prompt per store."""

    def __init__(self, chat: Chat) -> None:
        self.chat = chat

    def validity(self, store: str, content: str, others: Sequence[str]) -> float | None:
        reply = self.chat.chat(
            [
                {
                    "role": "user",
                    "content": f"Is this a valid {store} memory entry? A valid one is "
                    f"{_CRITERIA[store]}.\n\nEntry: {content}\n\nAnswer VALID or INVALID.",
                }
            ]
        )
        verdict = parse_verdict(reply)
        return None if verdict is None else float(verdict)


# One verdict mention: a negated "valid" first (so "not valid" is not read as "valid"), then
# "invalid", then "valid"; whole words only.
_MENTION = re.compile(
    r"(?P<negated>\b(?:not|never|isn'?t|is\s+not|no)\s+(?:a\s+|an\s+)?valid\b)"
    r"|(?P<invalid>\binvalid\b)|(?P<valid>\bvalid\b)",
    re.IGNORECASE,
)
# A line that states the verdict: "Verdict: VALID", "Final answer - INVALID", "Answer: valid".
_MARKER = re.compile(
    r"^\W*(?:final\s+)?(?:verdict|answer|judg(?:e)?ment|decision|label|result)\W*[:=-]\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
# JSON keys that hold a verdict: a boolean under "valid"/"is_valid", a word under the others.
_BOOL_KEYS = ("valid", "is_valid")
_WORD_KEYS = ("verdict", "answer", "label", "result", "judgement", "judgment", "decision")


def _mentions(text: str) -> list[bool]:
    """The verdicts a text states, in order (True: valid)."""
    return [m.lastgroup == "valid" for m in _MENTION.finditer(text)]


def _agreed(verdicts: list[bool]) -> bool | None:
    """The verdict when every mention agrees, None when there is none or they disagree."""
    return verdicts[0] if verdicts and len(set(verdicts)) == 1 else None


def _json_verdict(value: Any) -> bool | None:
    """A verdict from a decoded JSON object (keys matched case-insensitively)."""
    if not isinstance(value, dict):
        return None
    fields = {str(k).strip().lower(): v for k, v in value.items()}
    for key in _BOOL_KEYS:
        if isinstance(fields.get(key), bool):
            return fields[key]
    for key in _WORD_KEYS:
        if isinstance(fields.get(key), bool):
            return fields[key]
        if isinstance(fields.get(key), str):
            return _agreed(_mentions(fields[key]))
    return None


def parse_verdict(reply: str | None) -> bool | None:
    """VALID (True), INVALID (False) or no verdict (None) from a judge's reply, strictly.

    In order: reasoning in `<think>...</think>` is dropped (an unfinished one gives no
    verdict); a JSON object decides by its `valid`/`is_valid` boolean or its
    `verdict`/`answer`/... word; otherwise the last line that states a verdict ("Verdict:
    INVALID") decides, then the last line if all its mentions agree, then the whole reply if
    all its mentions agree. "not valid", "isn't valid" and "invalid" are INVALID. Anything else
    (an empty reply, a refusal, "valid or invalid" with nothing to choose between them) is no
    verdict.
    """
    text = _THINK.sub(" ", reply or "")
    if "<think>" in text.lower():
        return None
    text = text.replace("*", "").replace("`", "").strip()
    decoded = json_object(text)
    if decoded is not None:
        return _json_verdict(decoded)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        marker = _MARKER.match(line)
        if marker:
            return _agreed(_mentions(marker.group("rest")))
    if lines:
        last = _agreed(_mentions(lines[-1]))
        if last is not None:
            return last
    return _agreed(_mentions(text))


def make_judge(kind: str, chat: Chat | None = None) -> Judge:
    if kind == "rule":
        return RuleJudge()
    if kind == "llm":
        if chat is None:
            raise HonedError(
                "memory judge 'llm' needs a chat model: give the environment a 'chat' "
                "argument ({base_url: ..., model: ...}, see ChatModelConfig)"
            )
        return ChatJudge(chat)
    raise HonedError(
        f"unknown memory judge {kind!r}{did_you_mean(kind, JUDGES)}: use one of {', '.join(JUDGES)}"
    )


# r2 and r4 of a chunk without calls: 0, as in the official code (the module docstring)
NO_CALL_CREDIT = 0.0


@dataclass
class ChunkOutcome:
    """What one chunk's reply did: whether it parsed, each call's result, each write's verdict,
    and how many writes the judge gave no verdict on."""

    parse_failed: bool
    results: list[ToolResult] = field(default_factory=list)
    verdicts: list[float] = field(default_factory=list)
    judge_errors: int = 0


def tool_success(outcome: ChunkOutcome, no_call_credit: float = NO_CALL_CREDIT) -> float:
    """r2_t: the share of the chunk's calls that succeeded (see the module docstring for none)."""
    if outcome.parse_failed:
        return 0.0
    if not outcome.results:
        return no_call_credit
    return sum(r.ok for r in outcome.results) / len(outcome.results)


def validity(outcome: ChunkOutcome, no_call_credit: float = NO_CALL_CREDIT) -> float:
    """r4_t: the mean verdict on the chunk's writes (see the module docstring for none)."""
    if outcome.verdicts:
        return sum(outcome.verdicts) / len(outcome.verdicts)
    if outcome.parse_failed or outcome.judge_errors or any(not r.ok for r in outcome.results):
        return 0.0
    return no_call_credit


def compression(memory_tokens: int, input_tokens: int, clip: float | None = None) -> float:
    """r3 = 1 - memory_tokens / input_tokens, floored at `clip` when given."""
    r3 = 1.0 - memory_tokens / max(input_tokens, 1)
    return r3 if clip is None else max(r3, clip)


COMPRESSION_WEIGHT = 0.05  # Mem-α's beta: the weight of compression r3 in the chunk reward
VALIDITY_WEIGHT = 0.1  # Mem-α's gamma: the weight of validity r4 in the chunk reward


def chunk_reward(
    r1: float,
    r2: float,
    r3: float,
    r4: float,
    compression_weight: float = COMPRESSION_WEIGHT,
    validity_weight: float = VALIDITY_WEIGHT,
    tool_success_weight: float = 1.0,
) -> float:
    """Mem-α Eq. 1: r_t = r1 + r2_t + compression_weight·r3 + validity_weight·r4_t (the
    paper's beta and gamma, named apart from the trainer's KL coefficient `beta`).
    `tool_success_weight` scales r2 (1 in the paper): under a memory budget, where writes past
    it fail, a policy can raise r2 by writing less of anything, so a design that wants the
    reward to be about what is kept can weigh r2 down."""
    return r1 + tool_success_weight * r2 + compression_weight * r3 + validity_weight * r4
