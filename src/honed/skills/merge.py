"""From many minibatches' proposals to the few edits a step applies: merge, then rank.

**Merge.** Always first a deterministic merge: edits that are the same after collapsing
whitespace and case (same op, target and content) become one, whose `support_count` is the
number of minibatches that proposed it (`from_failures` / `from_successes` split it by source).
With `train.merge: llm` the reflector then combines near-duplicates and resolves conflicts in
one call; each merged edit names the pool ids it stands for (`sources`) and its support is the
sum of theirs. An LLM merge may shrink the pool, never grow it, and never invent: a merged edit
that names no proposal, targets text none of its proposals targets, whose content is not
mostly (`MIN_WORDS_FROM_SOURCES`) made of its proposals' words, or that turns what they say
around (`reversal`: "the unit's name, not the bare number" merged from "the bare number, not the
unit's name") is dropped and counted (`MergeResult.dropped`). If its reply is unusable the deterministic pool is kept and the reason
recorded. (The original merged hierarchically in LLM
calls of eight; one call over a deduplicated pool is cheaper and cannot loop.)

**Rank.** When the pool holds more edits than the step's budget (or the edit budget is
`autonomous`), the reflector orders the pool by expected benefit (`train.rank: llm`, the
default). Ids it leaves out follow in deterministic order; ids it repeats or invents are
ignored. If the call fails to give a usable ranking, or with `train.rank: deterministic`, the
order is: most support first, then most support from failures, then first proposed. A budget
of 0 (an edit budget with `min_lr: 0`) keeps nothing and asks the reflector nothing. In
`autonomous` mode the ranking reply also says how many edits to keep (`keep`), clamped to the
pool by `clamp_autonomous`; without a usable `keep` the whole pool is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.models.chat import ChatFailure
from honed.skills.document import SkillDocument
from honed.skills.edits import NEEDS_TARGET, Edit, decode_json, parse_edits
from honed.skills.prompts import render
from honed.skills.reflect import FAILURE, Reflection
from honed.skills.reflector import Reflector
from honed.skills.schedule import clamp_autonomous


@dataclass
class PoolEdit:
    """One distinct proposed edit and how much support it has."""

    edit: Edit
    support_count: int = 1
    from_failures: int = 0
    from_successes: int = 0
    first_seen: int = 0  # position of its first proposal, for a stable order

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.edit.to_dict(),
            "support_count": self.support_count,
            "from_failures": self.from_failures,
            "from_successes": self.from_successes,
        }


def _identity(edit: Edit) -> tuple[str, str, str]:
    def squash(text: str) -> str:
        return " ".join(text.split()).lower()

    return edit.op, squash(edit.target), squash(edit.content)


def dedupe(reflections: Sequence[Reflection]) -> list[PoolEdit]:
    """The deterministic merge: one pool entry per distinct edit, counting its proposers."""
    pool: dict[tuple[str, str, str], PoolEdit] = {}
    position = 0
    for reflection in reflections:
        seen_here: set[tuple[str, str, str]] = set()
        for edit in reflection.edits:
            key = _identity(edit)
            position += 1
            if key in seen_here:  # one minibatch repeating itself is not extra support
                continue
            seen_here.add(key)
            entry = pool.get(key)
            if entry is None:
                entry = pool[key] = PoolEdit(edit, 0, first_seen=position)
            entry.support_count += 1
            if reflection.source == FAILURE:
                entry.from_failures += 1
            else:
                entry.from_successes += 1
    return list(pool.values())


def _fallback_key(entry: PoolEdit) -> tuple[int, int, int]:
    return (-entry.support_count, -entry.from_failures, entry.first_seen)


def deterministic_order(pool: Sequence[PoolEdit]) -> list[PoolEdit]:
    """Most support first, then most support from failures, then first proposed."""
    return sorted(pool, key=_fallback_key)


def render_pool(pool: Sequence[PoolEdit]) -> str:
    lines = []
    for i, entry in enumerate(pool, start=1):
        sources = []
        if entry.from_failures:
            sources.append(f"{entry.from_failures} from failures")
        if entry.from_successes:
            sources.append(f"{entry.from_successes} from successes")
        edit = json.dumps(entry.edit.to_dict(), ensure_ascii=False)
        lines.append(f"[{i}] support {entry.support_count} ({', '.join(sources)}): {edit}")
    return "\n".join(lines)


@dataclass
class MergeResult:
    pool: list[PoolEdit]
    method: str  # "deterministic", "llm", or "deterministic (llm merge failed)"
    problems: list[str] = field(default_factory=list)
    reply: str | None = None
    # merged edits that did not come from the proposals they named: the edit and why
    dropped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "problems": self.problems,
            "edits": [e.to_dict() for e in self.pool],
            "dropped": self.dropped,
            "reply": self.reply,
        }


# A merged edit's content must take at least this share of its words from the proposals it
# names: merging rewords and shortens, it does not add ideas no reflection had. Words are
# compared lower-cased without a plural `s`, and the glue words below do not count (negations
# do: they change what a rule says).
MIN_WORDS_FROM_SOURCES = 0.8
_WORD = re.compile(r"\w+")
_GLUE = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "for",
        "with",
        "is",
        "are",
        "be",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "by",
        "at",
        "from",
        "into",
        "then",
        "than",
        "so",
        "also",
        "both",
        "each",
    ]
)


def _words(text: str) -> list[str]:
    words = (w for w in _WORD.findall(text.lower()) if w not in _GLUE)
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]


# Words that turn what follows them in their clause around. A clause ends at punctuation or at
# "but"; "n't" is a negation inside a word.
_NEGATIONS = frozenset(
    ["not", "never", "no", "without", "avoid", "instead", "rather", "except", "nor", "neither"]
)
_CLAUSE = re.compile(r"[.,;:!?\n()]|\bbut\b", re.IGNORECASE)


def polarity(text: str) -> dict[str, set[bool]]:
    """Each content word of `text` (as `_words` reads it) and whether it is said plainly
    (`True`) or under a negation earlier in its clause (`False`); a word said both ways has
    both."""
    out: dict[str, set[bool]] = {}
    for clause in _CLAUSE.split(text.lower()):
        negated = False
        for raw in _WORD.findall(clause.replace("n't", " not")):
            if raw in _NEGATIONS:
                negated = True
                continue
            for word in _words(raw):
                if len(word) > 1:  # the "s" of "unit's"
                    out.setdefault(word, set()).add(not negated)
    return out


def reversal(edit: Edit, parts: Sequence[PoolEdit]) -> str | None:
    """Why `edit` says the opposite of the edits it merges, or None.

    The rule: a word the merged edit only negates while its proposals only say it plainly, or
    only says plainly while they only negate it, has been turned around ("answer with the
    unit's name, not the bare number" from "answer with the bare number, not the unit's
    name": `bare` and `number` are negated, `unit` and `name` asserted). A word said both ways
    on either side proves nothing and is not counted; words the proposals do not use are the
    word-share check's business (`MIN_WORDS_FROM_SOURCES`)."""
    merged = polarity(edit.content)
    sources: dict[str, set[bool]] = {}
    for part in parts:
        for word, ways in polarity(part.edit.content).items():
            sources.setdefault(word, set()).update(ways)
    flipped = {
        word: ways
        for word, ways in merged.items()
        if len(ways) == 1 and len(sources.get(word, ways)) == 1 and sources.get(word, ways) != ways
    }
    if not flipped:
        return None
    said = []
    for plainly, how in ((False, "negates"), (True, "asserts")):
        words = sorted(w for w, ways in flipped.items() if plainly in ways)
        if words:
            said.append(f"{how} {', '.join(repr(w) for w in words)}")
    return (
        f"it says the opposite of the edits it merges: it {' and '.join(said)}, which they do not"
    )


def provenance_problem(edit: Edit, parts: Sequence[PoolEdit]) -> str | None:
    """Why `edit`, merged from `parts`, does not come from them or turns them around (None when
    it does neither)."""
    if not parts:
        return "it names no proposed edit it merges (sources)"
    if edit.op in NEEDS_TARGET:
        targets = {_identity(p.edit)[1] for p in parts}
        if " ".join(edit.target.split()).lower() not in targets:
            return "its target is not the target of any edit it merges"
    words = _words(edit.content)
    if words:
        known = {w for p in parts for w in _words(p.edit.content)}
        share = sum(w in known for w in words) / len(words)
        if share < MIN_WORDS_FROM_SOURCES:
            return (
                f"only {share:.0%} of its words come from the edits it merges (at least "
                f"{MIN_WORDS_FROM_SOURCES:.0%} must)"
            )
    return reversal(edit, parts)


def merge_prompt(skill: SkillDocument, pool: Sequence[PoolEdit]) -> str:
    return render(
        "merge",
        skill=skill.text.strip() or "(the skill is empty)",
        edits=render_pool(pool),
        pool_size=str(len(pool)),
    )


def llm_merge(reflector: Reflector, skill: SkillDocument, pool: list[PoolEdit]) -> MergeResult:
    """One reflector call that merges near-duplicates; the deterministic pool on failure."""
    if len(pool) < 2:
        return MergeResult(pool, "deterministic (nothing to merge)")
    prompt = merge_prompt(skill, pool)
    try:
        reply = reflector.ask(prompt, "merge")
    except ChatFailure as exc:
        return MergeResult(pool, "deterministic (llm merge failed)", [str(exc)])
    parsed = parse_edits(reply)
    problems = list(parsed.problems)
    merged: list[PoolEdit] = []
    dropped: list[dict[str, Any]] = []
    for edit in parsed.edits:
        ids = _valid_ids(edit.meta.get("sources"), len(pool))
        parts = [pool[i - 1] for i in ids]
        problem = provenance_problem(edit, parts)
        if problem is not None:
            dropped.append({"edit": edit.to_dict(), "reason": problem})
            continue
        meta = {k: v for k, v in edit.meta.items() if k != "sources"}
        merged.append(
            PoolEdit(
                Edit(edit.op, edit.target, edit.content, meta),
                support_count=sum(p.support_count for p in parts),
                from_failures=sum(p.from_failures for p in parts),
                from_successes=sum(p.from_successes for p in parts),
                first_seen=min(p.first_seen for p in parts),
            )
        )
    if dropped:
        problems.append(f"dropped {len(dropped)} merged edit(s) that no proposal supports")
    if not merged:
        problems.append("the merge reply held no usable edit")
        return MergeResult(pool, "deterministic (llm merge failed)", problems, reply, dropped)
    if len(merged) > len(pool):
        problems.append(f"kept the first {len(pool)} of {len(merged)} merged edits")
        merged = merged[: len(pool)]
    return MergeResult(merged, "llm", problems, reply, dropped)


def reply_json(reply: str) -> Any:
    """The JSON value in a reflector reply, or `None`; never raises (the reply is untrusted,
    and `json_repair` can fail on hostile input)."""
    try:
        return decode_json(reply)
    except Exception:
        return None


def _valid_ids(value: Any, size: int) -> list[int]:
    """1-based pool ids from untrusted JSON, in order, without repeats or strangers."""
    if not isinstance(value, list):
        value = [value]
    out: list[int] = []
    for v in value:
        if isinstance(v, bool):
            continue
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, int) and 1 <= v <= size and v not in out:
            out.append(v)
    return out


