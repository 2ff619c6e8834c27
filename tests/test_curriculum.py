import json
import math
import random
from collections import Counter

import pytest

from honed.sampling import CurriculumScheduler
from honed.sampling.curriculum import FRONTIER_FLOOR, INITIAL_COMPETENCE, STRATEGIES


def _scored(strategy="uniform", scores=(), **kwargs):
    """A scheduler whose item `k{i}` has been scored `scores[i]` once."""
    kwargs.setdefault("seed", 0)
    cur = CurriculumScheduler(strategy, **kwargs)
    for i, s in enumerate(scores):
        cur.update(f"k{i}", s)
    return cur


def _counts(cur):
    metrics = cur.metrics_dict()
    return [metrics[f"curriculum/bin_{b}_count"] for b in range(cur.n_bins)]


# ---------------------------------------------------------------- arguments


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(
        ValueError, match=r"'hard_first'.*uniform, easy_first, competence_based, frontier"
    ):
        CurriculumScheduler("hard_first")
    with pytest.raises(ValueError, match=r"'linear'.*gaussian, platanios"):
        CurriculumScheduler("competence_based", competence="linear")


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, True])
def test_n_bins_below_one_is_refused(n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        CurriculumScheduler(n_bins=n_bins)


def test_temperature_floor_and_alpha_clamp():
    assert CurriculumScheduler(temperature=0.0).temperature == 0.01
    assert CurriculumScheduler(temperature=-2.0).temperature == 0.01
    assert CurriculumScheduler(temperature=3.0).temperature == 3.0
    low, high = CurriculumScheduler(ema_alpha=-0.5), CurriculumScheduler(ema_alpha=7.0)
    assert (low.ema_alpha, high.ema_alpha) == (0.0, 1.0)
    for cur in (low, high):
        cur.update("a", 0.2)
        cur.update("a", 0.8)
    assert low.get_item_difficulty("a") == 0.2  # alpha 0: the first score stays
    assert high.get_item_difficulty("a") == 0.8  # alpha 1: the last score wins
    with pytest.raises(ValueError, match="temperature"):
        CurriculumScheduler(temperature=math.nan)
    with pytest.raises(ValueError, match="unseen_share"):
        CurriculumScheduler(unseen_share=1.5)


def test_assigned_settings_are_checked_like_the_constructors():
    cur = CurriculumScheduler()
    cur.temperature = 0.0
    cur.ema_alpha = 3.0
    assert (cur.temperature, cur.ema_alpha) == (0.01, 1.0)
    for name, value in [("n_bins", 0), ("strategy", "hard_first"), ("unseen_share", -0.1)]:
        with pytest.raises(ValueError, match=name if name != "strategy" else "hard_first"):
            setattr(cur, name, value)
    with pytest.raises(ValueError, match="competence_threshold"):
        cur.competence_threshold = math.inf


# ---------------------------------------------------------------- tracking


def test_ema_and_batch_mean():
    cur = CurriculumScheduler(ema_alpha=0.3)
    assert cur.get_item_difficulty("a") is None
    cur.update("a", 1.0)
    assert cur.get_item_difficulty("a") == 1.0  # the first score is taken as is
    cur.update("a", 0.0)
    assert cur.get_item_difficulty("a") == 0.3 * 0.0 + (1 - 0.3) * 1.0
    cur.update_batch("a", [0.0, 1.0, 1.0, 0.0])  # the group mean, 0.5
    assert cur.get_item_difficulty("a") == 0.3 * 0.5 + (1 - 0.3) * 0.7
    cur.update_batch("a", [])
    assert cur.metrics_dict()["curriculum/total_updates"] == 3.0
    with pytest.raises(ValueError, match=r"'a'.*not finite"):
        cur.update("a", math.inf)


def test_unseen_items_report_the_middle_bin():
    cur = CurriculumScheduler(n_bins=5)
    assert cur.register_items(["x", "y", "x"]) == 2
    assert cur.get_item_bin("x") == 2 and cur.get_item_bin("never-heard-of") == 2
    assert CurriculumScheduler(n_bins=4).get_item_bin("x") == 2
    assert cur.n_items_tracked == 0
    assert cur.item_keys() == ["x", "y"]


@pytest.mark.parametrize(("n", "k"), [(1000, 5), (103, 7), (12, 5), (3, 5), (50, 1)])
def test_bins_are_balanced_quantiles(n, k):
    scores = random.Random(n).sample(range(10 * n), n)  # distinct, shuffled
    cur = _scored(scores=[s / (10 * n) for s in scores], n_bins=k)
    counts = _counts(cur)
    assert set(counts) <= {n // k, -(-n // k)} and sum(counts) == n
    # bin 0 holds the easiest (highest) scores, the last bin the hardest
    easiest_first = sorted(range(n), key=lambda i: -scores[i])
    bins = [cur.get_item_bin(f"k{i}") for i in easiest_first]
    assert bins == sorted(bins)


def test_ties_are_split_between_bins():
    cur = _scored(scores=[1.0] * 60 + [0.0] * 40)
    assert _counts(cur) == [20, 20, 20, 20, 20]
    assert {cur.get_item_bin(f"k{i}") for i in range(60)} == {0, 1, 2}
    assert {cur.get_item_bin(f"k{i}") for i in range(60, 100)} == {3, 4}


def test_items_stay_ordered_between_queries():
    rng = random.Random(0)
    cur = _scored(scores=[rng.random() for _ in range(500)])
    for _ in range(3000):
        cur.update(f"k{rng.randrange(500)}", rng.random())
    by_bin = {}
    for i in range(500):
        by_bin.setdefault(cur.get_item_bin(f"k{i}"), []).append(cur.get_item_difficulty(f"k{i}"))
    assert sorted(by_bin) == [0, 1, 2, 3, 4]
    for b in range(4):
        assert min(by_bin[b]) >= max(by_bin[b + 1])


def test_metrics_dict():
    cur = _scored(scores=[0.2, 0.4, 0.9], n_bins=3)
    cur.register_items(["unseen"])
    assert cur.metrics_dict() == {
        "curriculum/items_tracked": 3.0,
        "curriculum/mean_difficulty": pytest.approx(0.5),
        "curriculum/min_difficulty": 0.2,
        "curriculum/max_difficulty": 0.9,
        "curriculum/total_updates": 3.0,
        "curriculum/bin_0_count": 1.0,
        "curriculum/bin_1_count": 1.0,
        "curriculum/bin_2_count": 1.0,
    }
    # empty: Atropos's two keys, and every bin's count for those who read them from the start
    assert CurriculumScheduler(n_bins=2).metrics_dict() == {
        "curriculum/items_tracked": 0,
        "curriculum/strategy": 0,
        "curriculum/mean_difficulty": 0.0,
        "curriculum/min_difficulty": 0.0,
        "curriculum/max_difficulty": 0.0,
        "curriculum/total_updates": 0.0,
        "curriculum/bin_0_count": 0.0,
        "curriculum/bin_1_count": 0.0,
    }


# ---------------------------------------------------------------- strategies


def _empirical(cur, draws, step=0, total=100):
    counts = Counter(cur.sample_bin(step, total) for _ in range(draws))
    return [counts[b] / draws for b in range(cur.n_bins)]


def test_uniform_covers_every_bin_evenly():
    cur = CurriculumScheduler("uniform", seed=1)
    assert cur.bin_probabilities(0, 100) == [0.2] * 5
    assert _empirical(cur, 5000) == pytest.approx([0.2] * 5, abs=0.03)
    assert CurriculumScheduler(n_bins=1).sample_bin() == 0


def test_easy_first_favours_easy_bins_early_and_is_uniform_at_the_end():
    cur = CurriculumScheduler("easy_first", seed=2)
    early = cur.bin_probabilities(0, 100)
    weights = [math.exp(-2 * b / 4) for b in range(5)]
    assert early == pytest.approx([w / sum(weights) for w in weights])
    assert cur.bin_probabilities(100, 100) == pytest.approx([0.2] * 5)
    middle = cur.bin_probabilities(50, 100)
    assert early[0] > middle[0] > 0.2 > middle[4] > early[4]
    assert _empirical(cur, 5000, step=0) == pytest.approx(early, abs=0.03)


@pytest.mark.parametrize("progress", [0.1, 0.3, 0.5, 0.8])
def test_easy_first_anneals_the_raw_weights_into_the_uniform_share(progress):
    # (1 - t) * exp(-2i / (K - 1)) + t / K, normalised once at the end: the raw exponentials,
    # not the normalised ones, are mixed with 1/K (which puts more weight on the easy bins).
    k = 5
    raw = [(1 - progress) * math.exp(-2 * b / (k - 1)) + progress / k for b in range(k)]
    expected = [w / sum(raw) for w in raw]
    got = CurriculumScheduler("easy_first").bin_probabilities(round(progress * 1000), 1000)
    assert got == pytest.approx(expected, rel=1e-12)


def test_temperature_sharpens_and_flattens():
    plain = CurriculumScheduler("easy_first").bin_probabilities()
    sharp = CurriculumScheduler("easy_first", temperature=0.5).bin_probabilities()
    flat = CurriculumScheduler("easy_first", temperature=4.0).bin_probabilities()
    assert sharp[0] > plain[0] > flat[0] > 0.2
    assert sharp == pytest.approx([p**2 / sum(q**2 for q in plain) for p in plain])
    assert flat == pytest.approx([p**0.25 / sum(q**0.25 for q in plain) for p in plain])


@pytest.mark.parametrize(("step", "centre"), [(0, 0.0), (250, 1.0), (500, 2.0), (900, 3.6)])
def test_competence_based_is_a_gaussian_around_the_moving_frontier_by_default(step, centre):
    cur = _scored("competence_based", scores=[0.9] * 50 + [0.1] * 50)  # the scores do not matter
    assert cur.competence == "gaussian"
    weights = [math.exp(-0.5 * (b - centre) ** 2) for b in range(5)]
    expected = [w / sum(weights) for w in weights]
    assert cur.bin_probabilities(step, 1000) == pytest.approx(expected, rel=1e-12)


def test_platanios_competence_follows_the_sqrt_schedule():
    scores = [0.01 * i for i in range(40)]  # none mastered
    cur = _scored("competence_based", scores=scores, competence="platanios")
    assert cur.bin_probabilities(0, 100) == [1.0, 0.0, 0.0, 0.0, 0.0]
    c = math.sqrt(0.5 * (1 - INITIAL_COMPETENCE**2) + INITIAL_COMPETENCE**2)  # ≈ 0.707
    partial = c * 5 - 3
    assert cur.bin_probabilities(50, 100) == pytest.approx(
        [x / (3 + partial) for x in (1, 1, 1, partial, 0)]
    )
    assert cur.bin_probabilities(100, 100) == pytest.approx([0.2] * 5)
    # item selection: early on, every drawn item comes from the easiest bin
    assert {cur.get_item_bin(cur.sample_item(0, 100)) for _ in range(200)} == {0}
    # a bin the competence excludes stays excluded at any temperature
    cur.temperature = 4.0
    assert cur.bin_probabilities(0, 100) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_platanios_competence_follows_measured_success():
    # 40 of 100 items reach the threshold: competence 0.4 + one bin = 0.6 from the first step
    scores = [0.9] * 40 + [0.1] * 60
    cur = _scored("competence_based", scores=scores, competence="platanios")
    assert cur.bin_probabilities(0, 100) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0, 0])
    for i in range(40, 100):  # the policy masters everything
        cur.update(f"k{i}", 1.0)
        cur.update(f"k{i}", 1.0)
    assert cur.bin_probabilities(0, 100) == pytest.approx([0.2] * 5)


