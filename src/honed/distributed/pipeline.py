"""Running rollouts ahead of the learner by at most `max_staleness` optimizer steps.

At the start of step s the pipeline makes sure the first-round requests of steps
s, s+1, ..., s+k (k = `max_staleness`) have been submitted, then waits for step s's. The
request for step t is therefore submitted at step t−k at the earliest, after the weights of
version t−k were sent, so it trains on samples at most k versions old. With k = 0 the request
of a step is drawn and submitted when the step starts: the synchronous loop.

Items are drawn from the sampler (the learner's) when a request is submitted, so with k > 0 the
curricula see a step's results k steps after choosing its items. Requests submitted but not yet
trained on are part of the checkpoint (their items, by key, and seeds); a resumed run submits
them again on its current weights, so no item is drawn twice or lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from honed.distributed.backend import RolloutBackend
from honed.distributed.types import RolledGroup, RolloutRequest
from honed.types import Item

# (step, round, number of items) → a request whose items the sampler has drawn
Draw = Callable[[int, int, int], RolloutRequest]


class RolloutPipeline:
    def __init__(self, backend: RolloutBackend, max_staleness: int) -> None:
        self.backend = backend
        self.max_staleness = max_staleness
        self.ahead: dict[int, RolloutRequest] = {}
        self._restored: list[RolloutRequest] = []
        self._next_id = 0

    def request(self, step: int, round_index: int, items: list[Item], seed: int) -> RolloutRequest:
        self._next_id += 1
        return RolloutRequest(self._next_id, step, round_index, items, seed)

    def first_round(self, step: int, max_steps: int, count: int, draw: Draw) -> list[RolledGroup]:
        """Step `step`'s first-round groups, after submitting the steps it may run ahead to."""
        for request in self._restored:
            self.ahead[request.step] = request
            self.backend.submit(request)
        self._restored = []
        for t in range(step, min(step + self.max_staleness, max_steps - 1) + 1):
            if t not in self.ahead:
                self.ahead[t] = draw(t, 0, count)
                self.backend.submit(self.ahead[t])
        return self.backend.result(self.ahead.pop(step))

    def now(self, request: RolloutRequest) -> list[RolledGroup]:
        """A request answered before the step goes on (dynamic sampling's extra rounds)."""
        self.backend.submit(request)
        return self.backend.result(request)

    def state_dict(self) -> list[dict[str, Any]]:
        pending = sorted(self.ahead.values(), key=lambda r: r.step)
        return [
            {
                "step": r.step,
                "round": r.round,
                "items": [(i.env, i.key) for i in r.items],
                "seed": r.seed,
            }
            for r in pending + self._restored
        ]

    def load_state_dict(
        self, state: list[dict[str, Any]], items: Mapping[str, Mapping[str, Item]]
    ) -> None:
        """Requests to submit again when the next step starts (`items`: env → key → Item)."""
        self._restored = [
            self.request(
                r["step"], r["round"], [items[env][key] for env, key in r["items"]], r["seed"]
            )
            for r in state
        ]
