"""Running mean and variance that stay exact when values sit on a large offset.

The textbook one-pass formula var = E[x²] − E[x]² loses every significant digit when the values
are 1e9 plus small noise (and can even turn negative, giving a complex std). Welford's update
and Chan et al.'s pairwise combination keep the sum of squared deviations (M2) directly, so
they stay accurate; the combination also lets separate workers' statistics merge exactly and a
whole batch be folded in with one vectorised step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


class WelfordAccumulator:
    """Count, mean, population variance, min and max of a stream of numbers."""

    def __init__(self) -> None:
        self._count = 0
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean
        self._min = 0.0
        self._max = 0.0

    @property
    def count(self) -> int:
        return self._count

    @property
    def mean(self) -> float:
        return self._mean

    @property
    def variance(self) -> float:
        """Population variance; 0 below two samples."""
        return self._m2 / self._count if self._count >= 2 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    @property
    def min_val(self) -> float:
        return self._min

    @property
    def max_val(self) -> float:
        return self._max

    def update(self, x: float) -> None:
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"cannot accumulate a non-finite value ({x!r})")
        self._count += 1
        delta = x - self._mean
        self._mean += delta / self._count
        self._m2 += delta * (x - self._mean)
        if self._count == 1:
            self._min = self._max = x
        else:
            self._min = min(self._min, x)
            self._max = max(self._max, x)

    def update_batch(self, xs: Sequence[float] | np.ndarray) -> None:
        """Fold in many values at once: the batch's own statistics, merged by Chan's formula."""
        values = np.asarray(xs, dtype=np.float64).ravel()
        if values.size == 0:
            return
        if not np.isfinite(values).all():
            raise ValueError("cannot accumulate non-finite values (NaN or infinity) in a batch")
        # Centre on the first value before summing, so a large common offset costs no precision.
        shifted = values - values[0]
        mean = values[0] + shifted.mean()
        m2 = float(np.square(values - mean).sum())
        self._combine(values.size, float(mean), m2, float(values.min()), float(values.max()))

    def merge(self, other: WelfordAccumulator) -> None:
        """Add another accumulator's values to this one, as if they had been seen here."""
        self._combine(other._count, other._mean, other._m2, other._min, other._max)

    def _combine(self, count: int, mean: float, m2: float, lo: float, hi: float) -> None:
        """Chan, Golub & LeVeque (1979): pairwise combination of two (count, mean, M2)."""
        if count == 0:
            return
        if self._count == 0:
            self._count, self._mean, self._m2, self._min, self._max = count, mean, m2, lo, hi
            return
        total = self._count + count
        delta = mean - self._mean
        self._mean += delta * (count / total)
        self._m2 += m2 + delta * delta * (self._count * count / total)
        self._count = total
        self._min = min(self._min, lo)
        self._max = max(self._max, hi)

    def state_dict(self) -> dict[str, Any]:
        return {
            "count": self._count,
            "mean": self._mean,
            "m2": self._m2,
            "min": self._min,
            "max": self._max,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._count = int(state["count"])
        self._mean = float(state["mean"])
        self._m2 = float(state["m2"])
        self._min = float(state["min"])
        self._max = float(state["max"])
