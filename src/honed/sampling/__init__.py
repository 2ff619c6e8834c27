"""What to practise next: environment mixtures and per-environment curricula."""

from honed.sampling.curriculum import CurriculumScheduler, CurriculumStrategy
from honed.sampling.mixture import EnvironmentMixture

__all__ = ["CurriculumScheduler", "CurriculumStrategy", "EnvironmentMixture"]