def test_frontier_favours_items_of_middling_success():
    scores = [0.0] * 50 + [1.0] * 50 + [0.5] * 50
    cur = _scored("frontier", scores=scores, seed=3)
    drawn = Counter(cur.get_item_difficulty(cur.sample_item()) for _ in range(4000))
    expected = 50 * 0.25 / (50 * 0.25 + 100 * FRONTIER_FLOOR)  # p(1 - p) against the floor
    assert drawn[0.5] / 4000 == pytest.approx(expected, abs=0.02)
    assert drawn[0.0] > 0 and drawn[1.0] > 0  # rarely, not never
    probs = cur.bin_probabilities()
    best = max(range(5), key=probs.__getitem__)
    assert {
        cur.get_item_difficulty(f"k{i}") for i in range(150) if cur.get_item_bin(f"k{i}") == best
    } == {0.5}


def test_frontier_weights_items_inside_a_bin():
    # one bin only: the draw inside it must still follow p(1 - p)
    scores = [0.5] * 10 + [0.1] * 10
    cur = _scored("frontier", scores=scores, n_bins=1, seed=4)
    drawn = Counter(cur.get_item_difficulty(cur.sample_item()) for _ in range(4000))
    assert drawn[0.5] / 4000 == pytest.approx(0.25 / (0.25 + 0.09), abs=0.025)


