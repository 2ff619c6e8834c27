"""Rollouts on Ray actors: N `RolloutWorker`s, each with the environments and a policy copy.

- **Weights.** After each optimizer step the learner `ray.put`s its state dict once; every
  worker loads that one object. An actor runs its calls in order, so a shard submitted after a
  load runs on those weights, and the version it reports is exact. With inference servers,
  the learner pushes the weights to the servers and tells each worker the version and the
  name they serve it under (`weight_sync: lora`: the adapter's), which the worker requests.
- **Sharding.** A request's items are cut into contiguous, balanced shards, one per worker.
  Groups come back with their reward-statistics shards and are put back in item order, so the
  learner sees what the in-process backend would have produced.
- **Failures.** A worker that dies (its process crashes, its node goes away, `ray.kill`) is
  replaced by a new actor that loads the current weights; its unfinished shards go to the new
  actor. A shard's groups are accepted once, keyed by (request, shard), so nothing is counted
  twice and every step still gets all its groups. After `max_worker_restarts` replacements the
  run stops with a `HonedError` (a worker that always dies is a bug, not bad luck).
- **Warm actors.** Starting an actor imports torch and transformers (seconds of CPU). When
  the caller started Ray itself (a sweep or notebook in one driver, the tests), the actors of a
  finished run stay up and the next run in that process `reset`s them instead of starting new
  ones; when honed started Ray, it shuts it down at the end and nothing stays behind.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from honed.config import Config
from honed.distributed import fsdp
from honed.distributed.shard import split
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import WeightSync
from honed.distributed.worker import RolloutWorker, ShardResult, ShardTask
from honed.errors import HonedError
from honed.models.policy import Policy

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None

log = logging.getLogger(__name__)

# Actors of finished runs, by (Ray job, CPUs per actor): handles die with their job, and an
# actor's CPUs are fixed when it starts.
_idle: dict[tuple[str, float], list[Any]] = {}


def connect(address: str) -> bool:
    """Join or start a Ray cluster; True when this call started it (and so shuts it down).

    `local` joins the Ray instance this process already started, or starts one on this
    machine, whose workers see the learner's `sys.path` (so `module:Class` environments import
    there too); `auto` joins the cluster of `ray start` on this node; `ray://host:port` goes
    through Ray Client.
    """
    if ray is None:
        raise HonedError("distributed.backend 'ray' needs Ray: pip install 'honed[distributed]'")
    if ray.is_initialized():
        return False
    try:
        if address == "local":
            path = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
            ray.init(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
        else:
            ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise HonedError(f"cannot connect to the Ray cluster at '{address}': {exc}") from exc
    return True


@dataclass
class _Running:
    worker: int
    actor: Any
    task: ShardTask


class RayBackend:
    def __init__(self, config: Config, weight_sync: WeightSync | None = None) -> None:
        dist = config.distributed
        self.started = connect(dist.address)
        self.n = dist.num_rollout_workers
        self.max_restarts = dist.max_worker_restarts
        self.weight_sync = weight_sync
        self.exact = weight_sync is None
        self._actor = ray.remote(num_cpus=dist.cpus_per_worker, max_restarts=0)(RolloutWorker)
        self._config = config.model_dump(mode="json")
        self._key = (ray.get_runtime_context().get_job_id(), dist.cpus_per_worker)
        self.workers = self._warm_workers()
        self._weights: Any = None
        self._served: str | None = None  # the name the servers hold the weights under
        self._version = 0
        self._running: dict[Any, _Running] = {}
        self._expected: dict[int, int] = {}
        self._done: dict[int, dict[int, ShardResult]] = {}
        self.restarts = 0
        self._requeued = 0
        self._sync_seconds = 0.0

    def _warm_workers(self) -> list[Any]:
        """Idle actors of earlier runs, reset for this one, then new ones for the rest.

        Idle actors of another shape are stopped, so that they hold no CPUs this run needs.
        """
        pool = _idle.pop(self._key, [])
        for actors in _idle.values():
            for actor in actors:
                ray.kill(actor, no_restart=True)
        _idle.clear()
        workers = []
        while pool and len(workers) < self.n:
            actor = pool.pop()
            try:
                ray.get(actor.reset.remote(self._config, len(workers)))
            except RayActorError:
                continue
            workers.append(actor)
        for actor in pool:
            ray.kill(actor, no_restart=True)
        return workers + [self._actor.remote(self._config, i) for i in range(len(workers), self.n)]

    # ------------------------------------------------------------------ weights

    def sync_weights(self, policy: Policy, version: int) -> None:
        started = time.perf_counter()
        if self.weight_sync is not None:
            # the servers hold the weights: let the shards in flight finish on the old ones
            while self._running:
                self._collect_one()
            version = self.weight_sync.push(policy, version)
            self._weights = None
            self._served = getattr(self.weight_sync, "served_model", None)
        else:
            model = policy.model
            # sharded (`trainer.parallel: fsdp`): every process gathers the whole weights for
            # its own actors
            whole = fsdp.whole_state(model) if fsdp.is_sharded(model) else model.state_dict()
            self._weights = ray.put({k: v.detach().clone() for k, v in whole.items()})
        self._version = version
        for actor in self.workers:
            actor.load_weights.remote(version, self._weights, self._served)
        self._sync_seconds += time.perf_counter() - started

    # ------------------------------------------------------------------ requests

    def submit(self, request: RolloutRequest) -> None:
        shards = [s for s in split(len(request.items), self.n) if len(s)]
        self._expected[request.id] = len(shards)
        self._done[request.id] = {}
        for k, slots in enumerate(shards):
            task = ShardTask(
                request.id, k, list(slots), [request.items[i] for i in slots], request.seed
            )
            self._dispatch(k, task)

    def result(self, request: RolloutRequest) -> list[RolledGroup]:
        while len(self._done[request.id]) < self._expected[request.id]:
            self._collect_one()
        shards = self._done.pop(request.id)
        del self._expected[request.id]
        by_slot = {
            slot: RolledGroup(group, stats, shard.version, self.exact)
            for shard in shards.values()
            for slot, (group, stats) in zip(shard.slots, shard.pairs, strict=True)
        }
        return [by_slot[i] for i in range(len(request.items))]

    def _dispatch(self, worker: int, task: ShardTask) -> None:
        actor = self.workers[worker]
        self._running[actor.rollout.remote(task)] = _Running(worker, actor, task)

    def _collect_one(self) -> None:
        """Wait for one shard; a dead worker is replaced and its shard sent to the new one."""
        [ref], _ = ray.wait(list(self._running), num_returns=1)
        running = self._running.pop(ref)
        try:
            result: ShardResult = ray.get(ref)
        except RayActorError as exc:
            self._replace(running.worker, running.actor, exc)
            self._requeued += len(running.task.items)
            self._dispatch(running.worker, running.task)
            return
        except RayTaskError as exc:
            if isinstance(exc.cause, HonedError):
                raise exc.cause from None
            raise
        shards = self._done[result.request_id]
        if result.shard in shards:
            raise RuntimeError(f"shard {result.shard} of request {result.request_id} came twice")
        shards[result.shard] = result

    def _replace(self, worker: int, dead: Any, exc: Exception) -> None:
        if self.workers[worker] is not dead:
            return  # already replaced when another of its shards failed
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise HonedError(
                f"rollout worker {worker} died and the run has used its "
                f"{self.max_restarts} restart(s) (distributed.max_worker_restarts): "
                f"{str(exc).splitlines()[0]}"
            )
        log.warning("rollout worker %d died; starting a new one and redoing its items", worker)
        ray.kill(dead, no_restart=True)
        actor = self._actor.remote(self._config, worker)
        actor.load_weights.remote(self._version, self._weights, self._served)
        self.workers[worker] = actor

    # ------------------------------------------------------------------ the rest

    def metrics(self) -> dict[str, float]:
        out = {
            "distributed/workers": float(self.n),
            "distributed/restarts": float(self.restarts),
            "distributed/requeued_items": float(self._requeued),
            "perf/weight_sync_time": self._sync_seconds,
        }
        self._requeued, self._sync_seconds = 0, 0.0
        return out

    def close(self) -> None:
        self._running.clear()
        if self.started:
            ray.shutdown()  # the actors go with the cluster honed started
        else:
            _idle[self._key] = self.workers
        self.workers = []
