"""Reflection: the reflector reads minibatches of the target's attempts and proposes edits.

Failures (hard score below 1) and successes are reflected on separately, with different
prompts: failures ask what rule would have prevented them, successes what made them work. Each
group is shuffled with the step's seed and cut into minibatches, one reflector call each, all
sent at once (up to the reflector's `concurrency`).

The reflector also sees the epoch's *step buffer*: the patterns found at earlier steps and the
edits the gate rejected, with the scores before and after. It is what keeps later reflections
from proposing the same harmful edit again; it is cleared at every epoch boundary.

A reply that is not usable JSON, or a call that failed (retries spent, an empty reply, a reply
cut at `max_tokens` twice), costs that minibatch's proposals, never the run: the reasons are
recorded in the step's `proposed_edits.json`. Each reply's edits are cut to `max_edits` (the
edit budget's `max_lr`), the original's first cap on the edit budget.

The reflector reads the target's replies cut to `train.max_evidence_chars` (head, a marker
saying how much was left out, tail): one runaway reply must not fill its context. With
`reflector.max_prompt_tokens`, a minibatch whose prompt would be longer shows fewer attempts
(`Reflection.left_out` says how many were left out).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.models.chat import ChatFailure
from honed.skills.agent import render_conversation
from honed.skills.document import SkillDocument
from honed.skills.edits import Edit, parse_edits
from honed.skills.prompts import render
from honed.skills.reflector import Reflector
from honed.skills.rollout import Rollout
from honed.text import cut_middle

FAILURE, SUCCESS = "failure", "success"


@dataclass
class Minibatch:
    source: str  # FAILURE or SUCCESS
    rollouts: list[Rollout]


def minibatches(
    rollouts: Sequence[Rollout], size: int, failure_only: bool, rng: random.Random
) -> list[Minibatch]:
    """Failures, then (unless `failure_only`) successes, each shuffled and cut into `size`s.

    An item drawn twice in a batch is reflected on once; an item without an answer (its request
    failed) is not reflected on.
    """
    unique = list({(r.env, r.item_key): r for r in rollouts if r.answered}.values())
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
        self, step: int, edits: Sequence[Edit], before: float, after: float | None, reason: str
    ) -> None:
        """Edits the step's candidate held; `after` is None when it never reached the gate."""
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
                if r["score_after"] is None:
                    lines.append(
                        f"- step {r['step']}: rejected before the gate ({r['reason']}) with "
                        "these edits applied together:"
                    )
                else:
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
    """One minibatch's reflection: the edits it proposed and whatever had to be dropped.
    `error` says why there was no reply at all (the call failed); `left_out` counts the
    minibatch's attempts not shown to keep the prompt under `reflector.max_prompt_tokens`."""

    source: str
    item_keys: list[str]
    summary: str
    edits: list[Edit]
    problems: list[str]
    reply: str
    error: str | None = None
    left_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "items": self.item_keys,
            "summary": self.summary,
            "edits": [e.to_dict() for e in self.edits],
            "problems": self.problems,
            "reply": self.reply,
            "error": self.error,
            "left_out": self.left_out,
        }


@dataclass(frozen=True)
class Evidence:
    """How the target's attempts are shown to the reflector: each reply (and reasoning, shown
    only with `show_reasoning`) cut to `max_chars`."""

    max_chars: int = 2_000
    show_reasoning: bool = False


DEFAULT_EVIDENCE = Evidence()


