"""Rolling out a shard of items: the same code in the learner, in a Ray worker, or in front of
an inference server, so that what comes back depends only on the items, seed and weights.

Every rollout's randomness is seeded from (run seed, step, round, item key, generation index)
(`SingleTurnEnv.rollout` and `Policy.generate` draw row i only from its own seed), so a shard
of a step's items yields exactly the groups those items yield in the whole batch.

Screening (`trainer.screening.rollouts` = k > 0) happens here, so that every backend does it
the same way: each item first gets generations 0..k−1; an item whose k unit rewards agree
stops there (its group has k trajectories, no spread, and nothing more is generated for it);
the others get generations k..n−1 and their group is the concatenation. Environments take
`first_generation=k` to seed those as an unscreened group would (`rollout_seed(seed, key, g)`),
so a group that goes on is exactly the unscreened group. An environment whose `rollout` has no
such parameter gets the rest under a seed of their own (`derive_seed(seed, "screening")`):
still reproducible, but not the unscreened group's completions.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence

from honed.config import TrainerConfig
from honed.envs.base import Environment, Generator
from honed.errors import HonedError
from honed.rewards import WelfordAccumulator
from honed.rewards.units import unit_rewards
from honed.types import Group, Item, derive_seed


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

    Items of one environment go to it in one call (two with screening: the screens, then the
    rest of the groups that go on), so a single-turn environment batches all their completions
    into one generation.
    """
    slots: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        slots.setdefault(item.env, []).append(i)
    out: dict[int, tuple[Group, WelfordAccumulator]] = {}
    screen = settings.screening.rollouts
    for name, where in slots.items():
        env, these = envs[name], [items[i] for i in where]
        if screen:
            groups = _screened(name, env, these, generator, seed, settings)
        else:
            groups = _groups(name, env, these, generator, settings.num_generations, seed)
        for i, group in zip(where, groups, strict=True):
            group.env = name
            out[i] = (group, reward_stats(group, settings))
    return [out[i] for i in range(len(items))]


def _groups(
    name: str,
    env: Environment,
    items: Sequence[Item],
    generator: Generator,
    count: int,
    seed: int,
    first_generation: int = 0,
) -> list[Group]:
    """`env.rollout` of `count` generations per item, one group per item (checked); the
    generations from `first_generation` on are asked for by that keyword, which only
    screening's second call gives."""
    more = {"first_generation": first_generation} if first_generation else {}
    groups = env.rollout(items, generator, count, seed, **more)
    if len(groups) != len(items):
        raise HonedError(
            f"environment '{name}' returned {len(groups)} groups for {len(items)} items"
        )
    return groups


def _screened(
    name: str,
    env: Environment,
    items: Sequence[Item],
    generator: Generator,
    seed: int,
    settings: TrainerConfig,
) -> list[Group]:
    """Each item's group, screened: k rollouts, then the other n − k only where they disagree.

    The trajectory counts are checked too: a group that came back with another number than
    asked for would be mistaken for a screened one."""
    k, n = settings.screening.rollouts, settings.num_generations
    groups = _groups(name, env, items, generator, k, seed)
    going_on = [i for i, g in enumerate(groups) if not _agree(g, settings)]
    rest: list[Group] = []
    if going_on:
        rest_items = [items[i] for i in going_on]
        if takes_first_generation(env):
            rest = _groups(name, env, rest_items, generator, n - k, seed, first_generation=k)
        else:
            rest = _groups(name, env, rest_items, generator, n - k, derive_seed(seed, "screening"))
    for group, count in [(g, k) for g in groups] + [(g, n - k) for g in rest]:
        if len(group.trajectories) != count:
            raise HonedError(
                f"environment '{name}' returned {len(group.trajectories)} trajectories for "
                f"item '{group.item_key}', asked for {count}"
            )
    for i, more in zip(going_on, rest, strict=True):
        groups[i].trajectories = groups[i].trajectories + more.trajectories
    return groups


def _agree(group: Group, settings: TrainerConfig) -> bool:
    """Whether a screen's unit rewards (with the overlong penalty, before any normalisation)
    agree: their standard deviation is below `zero_std_tolerance`, the filter's test."""
    rewards = unit_rewards(
        group, settings.max_completion_length, settings.overlong_buffer, settings.overlong_penalty
    )
    if not all(math.isfinite(r) for r in rewards):
        return False  # the learner's check stops or skips the step on it, with its message
    mean = math.fsum(rewards) / len(rewards)
    variance = math.fsum((r - mean) ** 2 for r in rewards) / max(len(rewards) - 1, 1)
    return math.sqrt(variance) < settings.zero_std_tolerance


def takes_first_generation(env: Environment) -> bool:
    """Whether `env.rollout` accepts `first_generation` (by name, or through `**kwargs`)."""
    parameters = inspect.signature(env.rollout).parameters.values()
    return any(
        p.name == "first_generation" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


def split(n: int, parts: int) -> list[range]:
    """Contiguous, balanced index ranges: `n` items over `parts` workers (sizes differ by ≤ 1)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for p in range(parts):
        size = base + (p < extra)
        out.append(range(start, start + size))
        start += size
    return out
