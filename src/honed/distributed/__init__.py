"""Scale-out of rollouts: where a step's groups are generated.

`build_backend` reads `config.distributed`: `inprocess` (the default) rolls out in the learner
with its own policy and imports nothing more; `ray` spreads items over Ray actors; `server`
samples from OpenAI-compatible inference servers; `atropos` pulls the groups Atropos
environments scored from its trajectory API. `RolloutPipeline` lets rollouts run ahead of
the learner by `max_staleness` steps. Ray is imported only when configured.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from honed.config import Config
from honed.distributed.backend import LocalBackend, RolloutBackend
from honed.distributed.learner import LearnerGroup, PushFromMain
from honed.distributed.pipeline import RolloutPipeline
from honed.distributed.server import CompletionsGenerator, server_clients
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import build_weight_sync
from honed.envs.base import Environment
from honed.models.policy import Policy, PolicySampler, SamplingParams

log = logging.getLogger(__name__)

__all__ = [
    "LocalBackend",
    "RolledGroup",
    "RolloutBackend",
    "RolloutPipeline",
    "RolloutRequest",
    "build_backend",
]


def secure_local_ray() -> None:
    """Make the local Ray cluster honed starts private to this machine and to this run.

    Without authentication, anyone who can reach the machine's Ray ports can join the cluster
    and run code. Ray reads these settings when it is imported, so this must run first:

    - a fresh random token goes into `RAY_AUTH_TOKEN` with `RAY_AUTH_MODE=token`;
    - `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` tells Ray this is a single-node cluster, so it keeps
      the loopback address as the node's address and its servers (GCS, raylet, workers) listen
      on 127.0.0.1 only, instead of every interface.

    Every process of the cluster (started by this one) inherits both. Settings the user made
    are left alone; if Ray was imported before, a warning says how to set them.
    """
    if "ray" in sys.modules:
        if "RAY_AUTH_MODE" not in os.environ:
            log.warning(
                "Ray was imported before honed could make the local cluster private; set "
                "RAY_AUTH_MODE=token, RAY_AUTH_TOKEN and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "
                "before importing Ray (docs/security.md)"
            )
        return
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def build_backend(
    config: Config,
    envs: Mapping[str, Environment],
    policy: Policy,
    run_dir: Path,
    learners: LearnerGroup | None = None,
) -> RolloutBackend:
    """The configured backend; the caller sends it the current weights before the first step.
    With several learner processes (`learners`), rank 0 alone pushes weights to servers."""
    dist, settings = config.distributed, config.trainer
    params = SamplingParams.of(settings)
    clients, weight_sync = [], None
    if dist.server is not None:
        clients = server_clients(dist.server)
        for client in clients:
            client.check()  # fail before the first step, naming the server
        weight_sync = build_weight_sync(dist.server, run_dir, clients)
        if learners is not None and learners.distributed:
            weight_sync = PushFromMain(weight_sync, learners)
    if dist.backend == "atropos":
        from honed.distributed.atropos import AtroposBackend

        return AtroposBackend(config, policy, run_dir, weight_sync, clients)
    if dist.server is None:
        generator = PolicySampler(policy, params)
    else:
        generator = CompletionsGenerator(dist.server, policy, params, clients, weight_sync)
    if dist.backend == "ray":
        if dist.address == "local":
            secure_local_ray()
        from honed.distributed.ray_backend import RayBackend

        return RayBackend(config, weight_sync)
    return LocalBackend(envs, settings, generator, weight_sync)
