"""Running mean and variance that stay exact when values sit on a large offset.

The textbook one-pass formula var = E[x²] − E[x]² loses every significant digit when the values
are 1e9 plus small noise (and can even turn negative, giving a complex std). Welford's update
and Chan et al.'s pairwise combination keep the sum of squared deviations (M2) directly, so
they stay accurate; the combination also lets separate workers' statistics merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


class WelfordAccumulator:
    """Count, mean, population variance, min and max of a stream of numbers.

    The interface and the arithmetic are Atropos's (`count` and `mean` attributes; `min_val` and
    `max_val` read 0.0 while empty, when the stored extremes are ±inf; values folded in one at a
    time, so `update_batch` gives bit for bit what Atropos computes). `merge` adds Chan's exact
    combination of two accumulators, for statistics gathered on several workers.
    """

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean
        self._min = math.inf
        self._max = -math.inf

    @property
    def variance(self) -> float:
        """Population variance; 0 below two samples."""
        return self._m2 / self.count if self.count >= 2 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    @property
    def min_val(self) -> float:
        return self._min if self.count > 0 else 0.0

    @property
    def max_val(self) -> float:
        return self._max if self.count > 0 else 0.0

    def update(self, value: float) -> None:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"cannot accumulate a non-finite value ({value!r})")
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (value - self.mean)
        self._min = min(self._min, value)
        self._max = max(self._max, value)

    def update_batch(self, values: Sequence[float] | np.ndarray) -> None:
        """Fold in many values, one after the other (checked for NaN and infinity first, so a
        bad batch leaves the statistics untouched)."""
        batch = np.asarray(values, dtype=np.float64).ravel()
        if not np.isfinite(batch).all():
            raise ValueError("cannot accumulate non-finite values (NaN or infinity) in a batch")
        for value in batch.tolist():
            self.update(value)

    def merge(self, other: WelfordAccumulator) -> None:
        """Add another accumulator's values to this one, as if they had been seen here.

        Chan, Golub & LeVeque (1979): the pairwise combination of two (count, mean, M2) is exact
        up to rounding, so workers' shards merge into the statistics of the whole stream.
        """
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self._m2 = other.count, other.mean, other._m2
            self._min, self._max = other._min, other._max
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * (other.count / total)
        self._m2 += other._m2 + delta * delta * (self.count * other.count / total)
        self.count = total
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def state_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": self.mean,
            "m2": self._m2,
            "min": self._min,
            "max": self._max,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Atropos's format (also what this class writes); an empty accumulator saved with 0.0
        extremes by earlier honed versions gets ±inf back, so its first value sets both."""
        self.count = int(state["count"])
        self.mean = float(state["mean"])
        self._m2 = float(state["m2"])
        empty = self.count == 0
        self._min = math.inf if empty else float(state["min"])
        self._max = -math.inf if empty else float(state["max"])
