"""The gate: a candidate skill replaces the current one only if it scores higher on held-out
items (the selection split). It is the skill loop's only rollback, so its rule is exact:

- `strict` compares the hard score (exact success), `soft` the soft score (partial credit),
  `mixed` the blend `w * hard + (1 - w) * soft` with `w = mixed_weight`.
- The candidate is accepted when its score exceeds the current one by more than `min_delta`
  (0 by default: strictly higher). Scores that differ by less than 1e-9 are equal, so float
  noise in means can neither accept nor reject a candidate.
- With `tie_break`, a candidate that exactly ties on the gate's score is accepted when it is
  strictly higher on the other score (soft for `strict`, hard for `soft`; `mixed` already uses
  both and has nothing to break ties with).

Why ties and `num_items` matter: on `n` selection items the hard score can only move in steps of
`1/n`. With 10 items, a candidate must fix a whole item (net of any it breaks) to pass a strict
gate, and edits that make answers better without making them exactly right never pass; this is
how small validation sets stall training. The remedies are more selection items, `mixed` or
`soft` scores (which see partial progress), or `tie_break` (hard first, soft decides ties).
`min_delta` guards the other way, against accepting noise on large, noisy sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from honed.skills.config import GateConfig
from honed.skills.rollout import Scores

EPSILON = 1e-9


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict with both skills' scores, as recorded in each step's `gate.json`."""

    accepted: bool
    reason: str
    mode: str
    before: Scores
    after: Scores
    metric_before: float
    metric_after: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "mode": self.mode,
            "metric_before": self.metric_before,
            "metric_after": self.metric_after,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


class Gate:
    def __init__(self, config: GateConfig) -> None:
        self.config = config

    def metric(self, scores: Scores) -> float:
        """The number the gate compares, for this gate's mode."""
        mode = self.config.mode
        if mode == "strict":
            return scores.hard
        if mode == "soft":
            return scores.soft
        w = self.config.mixed_weight
        return w * scores.hard + (1 - w) * scores.soft

    def compare(self, before: Scores, after: Scores) -> tuple[bool, str]:
        """Whether `after` beats `before` under this gate's rule, and why (ignores `enabled`)."""
        a, b = self.metric(before), self.metric(after)
        delta = b - a
        name = f"{self.config.mode} score"
        if delta > self.config.min_delta + EPSILON:
            return True, f"{name} rose from {a:.4f} to {b:.4f}"
        if abs(delta) <= EPSILON and self.config.tie_break and self.config.mode != "mixed":
            other = "soft" if self.config.mode == "strict" else "hard"
            x, y = getattr(before, other), getattr(after, other)
            if y - x > EPSILON:
                return True, f"{name} tied at {a:.4f}; {other} score rose from {x:.4f} to {y:.4f}"
            return (
                False,
                f"{name} tied at {a:.4f} and {other} score did not rise ({x:.4f} to {y:.4f})",
            )
        if delta > EPSILON:
            return False, (
                f"{name} rose from {a:.4f} to {b:.4f}, not more than min_delta "
                f"{self.config.min_delta:g}"
            )
        if abs(delta) <= EPSILON:
            return False, f"{name} tied at {a:.4f} (the gate needs a strictly higher score)"
        return False, f"{name} fell from {a:.4f} to {b:.4f}"

    def decide(self, before: Scores, after: Scores) -> GateDecision:
        """The verdict on a candidate scoring `after` against the current skill's `before`."""
        better, reason = self.compare(before, after)
        accepted = better
        if not self.config.enabled:
            accepted, reason = (
                True,
                f"gate disabled (would have {'accepted' if better else 'rejected'}: {reason})",
            )
        return GateDecision(
            accepted=accepted,
            reason=reason,
            mode=self.config.mode,
            before=before,
            after=after,
            metric_before=self.metric(before),
            metric_after=self.metric(after),
        )

    def resolution_note(self, num_items: int) -> str | None:
        """A warning for selection sets so small that a strict gate will mostly see ties."""
        if self.config.mode != "strict" or self.config.tie_break or num_items >= 50:
            return None
        return (
            f"the gate scores {num_items} selection items: the hard score moves in steps of "
            f"{1 / num_items:.3f} and ties are rejected, so progress may stall; consider "
            "gate.tie_break=true, gate.mode=mixed or more items"
        )