@dataclass
class Ranking:
    """The pool in ranked order and how many of its head the step keeps."""

    order: list[PoolEdit]
    keep: int
    method: str  # "llm", "deterministic", "deterministic (...)"
    problems: list[str] = field(default_factory=list)
    reply: str | None = None
    requested_keep: Any = None

    @property
    def kept(self) -> list[PoolEdit]:
        return self.order[: self.keep]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "keep": self.keep,
            "requested_keep": self.requested_keep,
            "problems": self.problems,
            "ranked": [e.to_dict() for e in self.order],
            "reply": self.reply,
        }


def rank(
    reflector: Reflector,
    skill: SkillDocument,
    pool: list[PoolEdit],
    budget: int,
    autonomous: bool,
    use_llm: bool,
) -> Ranking:
    """Order the pool and decide how many edits to keep (at most `budget`, or the reflector's
    choice clamped to the pool when `autonomous`)."""
    fallback = deterministic_order(pool)
    cap = len(pool) if autonomous else min(budget, len(pool))
    if not pool:
        return Ranking([], 0, "deterministic (empty pool)")
    if not use_llm:
        return Ranking(fallback, cap, "deterministic")
    if not autonomous and budget <= 0:
        return Ranking(fallback, 0, "deterministic (the budget is 0)")
    if not autonomous and len(pool) <= budget:
        return Ranking(fallback, cap, "deterministic (the budget covers the whole pool)")
    prompt = rank_prompt(skill, pool, budget, autonomous)
    try:
        reply = reflector.ask(prompt, "rank")
    except ChatFailure as exc:
        return Ranking(fallback, cap, "deterministic (llm ranking failed)", [str(exc)])
    data = reply_json(reply)
    if isinstance(data, list):
        data = {"ranking": data}
    ids = _valid_ids(data.get("ranking"), len(pool)) if isinstance(data, dict) else []
    requested = data.get("keep") if isinstance(data, dict) else None
    keep = clamp_autonomous(requested, len(pool)) if autonomous else cap
    if not ids:
        return Ranking(
            fallback, keep, "deterministic (no usable ranking in the reply)", [], reply, requested
        )
    problems = []
    ranked = [pool[i - 1] for i in ids]
    if len(ids) < len(pool):
        chosen = {id(e) for e in ranked}
        missing = [e for e in fallback if id(e) not in chosen]
        problems.append(
            f"the ranking left out {len(missing)} edit(s); they follow in support order"
        )
        ranked += missing
    return Ranking(ranked, keep, "llm", problems, reply, requested)


def rank_prompt(
    skill: SkillDocument, pool: Sequence[PoolEdit], budget: int, autonomous: bool
) -> str:
    if autonomous:
        instruction = (
            "Order them from most to least likely to improve the agent's results, and decide "
            f"how many of the top ones to apply now (between 1 and {len(pool)}): applying "
            "fewer makes it clearer which edits help."
        )
        reply_format = '{"ranking": [<all edit ids, best first>], "keep": <how many to apply>}'
    else:
        instruction = (
            "Order them from most to least likely to improve the agent's results. Only the "
            f"first {budget} will be applied now; prefer general, well-supported edits, and "
            "edits that do not conflict with each other."
        )
        reply_format = '{"ranking": [<all edit ids, best first>]}'
    return render(
        "rank",
        instruction=instruction,
        skill=skill.text.strip() or "(the skill is empty)",
        edits=render_pool(pool),
        reply_format=reply_format,
    )