# ---------------------------------------------------------------- item selection


def test_sample_item_needs_items():
    with pytest.raises(ValueError, match="register_items"):
        CurriculumScheduler().sample_item()
    cur = CurriculumScheduler(seed=0)
    cur.register_items(["a", "b"])
    assert {cur.sample_item() for _ in range(50)} == {"a", "b"}


@pytest.mark.parametrize(
    ("strategy", "share", "expected"),
    [
        ("uniform", 0.3, 0.3),
        ("easy_first", 0.0, 0.0),
        ("uniform", None, 100 / 150),  # as likely as any tracked item
        ("frontier", None, 100 * 0.25 / (100 * 0.25 + 50 * 0.25)),  # unseen count as p = 0.5
    ],
)
def test_unseen_share_is_honoured(strategy, share, expected):
    cur = _scored(strategy, scores=[0.5] * 50, unseen_share=share, seed=5)
    cur.register_items(f"new{i}" for i in range(100))
    draws = 4000
    unseen = sum(cur.sample_item(3, 10).startswith("new") for _ in range(draws))
    assert unseen / draws == pytest.approx(expected, abs=0.025)


# ---------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    ("strategy", "competence"),
    [(s, "gaussian") for s in STRATEGIES] + [("competence_based", "platanios")],
)
def test_state_round_trip_gives_identical_future_draws(strategy, competence):
    def play(cur, rng, steps):
        out = []
        for step in range(steps):
            for _ in range(4):
                key = cur.sample_item(step, 50)
                out.append(key)
                cur.update_batch(key, [rng.random() < 0.4 for _ in range(4)])
            out.append(cur.sample_bin(step, 50))
            out.append(cur.get_item_bin(key))
        return out

    cur = CurriculumScheduler(strategy, seed=11, temperature=0.7, competence=competence)
    cur.register_items(f"k{i}" for i in range(60))
    play(cur, random.Random(0), 10)
    cur.update("k0", 0.3)  # saved with updates not yet settled into the bins
    state = json.loads(json.dumps(cur.state_dict()))  # plain data, JSON-safe

    resumed = CurriculumScheduler(seed=999)  # every setting comes from the checkpoint
    resumed.load_state_dict(state)
    assert resumed.settings() == cur.settings()
    assert resumed.state_dict() == state
    assert play(resumed, random.Random(1), 20) == play(cur, random.Random(1), 20)
    assert resumed.state_dict() == cur.state_dict()
    assert resumed.metrics_dict() == cur.metrics_dict()


