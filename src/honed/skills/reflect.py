"""Reflection: the reflector reads minibatches of the target's attempts and proposes edits.

Failures (hard score below 1) and successes are reflected on separately, with different
prompts: failures ask what rule would have prevented them, successes what made them work. Each
group is shuffled with the step's seed and cut into minibatches, one reflector call each, all
sent at once (up to the reflector's `concurrency`).

The reflector also sees the epoch's *step buffer*: the patterns found at earlier steps and the
edits the gate rejected, with the scores before and after. It is what keeps later reflections
from proposing the same harmful edit again; it is cleared at every epoch boundary.

A reply that is not usable JSON costs that minibatch's proposals, never the run: the reasons are
recorded in the step's `proposed_edits.json`. Each reply's edits are cut to `max_edits` (the
edit budget's `max_lr`), the original's first cap on the edit budget.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.models.chat import ChatClient
from honed.skills.document import SkillDocument
from honed.skills.edits import Edit, parse_edits
from honed.skills.prompts import render
from honed.skills.rollout import Rollout

FAILURE, SUCCESS = "failure", "success"


@dataclass
class Minibatch:
    source: str  # FAILURE or SUCCESS
    rollouts: list[Rollout]


def minibatches(
    rollouts: Sequence[Rollout], size: int, failure_only: bool, rng: random.Random
) -> list[Minibatch]:
    """Failures, then (unless `failure_only`) successes, each shuffled and cut into `size`s.

    An item drawn twice in a batch is reflected on once.
    """
    unique = list({(r.env, r.item_key): r for r in rollouts}.values())
    out = []
    groups = [(FAILURE, [r for r in unique if r.failed])]
    if not failure_only:
        groups.append((SUCCESS, [r for r in unique if not r.failed]))
    for source, group in groups:
        rng.shuffle(group)
        out += [Minibatch(source, group[i : i + size]) for i in range(0, len(group), size)]
    return out


@dataclass
class StepBuffer:
    """What later reflections of the same epoch learn from earlier steps."""

    patterns: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def add_patterns(self, step: int, reflections: Sequence[Reflection]) -> None:
        for r in reflections:
            if r.summary:
                self.patterns.append({"step": step, "source": r.source, "summary": r.summary})

    def add_rejected(
        self, step: int, edits: Sequence[Edit], before: float, after: float, reason: str
    ) -> None:
        self.rejected.append(
            {
                "step": step,
                "edits": [e.to_dict() for e in edits],
                "score_before": before,
                "score_after": after,
                "reason": reason,
            }
        )

    def clear(self) -> None:
        self.patterns.clear()
        self.rejected.clear()

    def render(self) -> str:
        if not (self.patterns or self.rejected):
            return "Nothing yet: this is the first step of the epoch."
        lines = []
        if self.patterns:
            lines.append("Patterns found at earlier steps:")
            lines += [f"- step {p['step']} ({p['source']}s): {p['summary']}" for p in self.patterns]
        if self.rejected:
            if lines:
                lines.append("")
            lines.append("Edits the gate rejected (the skill was left unchanged):")
            for r in self.rejected:
                lines.append(
                    f"- step {r['step']}: score {r['score_before']:.4f} -> "
                    f"{r['score_after']:.4f} with these edits applied together:"
                )
                lines += [f"    {json.dumps(e, ensure_ascii=False)}" for e in r["edits"]]
        return "\n".join(lines)

    def state_dict(self) -> dict[str, Any]:
        return {"patterns": list(self.patterns), "rejected": list(self.rejected)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.patterns = list(state["patterns"])
        self.rejected = list(state["rejected"])


@dataclass
class Reflection:
    """One minibatch's reflection: the edits it proposed and whatever had to be dropped."""

    source: str
    item_keys: list[str]
    summary: str
    edits: list[Edit]
    problems: list[str]
    reply: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "items": self.item_keys,
            "summary": self.summary,
            "edits": [e.to_dict() for e in self.edits],
            "problems": self.problems,
            "reply": self.reply,
        }


def render_traces(rollouts: Sequence[Rollout]) -> str:
    """The attempts as the reflector reads them: whole prompts and replies, not truncated."""
    blocks = []
    for i, r in enumerate(rollouts, start=1):
        kind = f", kind {r.kind}" if r.kind else ""
        expected = "" if r.expected is None else f"\n\nExpected answer:\n{r.expected}"
        blocks.append(
            f"### Attempt {i} (environment {r.env}{kind}; hard score {r.hard:g}, "
            f"soft score {r.soft:.2f})\n\nTask:\n{r.prompt}\n\nTarget's reply:\n{r.reply}"
            f"{expected}"
        )
    return "\n\n".join(blocks)


def reflection_prompt(
    skill: SkillDocument, batch: Minibatch, buffer: StepBuffer, max_edits: int
) -> str:
    intro = render("reflect_failure" if batch.source == FAILURE else "reflect_success")
    body = render(
        "reflect_common",
        skill=skill.text.strip() or "(the skill is empty)",
        buffer=buffer.render(),
        traces=render_traces(batch.rollouts),
        max_edits=str(max_edits),
    )
    return f"{intro}\n{body}"


def parse_reflection(batch: Minibatch, reply: str, max_edits: int) -> Reflection:
    parsed = parse_edits(reply)
    problems = list(parsed.problems)
    edits = parsed.edits
    if len(edits) > max_edits:
        problems.append(f"kept the first {max_edits} of {len(edits)} edits (max_lr)")
        edits = edits[:max_edits]
    data = parsed.data if isinstance(parsed.data, dict) else {}
    summary = data.get("summary") or data.get("failure_summary") or ""
    keys = [r.item_key for r in batch.rollouts]
    return Reflection(batch.source, keys, str(summary).strip(), edits, problems, reply)


def reflect(
    client: ChatClient,
    skill: SkillDocument,
    batches: Sequence[Minibatch],
    buffer: StepBuffer,
    max_edits: int,
) -> list[Reflection]:
    """One reflector call per minibatch, in parallel; results in minibatch order."""
    prompts = [reflection_prompt(skill, b, buffer, max_edits) for b in batches]
    replies = client.chat_many([[{"role": "user", "content": p}] for p in prompts], "reflect")
    return [parse_reflection(b, r, max_edits) for b, r in zip(batches, replies, strict=True)]
