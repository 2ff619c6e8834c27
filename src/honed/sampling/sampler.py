"""The sampler: which items each step practises.

It decides how many items of a batch each environment gets (the mixture, by weight with a
guaranteed minimum share) and which training items those are. All randomness comes from its own
generator, whose state is part of every checkpoint, so a resumed run draws the same items.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from honed.envs.base import Environment
from honed.types import Group, Item


class Sampler:
    def __init__(
        self,
        envs: Mapping[str, Environment],
        weights: Mapping[str, float],
        min_share: Mapping[str, float] | None = None,
        seed: int = 0,
    ) -> None:
        self.envs = dict(envs)
        self.weights = {name: float(weights[name]) for name in self.envs}
        self.min_share = {name: float((min_share or {}).get(name, 0.0)) for name in self.envs}
        self.rng = random.Random(seed)
        self._train = {name: list(env.items("train")) for name, env in self.envs.items()}
        for name, items in self._train.items():
            if not items:
                raise ValueError(f"environment '{name}' has no training items")

    def allocate(self, n: int) -> dict[str, int]:
        """Items per environment: each gets ⌈min_share·n⌉ first, the rest by weight."""
        counts = {name: min(n, math.ceil(share * n)) for name, share in self.min_share.items()}
        names = list(self.envs)
        total_w = [self.weights[k] for k in names]
        for _ in range(max(0, n - sum(counts.values()))):
            counts[self.rng.choices(names, weights=total_w)[0]] += 1
        return counts

    def next_items(self, n: int) -> list[Item]:
        """`n` training items, grouped by environment in config order."""
        out: list[Item] = []
        for name, count in self.allocate(n).items():
            pool = self._train[name]
            out += [pool[self.rng.randrange(len(pool))] for _ in range(count)]
        return out

    def observe(self, groups: Sequence[Group]) -> None:
        """Feedback from scored groups (used by curricula)."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(_as_tuple(state["rng"]))


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value
