"""The multi-process learner: N data-parallel processes, one per device, started by
`honed train CONFIG --nproc N` (`honed.distributed.launch`) or by `torchrun`.

Every process builds the same trainer from the same config and seed, so the sampler, curricula
and normalisers start equal everywhere; each step,

1. every process draws the same items (same sampler state);
2. each rolls out a contiguous shard of them, whole groups (`ShardedBackend`; every rollout
   is seeded from its item and generation, so a shard gives exactly the groups it gives in one
   process), and the groups are gathered in item order, so every process observes all of them
   and the sampler, curricula and normalisers stay identical on every rank, exactly as in one
   process;
3. advantages and the loss's token weights are computed over the whole step's sequences
   (global normalisation), each process backpropagates the sequences of its own groups, and
   the gradients are summed over the processes (`LearnerGroup.sum_`): the sum is the gradient
   of the single-process loss, so clipping and the optimizer step are the same everywhere.

Rank 0 alone writes the run directory (config, metrics, samples, checkpoints, summary); a
checkpoint holds the whole state once, so it resumes on any number of processes. The backend
is NCCL on CUDA devices and gloo elsewhere (the CPU tests run two gloo processes).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from honed.distributed import fsdp
from honed.distributed.backend import RolloutBackend
from honed.distributed.shard import split
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.distributed.weight_sync import NoWeightSync, WeightSync
from honed.models.policy import Policy

# How long a process waits for the others at a collective before failing: long enough for a
# slow evaluation on rank 0, short enough that a hung rank does not hold GPUs for hours.
TIMEOUT = datetime.timedelta(minutes=30)


class LearnerGroup:
    """This process's place among the learner processes (one process: rank 0 of 1)."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def from_env(cls, device: torch.device) -> LearnerGroup:
        """The group torchrun (or `honed train --nproc`) started this process in, joined with
        NCCL on CUDA and gloo elsewhere; one process when `WORLD_SIZE` is unset or 1."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(backend, timeout=TIMEOUT)
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def shard(self, count: int) -> range:
        """The indices of `count` items (or groups) this process owns: a contiguous share."""
        return split(count, self.world_size)[self.rank]

    def largest_share(self, count: int) -> int:
        """How many of `count` items the process with the most owns (rank 0's share)."""
        return len(split(count, self.world_size)[0])

    def gather(self, local: Sequence[Any]) -> list[Any]:
        """Every process's `local` list, concatenated in rank order (torch pickles them between
        this run's own processes; nothing is read from files)."""
        if not self.distributed:
            return list(local)
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, list(local))
        return [x for part in parts for x in part]

    def sum_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Sum each tensor over the processes, in place, in one flat buffer per dtype."""
        if not self.distributed or not tensors:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for t in group:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

    def from_main(self, value: Any) -> Any:
        """Rank 0's `value`, on every process (what the others pass is ignored)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every process has come here."""
        if self.distributed:
            dist.barrier()

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether `flag` is set on any process (all processes get the same answer)."""
        if not self.distributed:
            return flag
        value = torch.tensor([1.0 if flag else 0.0], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def most(self, value: int, device: torch.device) -> int:
        """The largest `value` of any process (all processes get the same answer)."""
        if not self.distributed:
            return value
        top = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        return int(top.item())

    def close(self, *, wait: bool) -> None:
        """Leave the process group. With `wait` (the run ended cleanly on every process: it
        finished, or all agreed to stop) the processes first meet at a barrier, so that none
        leaves, closing its connections, while another is still in a collective call with it
        (which would fail there). After a failure nothing waits: a peer may be gone. (gloo's
        worker threads outlive this; `honed.distributed.launch.run_learner` says why a learner
        process then leaves without Python's shutdown.)"""
        if self.distributed and dist.is_initialized():
            if wait:
                dist.barrier()
            dist.destroy_process_group()


class PushFromMain:
    """The weight sync of several learner processes: the servers get each version once.

    Each process's rollout backend calls `push` after every optimizer step, once its own
    requests in flight have ended. The processes wait for each other there, so that no server
    changes its weights while another process's request is still generating; rank 0 alone
    sends the weights (`inner.push`: every process holds the same weights after the step;
    with fsdp, all gather them first and rank 0 saves them whole), and every process learns
    from it the version the servers now serve and, with `weight_sync: lora`, the adapter to
    request (`served_model`)."""

    def __init__(self, inner: WeightSync, group: LearnerGroup) -> None:
        self.inner = inner
        self.group = group
        self.served_model: str | None = getattr(inner, "served_model", None)

    def push(self, policy: Policy, version: int) -> int:
        self.group.barrier()
        # sharded (`trainer.parallel: fsdp`): every process takes part in gathering the whole
        # weights, which rank 0 alone then holds and saves for the servers
        whole = None
        if fsdp.is_sharded(policy.model) and not isinstance(self.inner, NoWeightSync):
            whole = fsdp.full_model_state(policy.model)
        pushed = None
        if self.group.is_main:
            with nullcontext() if whole is None else policy.whole_weights(whole):
                pushed = (
                    self.inner.push(policy, version),
                    getattr(self.inner, "served_model", None),
                )
        served, self.served_model = self.group.from_main(pushed)
        return served


class ShardedBackend:
    """A rollout backend for one of N learner processes: each request's items are split into
    contiguous shards, this process rolls out its own through `inner`, and the groups of all
    processes come back in item order."""

    def __init__(self, inner: RolloutBackend, group: LearnerGroup) -> None:
        self.inner = inner
        self.group = group

    def _mine(self, request: RolloutRequest) -> RolloutRequest:
        items = request.items
        return replace(request, items=[items[i] for i in self.group.shard(len(items))])

    def sync_weights(self, policy: Policy, version: int) -> None:
        self.inner.sync_weights(policy, version)

    def submit(self, request: RolloutRequest) -> None:
        self.inner.submit(self._mine(request))

    def result(self, request: RolloutRequest) -> list[RolledGroup]:
        return self.group.gather(self.inner.result(self._mine(request)))

    def metrics(self) -> dict[str, float]:
        return self.inner.metrics()

    def close(self) -> None:
        self.inner.close()
