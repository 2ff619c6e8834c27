"""Putting rewards on a common footing: running statistics and per-environment normalisers."""

from honed.rewards.normalizer import NormalizerSet, RewardNormalizer
from honed.rewards.welford import WelfordAccumulator

__all__ = ["NormalizerSet", "RewardNormalizer", "WelfordAccumulator"]
