"""The rollout-backend interface the GRPO trainer talks to, and the backend in the learner.

A backend turns `RolloutRequest`s into `RolledGroup`s: `submit` starts a request, `result`
returns its groups in item order; `sync_weights` is called after every optimizer step with the
learner's policy and its version (the number of optimizer steps taken). Requests may be
submitted ahead of the weights that will train on them; that is how asynchronous rollouts work
(`RolloutPipeline`). The learner keeps the sampler, curricula, normalisers and optimizer; a
backend only rolls out.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

from honed.config import TrainerConfig
from honed.distributed.shard import roll_out
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import WeightSync
from honed.envs.base import Environment, Generator
from honed.models.policy import Policy


class RolloutBackend(Protocol):
    def sync_weights(self, policy: Policy, version: int) -> None: ...

    def submit(self, request: RolloutRequest) -> None: ...

    def result(self, request: RolloutRequest) -> list[RolledGroup]: ...

    def metrics(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class LocalBackend:
    """Rollouts in the learner's process.

    With the learner's own policy as generator (`inprocess`), a request runs at once when
    submitted, on the weights of that moment, so `max_staleness` > 0 reproduces the lag of an
    asynchronous run deterministically (without its overlap). With inference servers as
    generator (`server`), requests run on a background thread while the learner trains, and a
    weight push first waits for the requests in flight, so each sample has one exact version.
    """

    def __init__(
        self,
        envs: Mapping[str, Environment],
        settings: TrainerConfig,
        generator: Generator,
        weight_sync: WeightSync | None = None,
    ) -> None:
        self.envs = envs
        self.settings = settings
        self.generator = generator
        self.weight_sync = weight_sync
        self.exact = weight_sync is None
        self.version = 0
        self._pool = None if weight_sync is None else ThreadPoolExecutor(max_workers=1)
        self._running: dict[int, tuple[Future, int]] = {}
        self._done: dict[int, tuple[list, int]] = {}

    def sync_weights(self, policy: Policy, version: int) -> None:
        if self._running:
            wait([future for future, _ in self._running.values()])
        if self.weight_sync is not None:
            version = self.weight_sync.push(policy, version)
        self.version = version

    def _run(self, request: RolloutRequest) -> list:
        return roll_out(self.envs, self.generator, request.items, request.seed, self.settings)

    def submit(self, request: RolloutRequest) -> None:
        if self._pool is None:
            self._done[request.id] = (self._run(request), self.version)
        else:
            self._running[request.id] = (self._pool.submit(self._run, request), self.version)

    def result(self, request: RolloutRequest) -> list[RolledGroup]:
        if request.id in self._running:
            future, version = self._running.pop(request.id)
            pairs = future.result()
        else:
            pairs, version = self._done.pop(request.id)
        return [RolledGroup(g, stats, version, self.exact) for g, stats in pairs]

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        close = getattr(self.generator, "close", None)
        if close is not None:
            close()
