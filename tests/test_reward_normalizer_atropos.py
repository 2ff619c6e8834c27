"""Code and checkpoints written for Atropos's `RewardNormalizer` run on honed's and give its
values, bit for bit: honed folds values into its statistics one at a time in Atropos's order and
maps them with Atropos's formulas, so the same IEEE operations run on the same numbers."""

from __future__ import annotations

import json
import math
import random

import pytest

from honed.rewards import RewardNormalizer, WelfordAccumulator


class AtroposNormalizer:
    """What Atropos's normaliser computes, written from its definition for these tests:
    sequential Welford updates (population variance), min/max starting at ±inf and read as 0
    while empty, warmup in samples, z-score (r − mean) / (std + eps) or min-max
    (r − min) / (range + eps) with zeros / halves below eps, a symmetric clip, and
    `clip <= 0` or None meaning no clip."""

    def __init__(self, mode="zscore", clip=5.0, warmup=10, eps=1e-8):
        self.mode, self.clip, self.warmup, self.eps = (
            mode,
            clip if clip and clip > 0 else None,
            max(0, warmup),
            eps,
        )
        self.n, self.mu, self.m2, self.lo, self.hi = 0, 0.0, 0.0, math.inf, -math.inf

    def _std(self):
        return math.sqrt(self.m2 / self.n) if self.n >= 2 else 0.0

    def _clip(self, xs):
        return xs if self.clip is None else [max(-self.clip, min(self.clip, x)) for x in xs]

    def normalize(self, scores):
        if not scores:
            return []
        if self.mode == "none":
            return list(scores)
        for x in scores:
            self.n += 1
            d = x - self.mu
            self.mu += d / self.n
            self.m2 += d * (x - self.mu)
            self.lo, self.hi = min(self.lo, x), max(self.hi, x)
        if self.n < self.warmup:
            return self._clip(list(scores))
        if self.mode == "zscore":
            std = self._std()
            out = (
                [0.0] * len(scores)
                if std < self.eps
                else [(x - self.mu) / (std + self.eps) for x in scores]
            )
        else:
            span = self.hi - self.lo
            out = (
                [0.5] * len(scores)
                if span < self.eps
                else [(x - self.lo) / (span + self.eps) for x in scores]
            )
        return self._clip(out)

    def metrics(self):
        empty = self.n == 0
        return {
            "reward_norm/count": float(self.n),
            "reward_norm/mean": self.mu,
            "reward_norm/std": self._std(),
            "reward_norm/min": 0.0 if empty else self.lo,
            "reward_norm/max": 0.0 if empty else self.hi,
        }

    def state(self):
        return {
            "mode": self.mode,
            "clip": self.clip,
            "warmup": self.warmup,
            "eps": self.eps,
            "accumulator": {
                "count": self.n,
                "mean": self.mu,
                "m2": self.m2,
                "min": self.lo,
                "max": self.hi,
            },
        }


SETTINGS = [
    {"mode": mode, "clip": clip, "warmup": warmup, "eps": eps}
    for mode in ("zscore", "minmax", "none")
    for clip in (5.0, 1.5, None, 0.0)
    for warmup in (0, 1, 10)
    for eps in (1e-8, 0.3)
]


def _batches(rng: random.Random) -> list[list[float]]:
    """Batches of rewards of every kind: binary, continuous on an offset, constant, empty."""
    out = []
    for _ in range(12):
        kind = rng.choice(("binary", "offset", "wide", "constant", "empty"))
        size = rng.randint(1, 9)
        if kind == "binary":
            out.append([float(rng.random() < 0.3) for _ in range(size)])
        elif kind == "offset":
            out.append([1e6 + rng.gauss(0, 1) for _ in range(size)])
        elif kind == "wide":
            out.append([rng.uniform(-50, 50) for _ in range(size)])
        elif kind == "constant":
            out.append([2.5] * size)
        else:
            out.append([])
    return out


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(map(str, s.values())))
def test_normalize_metrics_and_state_equal_atropos_bit_for_bit(settings):
    rng = random.Random(json.dumps(settings))
    ours, theirs = RewardNormalizer(**settings), AtroposNormalizer(**settings)
    for batch in _batches(rng):
        assert ours.normalize(batch) == theirs.normalize(batch)
        assert ours.metrics_dict() == theirs.metrics()
        assert ours.count == theirs.n and ours.mean == theirs.mu and ours.std == theirs._std()
        assert ours.is_warmed_up == (theirs.n >= theirs.warmup)
    assert ours.state_dict() == theirs.state()


