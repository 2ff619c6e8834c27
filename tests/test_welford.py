import itertools
import math

import numpy as np
import pytest

from honed.rewards import WelfordAccumulator


def _one_by_one(values):
    acc = WelfordAccumulator()
    for x in values:
        acc.update(x)
    return acc


def _assert_matches_numpy(acc, values, rtol):
    values = np.asarray(values, dtype=np.float64)
    assert acc.count == values.size
    assert acc.mean == pytest.approx(values.mean(), rel=rtol)
    assert acc.variance == pytest.approx(values.var(), rel=rtol)
    assert acc.std == pytest.approx(values.std(), rel=rtol)
    assert acc.min_val == values.min()
    assert acc.max_val == values.max()


def test_matches_numpy_on_random_data():
    values = np.random.default_rng(0).normal(3.0, 2.0, size=2000)
    _assert_matches_numpy(_one_by_one(values), values, rtol=1e-10)
    batched = WelfordAccumulator()
    for chunk in np.array_split(values, 7):
        batched.update_batch(chunk)
    _assert_matches_numpy(batched, values, rtol=1e-10)


def test_stays_accurate_on_a_large_offset():
    noise = np.random.default_rng(1).normal(0.0, 1.0, size=5000)
    values = 1e9 + noise
    # The exact spread of the stored values: subtracting 1e9 from numbers near 1e9 is exact.
    exact_var = np.var(values - 1e9)
    naive_var = np.mean(values**2) - np.mean(values) ** 2
    assert abs(naive_var - exact_var) > 1.0  # the one-pass textbook formula is useless here
    batched = WelfordAccumulator()
    for chunk in np.array_split(values, 13):
        batched.update_batch(chunk)
    for acc in (_one_by_one(values), batched):
        assert acc.variance == pytest.approx(exact_var, rel=1e-6)
        assert acc.mean == pytest.approx(1e9 + np.mean(values - 1e9), abs=1e-6)


def test_merging_shards_equals_one_pass():
    values = np.random.default_rng(2).exponential(5.0, size=1000) + 1e6
    cuts = [0, 0, 17, 400, 401, 1000]  # includes an empty shard and a one-value shard
    shards = []
    for a, b in itertools.pairwise(cuts):
        acc = WelfordAccumulator()
        acc.update_batch(values[a:b])
        shards.append(acc)
    merged = WelfordAccumulator()
    for shard in shards:
        merged.merge(shard)
    whole = _one_by_one(values)
    assert merged.count == whole.count
    assert merged.mean == pytest.approx(whole.mean, rel=1e-14)
    assert merged.variance == pytest.approx(whole.variance, rel=1e-9)
    assert (merged.min_val, merged.max_val) == (whole.min_val, whole.max_val)


def test_empty_and_single_sample_conventions():
    acc = WelfordAccumulator()
    assert (acc.count, acc.mean, acc.variance, acc.std, acc.min_val, acc.max_val) == (
        0,
        0,
        0,
        0,
        0,
        0,
    )
    acc.update_batch([])
    assert acc.count == 0
    acc.update(-4.0)
    assert (acc.count, acc.mean, acc.variance, acc.min_val, acc.max_val) == (
        1,
        -4.0,
        0.0,
        -4.0,
        -4.0,
    )
    acc.update(2.0)
    assert acc.variance == 9.0 and acc.std == 3.0  # population variance


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(3)
    acc = WelfordAccumulator()
    acc.update_batch(rng.normal(size=50))
    copy = WelfordAccumulator()
    copy.load_state_dict(acc.state_dict())
    more = rng.normal(size=30)
    for a in (acc, copy):
        a.update_batch(more[:10])
        for x in more[10:]:
            a.update(x)
    assert acc.state_dict() == copy.state_dict()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_refused(bad):
    acc = WelfordAccumulator()
    with pytest.raises(ValueError, match="non-finite"):
        acc.update(bad)
    with pytest.raises(ValueError, match="non-finite"):
        acc.update_batch([1.0, bad])
    assert acc.count == 0
