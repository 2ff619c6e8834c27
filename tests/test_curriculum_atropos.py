"""Code and checkpoints written for Atropos's `CurriculumScheduler` run against honed's unchanged
and get the same values (issue 15): names, probabilities, draws under `random.seed`, state."""

from __future__ import annotations

import json
import math
import random

import pytest

from honed.sampling.curriculum import CurriculumScheduler, CurriculumStrategy

# Written by Atropos's CurriculumScheduler.state_dict() (PR #428) after 60 group updates of 12
# items, saved as JSON as its users store it (the (ema, count) tuples became lists). Its
# bin_boundaries are those of its last rebin, 10 updates earlier.
ATROPOS_STATE_JSON = """{"strategy": "easy_first", "n_bins": 4, "temperature": 0.5,
"ema_alpha": 0.2, "competence_threshold": 0.7, "item_scores": {"q9": [0.8681088000000001, 8],
"q10": [0.7296000000000002, 5], "q6": [0.5044800000000002, 6], "q4": [0.40246400000000004, 7],
"q1": [0.35720000000000013, 5], "q0": [0.0, 4], "q2": [0.10509120000000002, 8],
"q5": [0.49000000000000005, 3], "q7": [0.7500000000000001, 4], "q8": [0.6080000000000001, 4],
"q11": [0.7836000000000001, 5], "q3": [0.0, 1]}, "bin_boundaries": [0.7836000000000001,
0.7424000000000002, 0.5056000000000002, 0.35720000000000013], "last_rebin_count": 50}"""


def atropos_probabilities(strategy, k, temperature, step, total):
    """Atropos's bin distribution, written out from its definition, in its order of operations."""
    progress = min(1.0, max(0.0, step / max(1, total)))
    if strategy == "easy_first":
        weights = [
            (1.0 - progress) * math.exp(-2.0 * i / max(1, k - 1)) + progress * (1.0 / k)
            for i in range(k)
        ]
    else:
        weights = [math.exp(-0.5 * abs(i - progress * (k - 1)) ** 2) for i in range(k)]
    probs = [w / sum(weights) for w in weights]
    if temperature != 1.0:
        logs = [math.log(max(p, 1e-10)) / temperature for p in probs]
        exps = [math.exp(x - max(logs)) for x in logs]
        probs = [e / sum(exps) for e in exps]
    return probs


def test_the_import_and_the_strategy_enum():
    assert [s.value for s in CurriculumStrategy] == [
        "uniform",
        "easy_first",
        "competence_based",
        "frontier",
    ]
    assert CurriculumStrategy.EASY_FIRST == "easy_first"
    cur = CurriculumScheduler(strategy=CurriculumStrategy.COMPETENCE_BASED)
    assert cur.strategy == "competence_based" and type(cur.strategy) is str
    for strategy in CurriculumStrategy:
        assert CurriculumStrategy(CurriculumScheduler(strategy.value).strategy) is strategy


def test_atropos_keyword_names():
    cur = CurriculumScheduler(
        strategy="easy_first", n_bins=3, temperature=1.0, ema_alpha=0.5, competence_threshold=0.5
    )
    cur.update(item_key="a", score=1.0)
    cur.update_batch(item_key="a", scores=[0.0, 0.0])
    assert cur.get_item_difficulty(item_key="a") == 0.5
    assert cur.get_item_bin(item_key="never") == 1
    assert cur.sample_bin(current_step=5, total_steps=10) in range(3)
    assert cur.n_items_tracked == 1
    # Atropos's docstring shows update(key, reward_score=...), which its signature refuses too
    with pytest.raises(TypeError):
        cur.update("a", reward_score=0.7)


def test_an_empty_schedulers_metrics_have_atropos_keys():
    metrics = CurriculumScheduler().metrics_dict()
    assert metrics["curriculum/items_tracked"] == 0 and metrics["curriculum/strategy"] == 0


