import math

import numpy as np
import pytest

from honed.rewards import RewardNormalizer


def test_unknown_mode_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"'robust'.*zscore, minmax, none"):
        RewardNormalizer(mode="robust")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"clip": -1.0}, "clip"), ({"warmup": -1}, "warmup"), ({"eps": -1e-3}, "eps")],
)
def test_invalid_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RewardNormalizer(**kwargs)


def test_zscore_uses_statistics_including_the_batch():
    norm = RewardNormalizer(warmup=0)
    out = norm.normalize([1.0, 2.0, 3.0, 4.0])
    expected = (np.array([1, 2, 3, 4]) - 2.5) / np.std([1, 2, 3, 4])
    assert out == pytest.approx(expected.tolist())
    assert norm.count == 4 and norm.mean == 2.5
    later = norm.normalize([2.5])  # now judged against all five values
    assert later == pytest.approx([0.0])
    assert norm.std == pytest.approx(np.std([1, 2, 3, 4, 2.5]))


def test_minmax_maps_the_running_range_to_unit_interval():
    norm = RewardNormalizer(mode="minmax", warmup=0)
    assert norm.normalize([10.0, 20.0, 30.0]) == pytest.approx([0.0, 0.5, 1.0])
    assert norm.normalize([15.0]) == pytest.approx([0.25])


def test_warmup_passes_raw_scores_clipped_then_switches():
    norm = RewardNormalizer(warmup=10, clip=5.0)
    assert norm.normalize([1.0, 2.0, 100.0, -100.0]) == [1.0, 2.0, 5.0, -5.0]
    assert not norm.is_warmed_up
    assert (
        norm.normalize([0.0] * 5) == [0.0] * 5
    )  # 9 samples: still warming up (samples, not batches)
    out = norm.normalize([1.0, 2.0])  # 11 samples: normalised
    assert norm.is_warmed_up
    assert out == pytest.approx(((np.array([1.0, 2.0]) - norm.mean) / norm.std).tolist())


@pytest.mark.parametrize("clip", [0, 0.0, None])
def test_clip_zero_or_none_disables_clipping(clip):
    scores = [0.0] * 99 + [1.0]  # the outlier sits near +10 standard deviations
    unclipped = RewardNormalizer(clip=clip, warmup=0).normalize(scores)
    assert unclipped[-1] == pytest.approx(math.sqrt(99))
    clipped = RewardNormalizer(clip=5.0, warmup=0).normalize(scores)
    assert clipped[-1] == 5.0


def test_degenerate_spread_gives_zeros_or_halves():
    assert RewardNormalizer(warmup=0).normalize([3.0, 3.0, 3.0]) == [0.0, 0.0, 0.0]
    assert RewardNormalizer(mode="minmax", warmup=0).normalize([3.0, 3.0]) == [0.5, 0.5]
    # eps = 0 must not divide by zero; a large eps treats a real spread as none
    assert RewardNormalizer(warmup=0, eps=0.0).normalize([7.0, 7.0]) == [0.0, 0.0]
    assert RewardNormalizer(warmup=0, eps=10.0).normalize([1.0, 3.0]) == [0.0, 0.0]
    assert RewardNormalizer(mode="minmax", warmup=0, eps=10.0).normalize([1.0, 3.0]) == [0.5, 0.5]
    # above eps the spread is divided by std + eps, as in Atropos
    assert RewardNormalizer(warmup=0, eps=0.5).normalize([1.0, 3.0]) == [-1 / 1.5, 1 / 1.5]


def test_mode_none_returns_scores_unchanged_and_records_nothing():
    norm = RewardNormalizer(mode="none", clip=1.0, warmup=0)
    assert norm.normalize([1.5, -40.0, 3]) == [1.5, -40.0, 3.0]
    assert norm.count == 0
    assert norm.metrics_dict()["reward_norm/count"] == 0.0


def test_metrics_keys_and_values():
    norm = RewardNormalizer()
    norm.normalize([1.0, 5.0])
    assert norm.metrics_dict() == {
        "reward_norm/count": 2.0,
        "reward_norm/mean": 3.0,
        "reward_norm/std": 2.0,
        "reward_norm/min": 1.0,
        "reward_norm/max": 5.0,
    }


def test_empty_batch_and_non_finite_rewards():
    norm = RewardNormalizer()
    assert norm.normalize([]) == []
    with pytest.raises(ValueError, match="non-finite"):
        norm.normalize([1.0, float("nan")])
    assert norm.count == 0


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(0)
    norm = RewardNormalizer(warmup=5)
    norm.normalize(rng.normal(size=8))
    resumed = RewardNormalizer(warmup=5)
    resumed.load_state_dict(norm.state_dict())
    batch = rng.normal(size=6).tolist()
    assert resumed.normalize(batch) == norm.normalize(batch)
    assert resumed.metrics_dict() == norm.metrics_dict()


def test_merge_combines_workers_statistics():
    a, b, whole = (RewardNormalizer(warmup=0) for _ in range(3))
    a.normalize([1.0, 2.0, 3.0])
    b.normalize([10.0, 20.0])
    whole.normalize([1.0, 2.0, 3.0, 10.0, 20.0])
    a.merge(b)
    assert a.metrics_dict() == pytest.approx(whole.metrics_dict())
