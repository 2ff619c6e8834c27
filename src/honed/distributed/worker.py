"""A rollout worker: the config's environments and a copy of the policy, nothing else.

A plain class, so it is tested without Ray; the Ray backend turns it into an actor. It never
draws items or updates anything: it gets a shard of a step's items and the step's seed, and
returns their groups with each group's reward statistics and the version of the weights that
sampled them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from honed.config import Config
from honed.distributed.server import CompletionsGenerator
from honed.distributed.shard import roll_out
from honed.envs.registry import build_envs
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.rewards import WelfordAccumulator
from honed.types import Group, Item


@dataclass
class ShardTask:
    """Items `slots` of request `request_id` (the learner puts the groups back by slot)."""

    request_id: int
    shard: int
    slots: list[int]
    items: list[Item]
    seed: int


@dataclass
class ShardResult:
    request_id: int
    shard: int
    slots: list[int]
    pairs: list[tuple[Group, WelfordAccumulator]]
    version: int


class RolloutWorker:
    """Builds its environments and policy from the run's config (as a plain dict).

    With a `distributed.server` section the worker generates through the inference servers
    and its policy serves only as tokenizer, requesting the model the learner last named
    (`served_model`: with `weight_sync: lora`, the adapter loaded for this version; else the
    config's `distributed.server.model`); otherwise it samples from its own copy, whose
    weights the learner sends after each optimizer step.
    """

    def __init__(self, config_data: dict, index: int) -> None:
        self.reset(config_data, index)

    def reset(self, config_data: dict, index: int) -> int:
        """Start over for a new run, keeping only what the process has imported."""
        config = Config.model_validate(config_data)
        threads = config.torch_threads or max(1, int(config.distributed.cpus_per_worker))
        torch.set_num_threads(threads)
        self.index = index
        self.settings = config.trainer
        self.envs = build_envs(config.envs, config.seed)
        self.policy = Policy.from_config(config.policy, config.seed)
        params = SamplingParams.of(self.settings)
        server = config.distributed.server
        self.served_model: str | None = None
        self.generator = (
            CompletionsGenerator(server, self.policy, params, served=self)
            if server is not None
            else PolicySampler(self.policy, params)
        )
        self.version = -1
        return index

    def load_weights(
        self, version: int, state: dict[str, torch.Tensor] | None, served_model: str | None = None
    ) -> int:
        """Take the learner's weights (`None`: they live on the inference servers, serving
        them as `served_model` when they have a name of their own)."""
        if state is not None:
            self.policy.model.load_state_dict(state)
        self.version = version
        self.served_model = served_model
        return version

    def rollout(self, task: ShardTask) -> ShardResult:
        pairs = roll_out(self.envs, self.generator, task.items, task.seed, self.settings)
        return ShardResult(task.request_id, task.shard, task.slots, pairs, self.version)

    def pid(self) -> int:
        return os.getpid()
