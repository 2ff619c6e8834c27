"""Which parts of a group carry a reward, and each part's reward before normalisation.

Shared by the learner (advantages, `rl/`) and the rollout workers (`distributed/shard.py`,
which feed reward statistics back), so it sits below both, and below the config: it takes the
settings it needs as plain values.
"""

from __future__ import annotations

from dataclasses import dataclass

from honed.types import Group


@dataclass
class GroupUnits:
    """The rewarded units of one group: per unit, its reward and the segments it covers."""

    rewards: list[float]
    # (trajectory index, segment index) pairs covered by each unit
    members: list[list[tuple[int, int]]]


def group_units(group: Group) -> GroupUnits:
    """Segments are units when any of them carries its own reward; else trajectories are."""
    per_segment = any(s.reward is not None for t in group.trajectories for s in t.segments)
    rewards: list[float] = []
    members: list[list[tuple[int, int]]] = []
    for ti, traj in enumerate(group.trajectories):
        if per_segment:
            for si, seg in enumerate(traj.segments):
                rewards.append(float(traj.reward if seg.reward is None else seg.reward))
                members.append([(ti, si)])
        else:
            rewards.append(float(traj.reward))
            members.append([(ti, si) for si in range(len(traj.segments))])
    return GroupUnits(rewards, members)


def overlong_penalty(length: int, max_length: int, buffer: int, factor: float) -> float:
    """DAPO's soft overlong punishment: 0 until `max_length - buffer`, then linear to -factor."""
    if buffer <= 0 or length <= max_length - buffer:
        return 0.0
    return -factor * min(1.0, (length - (max_length - buffer)) / buffer)


def unit_rewards(group: Group, max_length: int, buffer: int, factor: float) -> list[float]:
    """Each unit's reward, with the soft overlong penalty of its segments when `buffer` > 0
    (`overlong_penalty`; the trainer passes `max_completion_length`, `overlong_buffer` and
    `overlong_penalty`).

    A segment's length is the model's own tokens in it (its loss mask): a multi-turn episode's
    tool results and template tokens do not count against `max_length`."""
    units = group_units(group)
    rewards = list(units.rewards)
    if buffer:
        for u, members in enumerate(units.members):
            for ti, si in members:
                seg = group.trajectories[ti].segments[si]
                rewards[u] += overlong_penalty(sum(seg.mask()), max_length, buffer, factor)
    return rewards
