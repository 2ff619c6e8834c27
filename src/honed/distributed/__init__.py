"""Scale-out of rollouts: where a step's groups are generated.

`build_backend` reads `config.distributed`: `inprocess` (the default) rolls out in the learner
with its own policy and imports nothing more; `ray` spreads items over Ray actors; `server`
samples from OpenAI-compatible inference servers. `RolloutPipeline` lets rollouts run ahead of
the learner by `max_staleness` steps. Ray is imported only when configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from honed.config import Config
from honed.distributed.backend import LocalBackend, RolloutBackend
from honed.distributed.pipeline import RolloutPipeline
from honed.distributed.server import CompletionsGenerator, server_clients
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import build_weight_sync
from honed.envs.base import Environment
from honed.models.policy import Policy, PolicySampler, SamplingParams

__all__ = [
    "LocalBackend",
    "RolledGroup",
    "RolloutBackend",
    "RolloutPipeline",
    "RolloutRequest",
    "build_backend",
]


def build_backend(
    config: Config, envs: Mapping[str, Environment], policy: Policy, run_dir: Path
) -> RolloutBackend:
    """The configured backend; the caller sends it the current weights before the first step."""
    dist, cfg = config.distributed, config.trainer
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_completion_length)
    if dist.server is None:
        weight_sync = None
        generator = PolicySampler(policy, params)
    else:
        clients = server_clients(dist.server)
        for client in clients:
            client.check()  # fail before the first step, naming the server
        weight_sync = build_weight_sync(dist.server, run_dir, clients)
        generator = CompletionsGenerator(dist.server, policy, params, clients)
    if dist.backend == "ray":
        from honed.distributed.ray_backend import RayBackend

        return RayBackend(config, weight_sync)
    return LocalBackend(envs, cfg, generator, weight_sync)
