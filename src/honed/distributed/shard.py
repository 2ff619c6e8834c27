"""Rolling out a shard of items: the same code in the learner, in a Ray worker, or in front of
an inference server, so that what comes back depends only on the items, seed and weights.

Every rollout's randomness is seeded from (run seed, step, round, item key, generation index)
(`SingleTurnEnv.rollout` and `Policy.generate` draw row i only from its own seed), so a shard
of a step's items yields exactly the groups those items yield in the whole batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from honed.config import TrainerConfig
from honed.envs.base import Environment, Generator
from honed.errors import HonedError
from honed.rewards import WelfordAccumulator
from honed.rewards.units import unit_rewards
from honed.types import Group, Item


def reward_stats(group: Group, settings: TrainerConfig) -> WelfordAccumulator:
    """The group's shard of reward statistics: its unit rewards, as the trainer normalises them.
    Empty for a group with a non-finite reward: the trainer stops or skips the step on it
    (`honed.rl.nonfinite`) before any statistic would take it in."""
    stats = WelfordAccumulator()
    rewards = unit_rewards(
        group, settings.max_completion_length, settings.overlong_buffer, settings.overlong_penalty
    )
    if all(math.isfinite(r) for r in rewards):
        stats.update_batch(rewards)
    return stats


def roll_out(
    envs: Mapping[str, Environment],
    generator: Generator,
    items: Sequence[Item],
    seed: int,
    settings: TrainerConfig,
) -> list[tuple[Group, WelfordAccumulator]]:
    """One group (with its reward statistics) per item, in the order of `items`.

    Items of one environment go to it in one call, so a single-turn environment batches all
    their completions into one generation.
    """
    slots: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        slots.setdefault(item.env, []).append(i)
    out: dict[int, tuple[Group, WelfordAccumulator]] = {}
    for name, where in slots.items():
        groups = envs[name].rollout(
            [items[i] for i in where], generator, settings.num_generations, seed
        )
        if len(groups) != len(where):
            raise HonedError(
                f"environment '{name}' returned {len(groups)} groups for {len(where)} items"
            )
        for i, group in zip(where, groups, strict=True):
            group.env = name
            out[i] = (group, reward_stats(group, settings))
    return [out[i] for i in range(len(items))]


def split(n: int, parts: int) -> list[range]:
    """Contiguous, balanced index ranges: `n` items over `parts` workers (sizes differ by ≤ 1)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (p < extra)
        out.append(range(start, start + size))
        start += size
    return out
