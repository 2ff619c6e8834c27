"""Online reward normalisation, one normaliser per environment, applied before group advantages.

Environments score on different scales (a unit-test pass rate in [0, 1], a game score in the
hundreds). A normaliser keeps running statistics of an environment's rewards and maps each
batch onto a common footing: `zscore` → (r − mean) / std, `minmax` → (r − min) / (max − min),
then a symmetric clip at ±`clip`.

What it can and cannot change: both modes are *affine* maps r ↦ a·r + b with a > 0 (the same
a, b for every reward of one `normalize` call), and GRPO's group advantage
(r − mean_group) / std_group is invariant under affine maps (but for the small floor on
std_group, which a rescaling moves). So with per-group scaling (`scale_rewards: group`, the
default) the normaliser changes nothing but what the clip cuts off. It matters

- with `scale_rewards: none` (advantage r − mean_group): the normaliser sets the advantages'
  scale, i.e. the effective learning rate, and puts environments on the same one;
- with `scale_rewards: batch` (divide by the batch's std): in a batch mixing environments, an
  environment with a large reward scale would otherwise dominate the std and shrink every
  other environment's advantages;
- through clipping, which is not affine: in `zscore` mode an outlier is cut to ±`clip`
  standard deviations, so it no longer flattens the rest of its group (`minmax` output lies in
  [0, 1] already, since the batch is part of the statistics).

Hence: normalise a whole group in one call (so its rewards share a, b), and leave the
normaliser off (`mode="none"`) under group scaling unless outlier clipping is wanted. The GRPO
trainer goes further: it `observe`s the statistics of every group of a step (each group's
Welford shard, computed wherever the group was rolled out, merged in item order) and then
`apply`s one map to all of them, so a step's rewards share a, b and the result does not depend
on how the groups were spread over workers. The map
also moves as statistics accumulate (and jumps when warmup ends), which under
`scale_rewards: none` shows up as a changing advantage scale early in training.

The interface, the defaults and the values are those of Atropos's `RewardNormalizer`
(`VALID_MODES`, `normalize`, `metrics_dict`, `state_dict` in its format, `load_state_dict`
restoring settings and statistics): code and checkpoints written for it run unchanged
(docs/migrating.md lists what differs on purpose). On resume the GRPO trainer puts the config's
settings back with `configure`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal, get_args

import numpy as np

from honed.rewards.welford import WelfordAccumulator

# The modes, declared here and read by the config (`reward_norm.mode`): the reward statistics
# sit below the config and take plain values.
NormMode = Literal["zscore", "minmax", "none"]
MODES: tuple[str, ...] = get_args(NormMode)


def _settings(mode: str, clip: float | None, warmup: int, eps: float) -> dict[str, Any]:
    """Checked settings: a bad one raises `ValueError` naming it (Atropos took a negative clip
    or warmup as "off" and any eps)."""
    if mode not in MODES:
        raise ValueError(
            f"unknown reward normalisation mode {mode!r}; valid modes: {', '.join(MODES)}"
        )
    if clip is not None and not clip >= 0:
        raise ValueError(
            f"reward normalisation clip must be >= 0, or 0/None for none, got {clip!r}"
        )
    if warmup < 0:
        raise ValueError(f"reward normalisation warmup must be >= 0 samples, got {warmup!r}")
    if not eps >= 0:
        raise ValueError(f"reward normalisation eps must be >= 0, got {eps!r}")
    return {"mode": mode, "clip": float(clip) if clip else None, "warmup": int(warmup), "eps": eps}


class RewardNormalizer:
    """Running statistics of one environment's rewards and the map they define."""

    VALID_MODES: ClassVar[set[str]] = set(MODES)

    def __init__(
        self,
        mode: str = "zscore",
        clip: float | None = 5.0,
        warmup: int = 10,
        eps: float = 1e-8,
    ) -> None:
        self.__dict__.update(_settings(mode, clip, warmup, eps))
        self._accumulator = WelfordAccumulator()

    @property
    def count(self) -> int:
        return self._accumulator.count

    @property
    def mean(self) -> float:
        return self._accumulator.mean

    @property
    def std(self) -> float:
        return self._accumulator.std

    @property
    def is_warmed_up(self) -> bool:
        """True once `warmup` rewards (samples, not batches) have been seen."""
        return self._accumulator.count >= self.warmup

    def normalize(self, scores: Sequence[float] | np.ndarray) -> list[float]:
        """Add the batch to the statistics, then map it (raw but clipped during warmup)."""
        if self.mode == "none":
            return [float(s) for s in scores]
        self._accumulator.update_batch(scores)  # rejects NaN and infinity
        return self.apply(scores)

    def observe(self, stats: WelfordAccumulator) -> None:
        """Add statistics gathered elsewhere (a rollout worker's shard) without mapping anything.

        The GRPO trainer observes every group of a step first and then `apply`s one map to all
        of them, so a step's rewards share one affine map wherever they were generated. Like
        `normalize`, a `none` normaliser records nothing.
        """
        if self.mode != "none":
            self._accumulator.merge(stats)

    def apply(self, scores: Sequence[float] | np.ndarray) -> list[float]:
        """Map scores with the current statistics, recording nothing.

        Atropos's arithmetic, value for value: z-scores (r − mean) / (std + eps) and min-max
        (r − min) / (max − min + eps), zeros or halves when the spread is below eps (or exactly
        0, so that eps = 0 cannot divide by zero), then the symmetric clip.
        """
        values = np.asarray(scores, dtype=np.float64).ravel()
        if self.mode == "none" or values.size == 0:
            return values.tolist()
        stats = self._accumulator
        if not self.is_warmed_up:
            out = values
        elif self.mode == "zscore":
            std = stats.std
            if std < self.eps or std == 0.0:
                out = np.zeros_like(values)
            else:
                out = (values - stats.mean) / (std + self.eps)
        else:
            span = stats.max_val - stats.min_val
            if span < self.eps or span == 0.0:
                out = np.full_like(values, 0.5)
            else:
                out = (values - stats.min_val) / (span + self.eps)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        return out.tolist()

    def merge(self, other: RewardNormalizer) -> None:
        """Add another normaliser's statistics (e.g. from another rollout worker)."""
        self.observe(other._accumulator)

    def metrics_dict(self) -> dict[str, float]:
        stats = self._accumulator
        return {
            "reward_norm/count": float(stats.count),
            "reward_norm/mean": stats.mean,
            "reward_norm/std": stats.std,
            "reward_norm/min": stats.min_val,
            "reward_norm/max": stats.max_val,
        }

    def configure(
        self, mode: str, clip: float | None, warmup: int, eps: float
    ) -> list[tuple[str, Any, Any]]:
        """Take these settings, keeping the statistics; returns (name, before, after) for each
        one that changed. The GRPO trainer calls it after `load_state_dict` on resume: the
        checkpoint supplies the statistics, the config in force the settings."""
        new = _settings(mode, clip, warmup, eps)
        changed = [(k, getattr(self, k), v) for k, v in new.items() if getattr(self, k) != v]
        self.__dict__.update(new)
        return changed

    def state_dict(self) -> dict[str, Any]:
        """Atropos's format: the settings and the accumulator's `{count, mean, m2, min, max}`."""
        return {
            "mode": self.mode,
            "clip": self.clip,
            "warmup": self.warmup,
            "eps": self.eps,
            "accumulator": self._accumulator.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore settings and statistics, as Atropos does, from its format; a state written by
        earlier honed versions (`{"stats": ...}`, statistics only) keeps the current settings."""
        if "accumulator" in state:
            self.__dict__.update(
                _settings(state["mode"], state["clip"], state["warmup"], state["eps"])
            )
            self._accumulator.load_state_dict(state["accumulator"])
        else:
            self._accumulator.load_state_dict(state["stats"])


class NormalizerSet(dict[str, RewardNormalizer]):
    """One normaliser per environment, all with the same settings. An environment first met
    in a step (an Atropos environment, known to the trainer only once its first group
    arrives) gets a fresh one then."""

    def __init__(
        self,
        names: Iterable[str],
        mode: str = "zscore",
        clip: float | None = 5.0,
        warmup: int = 10,
        eps: float = 1e-8,
    ) -> None:
        super().__init__({name: RewardNormalizer(mode, clip, warmup, eps) for name in names})
        self.settings = (mode, clip, warmup, eps)

    def __missing__(self, name: str) -> RewardNormalizer:
        self[name] = normalizer = RewardNormalizer(*self.settings)
        return normalizer
