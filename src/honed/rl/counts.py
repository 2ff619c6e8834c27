"""What a GRPO run has spent in generation, and what of it the updates trained on.

"Rollouts to a target" compares runs only if every rollout generated is counted: those of
groups that dynamic sampling or the zero-spread filter dropped, and the screening rollouts of
groups that stopped after them (`trainer.screening`). `generated` counts them all, as
trajectories and as the model's completion tokens (every segment's, so a multi-turn episode's
turns all count); `kept` counts those of the groups an update trained on. All four are
cumulative, saved in every checkpoint, and continue on resume; `trainer.max_rollouts` is a
budget on generated rollouts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from honed.types import Group


def completion_tokens(group: Group) -> int:
    """The tokens the model generated for a group: every segment's completion."""
    return sum(len(s.completion_ids) for t in group.trajectories for s in t.segments)


@dataclass
class RolloutCounts:
    rollouts_generated: int = 0
    tokens_generated: int = 0
    rollouts_kept: int = 0
    tokens_kept: int = 0

    def generated(self, groups: Iterable[Group]) -> None:
        """Count groups as they come back from the rollout backend, before any filter."""
        for group in groups:
            self.rollouts_generated += len(group.trajectories)
            self.tokens_generated += completion_tokens(group)

    def kept(self, groups: Iterable[Group]) -> None:
        """Count the groups an update trained on."""
        for group in groups:
            self.rollouts_kept += len(group.trajectories)
            self.tokens_kept += completion_tokens(group)

    def metrics(self) -> dict[str, float]:
        """`rollouts/generated`, `tokens/generated`, `rollouts/kept`, `tokens/kept`, and
        `sampling/rollouts_total`, the name `rollouts/generated` had before."""
        return {
            "rollouts/generated": float(self.rollouts_generated),
            "tokens/generated": float(self.tokens_generated),
            "rollouts/kept": float(self.rollouts_kept),
            "tokens/kept": float(self.tokens_kept),
            "sampling/rollouts_total": float(self.rollouts_generated),
        }

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint's counts; one written before they were kept has only
        `rollouts_generated` (in the trainer's state), and the others start at 0."""
        for name in asdict(self):
            setattr(self, name, int(state.get(name, 0)))