def render_traces(rollouts: Sequence[Rollout], evidence: Evidence = DEFAULT_EVIDENCE) -> str:
    """The attempts as the reflector reads them: whole prompts, replies cut as `evidence` says;
    in a tools environment, the whole conversation (each call and result) instead of the reply."""
    blocks = []
    for i, r in enumerate(rollouts, start=1):
        kind = f", kind {r.kind}" if r.kind else ""
        expected = "" if r.expected is None else f"\n\nExpected answer:\n{r.expected}"
        reasoning = ""
        if evidence.show_reasoning and r.reasoning:
            reasoning = f"Target's reasoning:\n{cut_middle(r.reasoning, evidence.max_chars)}\n\n"
        cut = " (cut short: it reached the target's max_tokens)" if r.truncated else ""
        said = f"Target's reply{cut}:\n{cut_middle(r.reply, evidence.max_chars)}"
        if isinstance(r.messages, list):
            conversation = cut_middle(render_conversation(r.messages), evidence.max_chars)
            said = (
                f"Target's conversation (its turns, tool calls and results){cut}:\n{conversation}"
            )
        blocks.append(
            f"### Attempt {i} (environment {r.env}{kind}; hard score {r.hard:g}, "
            f"soft score {r.soft:.2f})\n\nTask:\n{r.prompt}\n\n{reasoning}{said}{expected}"
        )
    return "\n\n".join(blocks)


def reflection_prompt(
    skill: SkillDocument,
    batch: Minibatch,
    buffer: StepBuffer,
    max_edits: int,
    evidence: Evidence = DEFAULT_EVIDENCE,
) -> str:
    intro = render("reflect_failure" if batch.source == FAILURE else "reflect_success")
    body = render(
        "reflect_common",
        skill=skill.text.strip() or "(the skill is empty)",
        buffer=buffer.render(),
        traces=render_traces(batch.rollouts, evidence),
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


def fitted_prompt(
    reflector: Reflector,
    skill: SkillDocument,
    batch: Minibatch,
    buffer: StepBuffer,
    max_edits: int,
    evidence: Evidence,
) -> tuple[str | None, int]:
    """The minibatch's reflection prompt and how many of its attempts were left out to keep it
    within `reflector.max_prompt_tokens` (the last ones go first); `None` when even one
    attempt does not fit."""
    cap = reflector.max_prompt_tokens
    shown = len(batch.rollouts)
    while shown > 0:
        part = Minibatch(batch.source, batch.rollouts[:shown])
        prompt = reflection_prompt(skill, part, buffer, max_edits, evidence)
        if cap is None or reflector.estimate_tokens(prompt) <= cap:
            return prompt, len(batch.rollouts) - shown
        shown -= 1
    return None, len(batch.rollouts)


def reflect(
    reflector: Reflector,
    skill: SkillDocument,
    batches: Sequence[Minibatch],
    buffer: StepBuffer,
    max_edits: int,
    evidence: Evidence = DEFAULT_EVIDENCE,
) -> list[Reflection]:
    """One reflector call per minibatch, in parallel; results in minibatch order. A call that
    failed is a `Reflection` with its `error` and no edits."""
    fitted = [fitted_prompt(reflector, skill, b, buffer, max_edits, evidence) for b in batches]
    asked = [i for i, (prompt, _) in enumerate(fitted) if prompt is not None]
    replies = reflector.ask_many([fitted[i][0] or "" for i in asked], "reflect")
    by_batch: dict[int, str | ChatFailure] = dict(zip(asked, replies, strict=True))
    out = []
    for i, batch in enumerate(batches):
        left_out = fitted[i][1]
        reply = by_batch.get(i)
        keys = [r.item_key for r in batch.rollouts]
        if reply is None:
            error = (
                f"the prompt is longer than {reflector.key('reflector.max_prompt_tokens')} "
                f"({reflector.max_prompt_tokens} tokens) even with one attempt"
            )
            out.append(Reflection(batch.source, keys, "", [], [error], "", error, left_out))
        elif isinstance(reply, ChatFailure):
            out.append(Reflection(batch.source, keys, "", [], [str(reply)], "", str(reply)))
        else:
            reflection = parse_reflection(batch, reply, max_edits)
            reflection.left_out = left_out
            if left_out:
                reflection.problems.append(
                    f"{left_out} of {len(batch.rollouts)} attempts left out to keep the prompt "
                    f"within {reflector.key('reflector.max_prompt_tokens')}"
                )
            out.append(reflection)
    return out