@pytest.mark.parametrize("strategy", ["uniform", "easy_first", "competence_based"])
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_probabilities_and_draws_under_random_seed_are_atroposs(strategy, k, temperature):
    cur = CurriculumScheduler(strategy, n_bins=k, temperature=temperature)
    steps = [(0, 1000), (250, 1000), (999, 1000), (20, 10), (-5, 10), (3, 0), (0, 0)]
    if strategy != "uniform":
        for step, total in steps:
            expected = atropos_probabilities(strategy, k, temperature, step, total)
            assert cur.bin_probabilities(step, total) == expected
    random.seed(1234)
    if strategy == "uniform":
        expected_draws = [random.randint(0, k - 1) for _ in steps for _ in range(20)]
    else:
        expected_draws = [
            random.choices(range(k), weights=atropos_probabilities(strategy, k, temperature, *s))[0]
            for s in steps
            for _ in range(20)
        ]
    random.seed(1234)
    assert [cur.sample_bin(*s) for s in steps for _ in range(20)] == expected_draws


def test_random_seed_governs_every_draw_unless_a_seed_is_given():
    def draws(cur):
        return [cur.sample_item(3, 10) for _ in range(50)] + [cur.sample_bin(3, 10)]

    cur = CurriculumScheduler("easy_first")
    for i in range(40):
        cur.update(f"k{i}", i / 40)
    cur.register_items(f"new{i}" for i in range(10))
    random.seed(0)
    first = draws(cur)
    random.seed(0)
    assert draws(cur) == first
    assert draws(cur) != first  # the module's generator moved on

    own = CurriculumScheduler(seed=5)
    own.register_items(f"k{i}" for i in range(40))
    again = CurriculumScheduler(seed=5)
    again.register_items(f"k{i}" for i in range(40))
    random.seed(0)
    mine = [own.sample_item() for _ in range(50)]
    random.seed(99)
    assert [again.sample_item() for _ in range(50)] == mine


@pytest.mark.parametrize("strategy", ["easy_first", "competence_based"])
def test_an_atropos_checkpoint_restores_settings_and_scores(strategy):
    state = json.loads(ATROPOS_STATE_JSON)
    state["strategy"] = strategy
    cur = CurriculumScheduler(
        "frontier", n_bins=7, temperature=3.0, competence_threshold=0.1, competence="platanios"
    )
    cur.load_state_dict(state)
    assert cur.settings() == {
        "strategy": strategy,
        "competence": "gaussian",  # Atropos's competence_based
        "n_bins": 4,
        "temperature": 0.5,
        "ema_alpha": 0.2,
        "competence_threshold": 0.7,
        "unseen_share": None,
    }
    assert cur.n_items_tracked == 12
    for key, (ema, _) in state["item_scores"].items():
        assert cur.get_item_difficulty(key) == ema
    metrics = cur.metrics_dict()
    assert metrics["curriculum/total_updates"] == 60  # the items' counts
    # balanced quantile bins of the current scores, easiest first
    assert [metrics[f"curriculum/bin_{b}_count"] for b in range(4)] == [3, 3, 3, 3]
    by_score = sorted(state["item_scores"], key=lambda key: -state["item_scores"][key][0])
    assert [cur.get_item_bin(key) for key in by_score] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert cur.bin_probabilities(10, 100) == atropos_probabilities(strategy, 4, 0.5, 10, 100)
    cur.update("q3", 1.0)
    assert cur.get_item_difficulty("q3") == 0.2 * 1.0 + (1 - 0.2) * 0.0


def test_an_atropos_checkpoint_with_a_bad_score_is_refused():
    state = json.loads(ATROPOS_STATE_JSON)
    state["item_scores"]["q4"] = [math.nan, 2]
    with pytest.raises(ValueError, match="'q4'"):
        CurriculumScheduler().load_state_dict(state)


def test_scores_follow_atroposs_arithmetic():
    # alpha * score + (1 - alpha) * ema, and a group's plain mean: the same floats, bit for bit
    rng = random.Random(3)
    cur = CurriculumScheduler(ema_alpha=0.37)
    expected = {}
    for _ in range(2000):
        key = f"k{rng.randrange(50)}"
        group = [rng.random() * 3 - 1 for _ in range(rng.randrange(0, 6))]
        cur.update_batch(key, group)
        if group:
            mean = sum(group) / len(group)
            old = expected.get(key)
            expected[key] = mean if old is None else 0.37 * mean + (1 - 0.37) * old
    assert {key: cur.get_item_difficulty(key) for key in expected} == expected
