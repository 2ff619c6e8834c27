"""Epoch-end consolidation: the slow update of a protected guidance region.

Step edits are local fixes; at an epoch boundary the reflector looks at the whole epoch instead.
The same training items are answered with the skill as it was at the start of the epoch and as
it is now, and each item is classed as improved, regressed, persistent failure or stable
success. From that the reflector rewrites the protected region (`<!-- protected:NAME -->`), the
one part of the skill that ordinary edits cannot touch, so durable guidance is not eroded by
step-level edits. The trainer gates the result like any candidate unless
`consolidation.gated: false` (the original wrote it ungated; its published checkpoints gated it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.models.chat import ChatFailure
from honed.skills.document import SkillDocument
from honed.skills.merge import reply_json
from honed.skills.prompts import render
from honed.skills.reflect import DEFAULT_EVIDENCE, Evidence
from honed.skills.reflector import Reflector
from honed.skills.rollout import Rollout
from honed.text import cut_middle

OUTCOMES = ("improved", "regressed", "persistent_failure", "stable_success")
EXAMPLES_PER_OUTCOME = 5


def classify(
    before: Sequence[Rollout], after: Sequence[Rollout]
) -> dict[str, list[tuple[Rollout, Rollout]]]:
    """Pairs of (start-of-epoch, current) rollouts of the same items, by outcome; an item either
    skill got no answer for is left out."""
    out: dict[str, list[tuple[Rollout, Rollout]]] = {name: [] for name in OUTCOMES}
    for b, a in zip(before, after, strict=True):
        if not (b.answered and a.answered):
            continue
        if b.failed and not a.failed:
            out["improved"].append((b, a))
        elif not b.failed and a.failed:
            out["regressed"].append((b, a))
        elif a.failed:
            out["persistent_failure"].append((b, a))
        else:
            out["stable_success"].append((b, a))
    return out


def _render_outcomes(classes: dict[str, list[tuple[Rollout, Rollout]]], evidence: Evidence) -> str:
    lines = [
        ", ".join(f"{name.replace('_', ' ')}: {len(pairs)}" for name, pairs in classes.items())
    ]

    def shown(r: Rollout) -> str:
        reasoning = ""
        if evidence.show_reasoning and r.reasoning:
            reasoning = f"(reasoning: {cut_middle(r.reasoning, evidence.max_chars)})\n"
        return f"{reasoning}{cut_middle(r.reply, evidence.max_chars)}"

    for name in ("improved", "regressed", "persistent_failure"):
        for b, a in classes[name][:EXAMPLES_PER_OUTCOME]:
            expected = "" if a.expected is None else f"\nExpected answer: {a.expected}"
            lines.append(
                f"\n### {name.replace('_', ' ')}\nTask:\n{a.prompt}\n\nReply at the start of "
                f"the epoch:\n{shown(b)}\n\nReply now:\n{shown(a)}{expected}"
            )
    return "\n".join(lines)


@dataclass
class Consolidation:
    """The rewritten skill (or `None` and why), with the outcome counts it was based on."""

    candidate: SkillDocument | None
    counts: dict[str, int]
    problems: list[str] = field(default_factory=list)
    reply: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "problems": self.problems, "reply": self.reply}


def consolidation_prompt(
    skill: SkillDocument,
    region: str,
    classes: dict[str, list[tuple[Rollout, Rollout]]],
    evidence: Evidence = DEFAULT_EVIDENCE,
) -> str:
    try:
        guidance = skill.region(region).content.strip() or "(empty)"
    except KeyError:
        guidance = "(the region does not exist yet; it will be added at the end of the skill)"
    return render(
        "consolidate",
        region=region,
        skill=skill.text.strip() or "(the skill is empty)",
        guidance=guidance,
        outcomes=_render_outcomes(classes, evidence),
    )


def propose(
    reflector: Reflector,
    skill: SkillDocument,
    region: str,
    before: Sequence[Rollout],
    after: Sequence[Rollout],
    evidence: Evidence = DEFAULT_EVIDENCE,
) -> Consolidation:
    """Ask the reflector for new guidance and write it into `region` (created if missing)."""
    classes = classify(before, after)
    counts = {name: len(pairs) for name, pairs in classes.items()}
    prompt = consolidation_prompt(skill, region, classes, evidence)
    try:
        reply = reflector.ask(prompt, "consolidate")
    except ChatFailure as exc:
        return Consolidation(None, counts, [str(exc)])
    data = reply_json(reply)
    content = data.get("guidance") if isinstance(data, dict) else None
    if not isinstance(content, str) or not content.strip():
        return Consolidation(None, counts, ["no 'guidance' text in the reply"], reply)
    try:
        candidate = skill.rewrite_protected(region, content, create=True)
    except ValueError as exc:
        return Consolidation(None, counts, [str(exc)], reply)
    return Consolidation(candidate, counts, [], reply)
