"""What to practise next: environment mixtures and per-environment curricula."""

from honed.sampling.curriculum import CurriculumScheduler
from honed.sampling.mixture import EnvironmentMixture

__all__ = ["CurriculumScheduler", "EnvironmentMixture"]