def test_loading_restores_the_checkpoints_settings_and_bin_count():
    state = _scored(
        "easy_first", scores=[i / 10 for i in range(10)], temperature=2.0, ema_alpha=0.1
    ).state_dict()
    cur = CurriculumScheduler("frontier", n_bins=3, competence_threshold=0.9)
    cur.load_state_dict(state)
    assert cur.settings() == {
        "strategy": "easy_first",
        "competence": "gaussian",
        "n_bins": 5,
        "temperature": 2.0,
        "ema_alpha": 0.1,
        "competence_threshold": 0.5,
        "unseen_share": None,
    }
    assert _counts(cur) == [2, 2, 2, 2, 2]
    cur.update("k9", 0.0)
    assert cur.get_item_difficulty("k9") == 0.1 * 0.0 + (1 - 0.1) * 0.9


def test_a_scheduler_drawing_from_random_saves_no_generator_and_keeps_its_own_on_load():
    module = _scored(scores=[0.5, 0.6], seed=None)
    assert module.state_dict()["rng"] is None
    seeded = _scored(scores=[0.5, 0.6], seed=7)
    seeded.load_state_dict(module.state_dict())
    fresh = _scored(seed=7)
    random.seed(1)
    draws = [seeded.sample_bin() for _ in range(20)]
    random.seed(1)
    assert draws == [fresh.sample_bin() for _ in range(20)]


def test_a_checkpoint_from_before_settings_were_saved_still_loads():
    # honed's format of the first release: strategy and n_bins only; its `competence_based`
    # was the Platanios competence
    state = {
        "strategy": "competence_based",
        "n_bins": 2,
        "keys": ["a", "b", "c"],
        "ema": [0.9, 0.1, None],
        "members": [[0], [1]],
        "unseen": [2],
        "cuts": [0.9],
        "bin_weight": [0.0, 0.0],
        "total_updates": 4,
        "next_rebin": 6,
        "rng": [3, list(random.Random(0).getstate()[1]), None],
    }
    cur = CurriculumScheduler(temperature=0.5)
    cur.load_state_dict(state)
    assert (cur.strategy, cur.competence, cur.n_bins, cur.temperature) == (
        "competence_based",
        "platanios",
        2,
        0.5,
    )
    assert [cur.get_item_bin(k) for k in "abc"] == [0, 1, 1]
    assert cur.metrics_dict()["curriculum/total_updates"] == 4.0
