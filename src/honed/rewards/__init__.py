"""Putting rewards on a common footing: running statistics and per-environment normalisers."""

from honed.rewards.normalizer import RewardNormalizer
from honed.rewards.welford import WelfordAccumulator

__all__ = ["RewardNormalizer", "WelfordAccumulator"]