def test_the_interface_code_uses():
    assert {"zscore", "minmax", "none"} == RewardNormalizer.VALID_MODES
    norm = RewardNormalizer()
    assert (norm.mode, norm.clip, norm.warmup, norm.eps) == ("zscore", 5.0, 10, 1e-8)
    assert norm.metrics_dict() == AtroposNormalizer().metrics()  # empty: min and max read 0
    acc = WelfordAccumulator()
    assert acc.count == 0 and acc.mean == 0.0 and acc.min_val == 0.0 == acc.max_val
    # ... while the stored extremes are infinite, as in Atropos's checkpoints
    assert acc.state_dict() == {
        "count": 0,
        "mean": 0.0,
        "m2": 0.0,
        "min": math.inf,
        "max": -math.inf,
    }
    acc.update(3.0)
    assert (acc.min_val, acc.max_val) == (3.0, 3.0)


def test_an_atropos_checkpoint_loads_with_its_settings_json_round_tripped():
    rng = random.Random(5)
    theirs = AtroposNormalizer(mode="minmax", clip=2.0, warmup=3, eps=1e-6)
    for batch in _batches(rng)[:6]:
        theirs.normalize(batch)
    stored = json.loads(json.dumps(theirs.state()))  # as people save it
    ours = RewardNormalizer()  # other settings: the checkpoint's win, as in Atropos
    ours.load_state_dict(stored)
    assert (ours.mode, ours.clip, ours.warmup, ours.eps) == ("minmax", 2.0, 3, 1e-6)
    for batch in _batches(rng):
        assert ours.normalize(batch) == theirs.normalize(batch)


def test_an_empty_atropos_checkpoint_keeps_infinite_extremes():
    stored = json.loads(json.dumps(AtroposNormalizer().state()))  # "Infinity" in the JSON text
    ours = RewardNormalizer(mode="minmax", warmup=0)
    ours.load_state_dict(stored)
    assert ours.state_dict()["accumulator"]["min"] == math.inf
    assert ours.normalize([4.0, 8.0]) == AtroposNormalizer(warmup=10).normalize([4.0, 8.0])
    assert ours.metrics_dict()["reward_norm/min"] == 4.0


def test_a_state_from_earlier_honed_versions_loads_keeping_the_settings():
    ours = RewardNormalizer(mode="minmax", warmup=0)
    ours.load_state_dict({"stats": {"count": 0, "mean": 0.0, "m2": 0.0, "min": 0.0, "max": 0.0}})
    assert ours.mode == "minmax"
    ours.normalize([5.0, 7.0])
    assert (ours.metrics_dict()["reward_norm/min"], ours.metrics_dict()["reward_norm/max"]) == (
        5.0,
        7.0,
    )


def test_a_none_normaliser_records_nothing_however_statistics_arrive():
    """Atropos's `none` mode never accumulates; merged or observed statistics do not either."""
    shard = WelfordAccumulator()
    shard.update_batch([1.0, 2.0, 3.0])
    other = RewardNormalizer(warmup=0)
    other.normalize([10.0, 20.0])
    norm = RewardNormalizer(mode="none")
    norm.observe(shard)
    norm.merge(other)
    assert norm.normalize([1.0, 9.0]) == [1.0, 9.0]
    assert norm.state_dict() == AtroposNormalizer(mode="none").state()


def test_configure_takes_new_settings_and_keeps_the_statistics():
    norm = RewardNormalizer(warmup=0)
    norm.normalize([1.0, 2.0, 3.0])
    before = norm.state_dict()["accumulator"]
    assert norm.configure("zscore", 1.0, 0, 1e-8) == [("clip", 5.0, 1.0)]
    assert norm.configure("zscore", 1.0, 0, 1e-8) == []
    assert norm.state_dict()["accumulator"] == before
    assert norm.normalize([30.0])[-1] == 1.0  # the new clip applies
    with pytest.raises(ValueError, match="clip"):
        norm.configure("zscore", -1.0, 0, 1e-8)
