"""How many items of each batch every environment gets.

Each environment has a `weight` (its intended share of the items) and optionally a `min_share`
that every single batch honours, so a slow or rarely drawn environment is never starved. A
batch of B items is filled in two parts:

1. each environment with minimum share m gets ceil(m·B) items up front;
2. the R items left are drawn one by one, each environment with probability proportional to
   how far its weighted share w·B is still above what it got in part 1 (max(w·B − ceil(m·B), 0)).

Part 2 makes the minimum a floor rather than a bonus: where the minimum does not bind, an
environment's expected share stays exactly its weight (a minimum below the weight only cuts off
the unlucky batches); where it binds, the environment gets its minimum and the other
environments share the rest by weight.
"""

from __future__ import annotations

import itertools
import math
import random
from bisect import bisect_right
from typing import Any

from honed.errors import did_you_mean


class EnvironmentMixture:
    """Splits every batch between environments by weight, with per-batch minimum shares."""

    def __init__(
        self,
        weights: dict[str, float],
        min_share: dict[str, float] | None = None,
        seed: int = 0,
    ) -> None:
        if not weights:
            raise ValueError("an environment mixture needs at least one environment with a weight")
        for env, weight in weights.items():
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(
                    f"environment {env!r} has weight {weight!r}; weights must be positive and "
                    "finite (drop the environment to leave it out)"
                )
        min_share = dict(min_share or {})
        for env, share in min_share.items():
            if env not in weights:
                raise ValueError(
                    f"min_share names unknown environment {env!r}{did_you_mean(env, weights)}; "
                    f"environments: {', '.join(weights)}"
                )
            if not 0.0 <= share <= 1.0:
                raise ValueError(
                    f"min_share of environment {env!r} must be in [0, 1], got {share!r}"
                )
        if math.fsum(min_share.values()) > 1.0 + 1e-12:
            raise ValueError(
                f"min_share values add up to {math.fsum(min_share.values()):g}, more than a whole "
                "batch; lower them so that they sum to at most 1"
            )
        total = math.fsum(weights.values())
        self._envs = list(weights)
        self._share = [weights[env] / total for env in self._envs]
        self._min_share = [min_share.get(env, 0.0) for env in self._envs]
        self._allocated = [0] * len(self._envs)
        self._rng = random.Random(seed)

    @property
    def envs(self) -> list[str]:
        return list(self._envs)

    def allocate(self, batch_size: int) -> dict[str, int]:
        """Items per environment for one batch; the counts sum to `batch_size`."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size must be a non-negative integer, got {batch_size!r}")
        # The small tolerance keeps 0.07 * 100 = 7.000000000000001 from becoming 8.
        counts = [math.ceil(m * batch_size - 1e-9) if m > 0 else 0 for m in self._min_share]
        reserved = sum(counts)
        if reserved > batch_size:
            wanted = ", ".join(
                f"{env}: {c}" for env, c in zip(self._envs, counts, strict=True) if c
            )
            raise ValueError(
                f"min_share needs {reserved} items ({wanted}) but the batch has {batch_size}; "
                "use a larger batch or smaller minimum shares"
            )
        extra = [max(s * batch_size - c, 0.0) for s, c in zip(self._share, counts, strict=True)]
        # Whenever items are left, the extras add up to at least their number, so some are > 0.
        open_envs = [e for e, x in enumerate(extra) if x > 0]
        cumulative = list(itertools.accumulate(extra[e] for e in open_envs))
        for _ in range(batch_size - reserved):
            j = bisect_right(cumulative, self._rng.random() * cumulative[-1])
            counts[open_envs[min(j, len(open_envs) - 1)]] += 1
        for e, c in enumerate(counts):
            self._allocated[e] += c
        return dict(zip(self._envs, counts, strict=True))

    def metrics_dict(self) -> dict[str, float]:
        """Each environment's share of all items allocated so far."""
        total = sum(self._allocated)
        return {
            f"mixture/{env}/share": (n / total if total else 0.0)
            for env, n in zip(self._envs, self._allocated, strict=True)
        }

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self._rng.getstate()
        return {
            "allocated": dict(zip(self._envs, self._allocated, strict=True)),
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        allocated = state["allocated"]
        if set(allocated) != set(self._envs):
            raise ValueError(
                f"mixture checkpoint has environments {sorted(allocated)} but this mixture has "
                f"{sorted(self._envs)}; resume with the same environments"
            )
        self._allocated = [int(allocated[env]) for env in self._envs]
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
