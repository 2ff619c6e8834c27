"""What the learner and its rollout backends exchange: requests for groups, and groups back.

Plain dataclasses, so that Ray can ship them between processes without knowing honed.
"""

from __future__ import annotations

from dataclasses import dataclass

from honed.rewards import WelfordAccumulator
from honed.types import Group, Item


@dataclass
class RolloutRequest:
    """One round of one step: the items the sampler drew for it, and the step's rollout seed.

    `id` is unique within a run; a backend answers each request exactly once.
    """

    id: int
    step: int
    round: int
    items: list[Item]
    seed: int


@dataclass
class RolledGroup:
    """A group as a backend returns it.

    `reward_stats` is the group's own shard of reward statistics (Welford, over the same unit
    rewards the trainer normalises); the learner merges the shards of a step in item order,
    which is the same order wherever the groups were generated. `version` is the number of
    optimizer steps behind the weights that sampled the group; `exact` is true when its
    behaviour log-probs come from honed's own sampler on those weights, false when an
    inference server computed them with its own kernels.
    """

    group: Group
    reward_stats: WelfordAccumulator
    version: int
    exact: bool = True
