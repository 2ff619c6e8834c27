"""Integer allocation of items over difficulty levels and splits.

Kept apart from the environments because the arithmetic is easy to get subtly wrong (sums off by
one, a split asking more of a level than it holds) and is worth testing on its own.
"""

from __future__ import annotations

from collections.abc import Sequence


def share_evenly(total: int, capacities: Sequence[int]) -> list[int]:
    """Split `total` over bins as evenly as their capacities allow (water-filling).

    A bin that cannot take its equal share gives the shortfall to the others, so a level with few
    possible problems (1-digit addition has 100) does not shrink the split as a whole.
    """
    counts = [0] * len(capacities)
    remaining = total
    # Smallest bins first: each takes an equal share of what is left, or all it can hold.
    by_capacity = sorted(range(len(capacities)), key=lambda i: capacities[i])
    for position, i in enumerate(by_capacity):
        share = -(-remaining // (len(capacities) - position))  # ceiling division
        counts[i] = min(share, capacities[i])
        remaining -= counts[i]
    return counts


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` in proportion to integer `weights` (largest remainder), summing exactly.

    No bin gets more than its weight when `total <= sum(weights)`, which is what lets a split be
    carved out of each level's problems without overdrawing any level.
    """
    weight_sum = sum(weights)
    if weight_sum == 0:
        return [0] * len(weights)
    counts = [total * w // weight_sum for w in weights]
    remainders = [total * w % weight_sum for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts
