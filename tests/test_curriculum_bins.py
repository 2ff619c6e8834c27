"""Bins are exact quantiles whenever they are read, at the cost of a rebin only when updates have
unbalanced them; settings assigned between draws apply at the next draw."""

from __future__ import annotations

import itertools
import random

import pytest

from honed.sampling.curriculum import CurriculumScheduler


def _check_quantiles(cur, keys):
    """Every bin holds floor(N/K) or ceil(N/K) items, and bin b scores >= bin b + 1."""
    bins = {}
    for key in keys:
        if cur.get_item_difficulty(key) is not None:
            bins.setdefault(cur.get_item_bin(key), []).append(cur.get_item_difficulty(key))
    n, k = cur.n_items_tracked, cur.n_bins
    sizes = [len(bins.get(b, [])) for b in range(k)]
    assert set(sizes) <= {n // k, -(-n // k)}, sizes
    filled = [bins[b] for b in range(k) if b in bins]
    for upper, lower in itertools.pairwise(filled):
        assert min(upper) >= max(lower)


def _counting_rebins(cur):
    calls = []
    rebin = cur.rebin

    def counted():
        calls.append(1)
        rebin()

    cur.rebin = counted
    return calls


@pytest.mark.parametrize("strategy", ["uniform", "frontier"])
@pytest.mark.parametrize("k", [3, 5])
def test_bins_are_balanced_whenever_read(strategy, k):
    rng = random.Random(k)
    keys = [f"k{i}" for i in range(300)]
    cur = CurriculumScheduler(strategy, n_bins=k, seed=k)
    cur.register_items(keys)
    for _ in range(40):
        for _ in range(rng.randrange(1, 60)):
            cur.update(rng.choice(keys), rng.random())
        read = rng.choice(["bin", "metrics", "sample"])
        if read == "bin":
            cur.get_item_bin(rng.choice(keys))
        elif read == "metrics":
            cur.metrics_dict()
        else:
            cur.sample_item(1, 10)
        _check_quantiles(cur, keys)


def test_a_thousand_distinct_scores_fill_five_bins_exactly():
    rng = random.Random(0)
    cur = CurriculumScheduler(seed=0)
    scores = rng.sample(range(1_000_000), 1000)
    for i, s in enumerate(scores):
        cur.update(f"k{i}", s / 1_000_000)
    for _ in range(5000):  # more scores for random items, distinct values throughout
        cur.update(f"k{rng.randrange(1000)}", rng.random())
    metrics = cur.metrics_dict()
    assert [metrics[f"curriculum/bin_{b}_count"] for b in range(5)] == [200.0] * 5


def test_draws_use_balanced_bins():
    # the top 20 of 100 items, then 40 of the hardest overtake them: a draw from bin 0 only
    # (platanios competence, nothing mastered, first step) must see exactly the new top 20
    cur = CurriculumScheduler(
        "competence_based",
        ema_alpha=1.0,
        competence="platanios",
        competence_threshold=10_000.0,
        seed=0,
    )
    for i in range(100):
        cur.update(f"k{i}", float(i))
    cur.metrics_dict()
    for i in range(40):
        cur.update(f"k{i}", 1000.0 + i)
    drawn = {cur.get_item_difficulty(cur.sample_item(0, 100)) for _ in range(400)}
    assert drawn == {1000.0 + i for i in range(20, 40)}


def test_updates_never_rebin_and_a_read_rebins_at_most_once():
    rng = random.Random(1)
    keys = [f"k{i}" for i in range(20_000)]
    cur = CurriculumScheduler("frontier", seed=0)
    calls = _counting_rebins(cur)
    for key in keys:
        cur.update(key, rng.random())
    for _ in range(50_000):
        cur.update(rng.choice(keys), rng.random())
    assert calls == []
    cur.get_item_bin(keys[0])
    assert len(calls) == 1
    cur.metrics_dict()
    cur.sample_item(3, 10)
    cur.bin_probabilities(3, 10)
    cur.get_item_bin(keys[1])
    assert len(calls) == 1  # no update since: nothing to settle
    cur.update(keys[2], cur.get_item_difficulty(keys[2]))  # moves no item across a cut
    cur.metrics_dict()
    assert len(calls) == 1  # the sizes are checked, nothing is rebuilt


@pytest.mark.parametrize(
    ("strategy", "competence"),
    [
        ("uniform", "gaussian"),
        ("easy_first", "gaussian"),
        ("competence_based", "gaussian"),
        ("competence_based", "platanios"),
    ],
)
def test_drawing_a_bin_between_updates_needs_no_rebin(strategy, competence):
    # Atropos's way: update an item, draw the next bin, and so on; these strategies' bin
    # distributions do not read the bins, so alternating costs no O(N) work
    rng = random.Random(2)
    cur = CurriculumScheduler(strategy, competence=competence, seed=0)
    calls = _counting_rebins(cur)
    for i in range(2000):
        cur.update(f"k{rng.randrange(500)}", rng.random())
        cur.sample_bin(i, 2000)
    assert calls == []


def test_all_equal_scores_spread_evenly_over_the_bins():
    cur = CurriculumScheduler(seed=0)
    keys = [f"k{i}" for i in range(1000)]
    for key in keys:
        cur.update(key, 0.5)
    for key in keys:
        cur.update(key, 0.5)
    metrics = cur.metrics_dict()
    assert [metrics[f"curriculum/bin_{b}_count"] for b in range(5)] == [200.0] * 5
    assert {cur.get_item_bin(key) for key in keys} == {0, 1, 2, 3, 4}


def test_a_changed_threshold_applies_at_the_next_draw():
    cur = CurriculumScheduler(
        "competence_based", competence="platanios", competence_threshold=2.0, seed=0
    )
    for i in range(100):
        cur.update(f"k{i}", i / 100)
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(100)} == {0}
    cur.competence_threshold = 0.0  # every item mastered: competence 1
    assert cur.bin_probabilities(0, 100) == [0.2] * 5
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(300)} == {0, 1, 2, 3, 4}
    cur.competence_threshold = 2.0
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(100)} == {0}


def test_changed_strategy_and_temperature_apply_at_the_next_draw():
    cur = CurriculumScheduler(
        "competence_based", temperature=0.01, competence_threshold=2.0, seed=0
    )
    for i in range(100):
        cur.update(f"k{i}", i / 100)
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(200)} == {0}
    cur.temperature = 100.0
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(300)} == {0, 1, 2, 3, 4}
    cur.strategy = "competence_based"  # unchanged: nothing to do
    cur.competence = "platanios"
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(200)} == {0}


def test_a_changed_bin_count_rebuilds_the_bins():
    cur = CurriculumScheduler(seed=0)
    keys = [f"k{i}" for i in range(100)]
    for i, key in enumerate(keys):
        cur.update(key, i / 100)
    cur.register_items(["unseen"])
    cur.metrics_dict()  # settled with five bins
    cur.n_bins = 3
    metrics = cur.metrics_dict()
    assert sorted(metrics[f"curriculum/bin_{b}_count"] for b in range(3)) == [33, 33, 34]
    assert "curriculum/bin_3_count" not in metrics
    _check_quantiles(cur, keys)
    assert cur.get_item_bin("unseen") == 1
    assert cur.sample_bin(0, 10) in range(3)


def test_assigning_the_current_settings_changes_nothing():
    # a resumed run re-applies its config this way: the restored running sums (the per-bin
    # learnability of `frontier`, a few roundings away from a recount) must survive
    rng = random.Random(4)
    cur = CurriculumScheduler("frontier", seed=0)
    for i in range(200):
        cur.update(f"k{i}", rng.random())
    cur.metrics_dict()
    for _ in range(1000):
        cur.update(f"k{rng.randrange(200)}", rng.random())
    state = cur.state_dict()
    for name, value in cur.settings().items():
        setattr(cur, name, value)
    assert cur.state_dict() == state
