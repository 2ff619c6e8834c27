"""The sampler joins the mixture and the per-environment curricula, and feeds them back."""

from __future__ import annotations

import pytest
from tiny_run import DigitShareEnv

from honed.config import CurriculumConfig, EnvConfig
from honed.errors import HonedError
from honed.sampling.sampler import Sampler
from honed.types import Group, Trajectory


def _sampler(strategy: str = "uniform", seed: int = 0, **shares) -> Sampler:
    envs = {"a": DigitShareEnv("a"), "b": DigitShareEnv("b")}
    configs = [
        EnvConfig(name="a", weight=3.0),
        EnvConfig(name="b", weight=1.0, min_share=shares.get("b", 0.0)),
    ]
    return Sampler.from_config(envs, configs, CurriculumConfig(strategy=strategy), seed)


def _group(env: str, key: str, successes: list[float]) -> Group:
    return Group(env, key, [Trajectory([], reward=s, success=s) for s in successes])


def test_batches_follow_the_weights_and_the_minimum_share():
    sampler = _sampler(b=0.5)
    counts = {"a": 0, "b": 0}
    for step in range(50):
        items = sampler.next_items(8, step, 50)
        assert len(items) == 8
        for item in items:
            counts[item.env] += 1
        assert sum(item.env == "b" for item in items) >= 4  # min_share 0.5 of every batch
    assert counts["b"] >= 200


def test_observe_updates_each_environments_curriculum_with_success_rates():
    sampler = _sampler()
    sampler.observe([_group("a", "a:train0", [1.0, 0.0, 1.0, 1.0]), _group("b", "b:train3", [0.0])])
    assert sampler.curricula["a"].get_item_difficulty("a:train0") == 0.75
    assert sampler.curricula["b"].get_item_difficulty("b:train3") == 0.0
    metrics = sampler.metrics()
    assert metrics["curriculum/a/total_updates"] == 1.0
    assert "curriculum/b/bin_0_count" in metrics


def test_frontier_draws_learnable_items_more_often():
    sampler = _sampler("frontier")
    keys = [item.key for item in DigitShareEnv("a").items("train")]
    solved, learnable = keys[:10], keys[10:20]
    for _ in range(3):
        sampler.observe([_group("a", k, [1.0] * 4) for k in solved])
        sampler.observe([_group("a", k, [1.0, 0.0] * 2) for k in learnable])
    drawn = [i.key for i in sampler.next_items(400, 10, 100) if i.env == "a"]
    assert sum(k in learnable for k in drawn) > 5 * sum(k in solved for k in drawn)


def test_state_round_trip_gives_the_same_future_draws():
    a = _sampler("frontier", seed=3)
    a.observe([_group("a", "a:train1", [1.0, 0.0])])
    state = a.state_dict()
    first = [i.key for i in a.next_items(16, 1, 10)]
    b = _sampler("frontier", seed=3)
    b.load_state_dict(state)
    assert [i.key for i in b.next_items(16, 1, 10)] == first


def test_a_bad_mixture_is_a_clear_error_naming_the_environment():
    bad = EnvConfig.model_construct(name="a", type=None, weight=-1.0, min_share=0.0, args={})
    with pytest.raises(HonedError, match=r"environment 'a' has weight -1\.0"):
        Sampler.from_config({"a": DigitShareEnv("a")}, [bad], CurriculumConfig(), 0)


# ---------------------------------------------------------------- resume: the config's settings


def _configured(**settings) -> Sampler:
    envs = {"a": DigitShareEnv("a"), "b": DigitShareEnv("b")}
    configs = [EnvConfig(name="a", weight=3.0), EnvConfig(name="b", weight=1.0)]
    return Sampler.from_config(envs, configs, CurriculumConfig(**settings), 3)


def _observed(sampler: Sampler) -> Sampler:
    for i in range(20):
        sampler.observe([_group("a", f"a:train{i}", [float(i % 3 == 0), 1.0, 0.0, i / 20])])
    return sampler


def test_resume_keeps_the_checkpoints_scores_and_the_configs_settings():
    before = _observed(_configured(strategy="easy_first", n_bins=5))
    state = before.state_dict()
    assert state["curricula"]["a"]["n_bins"] == 5
    after = _configured(strategy="easy_first", n_bins=3, temperature=0.5)
    changes = after.load_state_dict(state)
    assert changes == ["curriculum.n_bins: 5 -> 3", "curriculum.temperature: 1.0 -> 0.5"]
    for name in ("a", "b"):
        cur, old = after.curricula[name], before.curricula[name]
        assert (cur.n_bins, cur.temperature) == (3, 0.5)
        metrics = cur.metrics_dict()
        assert "curriculum/bin_3_count" not in metrics
        assert metrics["curriculum/total_updates"] == old.metrics_dict()["curriculum/total_updates"]
        for key in after.items[name]:
            assert cur.get_item_difficulty(key) == old.get_item_difficulty(key)
    counts = after.curricula["a"].metrics_dict()
    assert sorted(counts[f"curriculum/bin_{b}_count"] for b in range(3)) == [6, 7, 7]
    assert {after.curricula["a"].get_item_bin(f"a:train{i}") for i in range(20)} == {0, 1, 2}


def test_resume_reports_every_changed_setting_in_the_configs_order():
    state = _observed(_configured(strategy="frontier")).state_dict()
    after = _configured(
        strategy="competence_based",
        competence="gaussian",
        ema_alpha=0.5,
        competence_threshold=0.8,
        unseen_share=0.1,
        score="reward",
        reward_range=(0.0, 2.0),
    )
    assert after.load_state_dict(state) == [
        "curriculum.strategy: frontier -> competence_based",
        "curriculum.competence: platanios -> gaussian",
        "curriculum.ema_alpha: 0.3 -> 0.5",
        "curriculum.competence_threshold: 0.5 -> 0.8",
        "curriculum.unseen_share: null -> 0.1",
        "curriculum.score: success -> reward",
        "curriculum.reward_range: null -> [0.0, 2.0]",
    ]
    cur = after.curricula["a"]
    assert (cur.strategy, cur.competence, cur.ema_alpha) == ("competence_based", "gaussian", 0.5)


def test_resume_with_the_same_config_reports_nothing_and_draws_the_same():
    a = _observed(_configured(strategy="frontier", temperature=0.7))
    state = a.state_dict()
    b = _configured(strategy="frontier", temperature=0.7)
    assert b.load_state_dict(state) == []
    for step in range(5):
        assert [i.key for i in b.next_items(16, step, 10)] == [
            i.key for i in a.next_items(16, step, 10)
        ]
    assert b.state_dict() == a.state_dict()


def test_resume_uses_the_configs_mixture_weights():
    state = _configured().state_dict()
    envs = {"a": DigitShareEnv("a"), "b": DigitShareEnv("b")}
    configs = [EnvConfig(name="a", weight=1.0), EnvConfig(name="b", weight=3.0)]
    after = Sampler.from_config(envs, configs, CurriculumConfig(), 3)
    assert after.load_state_dict(state) == []
    drawn = [item.env for item in after.next_items(4000, 0, 10)]
    assert drawn.count("b") / len(drawn) == pytest.approx(0.75, abs=0.02)


def test_resume_from_an_atropos_checkpoint_keeps_the_datasets_other_items():
    atropos = {
        "strategy": "competence_based",
        "n_bins": 5,
        "temperature": 1.0,
        "ema_alpha": 0.3,
        "competence_threshold": 0.5,
        "item_scores": {f"a:train{i}": [i / 10, 2] for i in range(10)},
        "bin_boundaries": [0.9, 0.7, 0.5, 0.3, 0.1],
        "last_rebin_count": 0,
    }
    state = _configured(strategy="competence_based").state_dict()
    state["curricula"]["a"] = atropos
    after = _configured(strategy="competence_based")
    # Atropos's competence_based is the gaussian one; the config's default is platanios
    assert after.load_state_dict(state) == ["curriculum.competence: gaussian -> platanios"]
    cur = after.curricula["a"]
    assert cur.n_items_tracked == 10 and cur.get_item_difficulty("a:train9") == 0.9
    assert {item.key for item in after.next_items(400, 0, 10) if item.env == "a"} >= {
        "a:train15"  # never scored: drawn as an unseen item
    }
    state["curricula"]["a"]["item_scores"]["a:elsewhere"] = [0.5, 1]
    with pytest.raises(HonedError, match=r"environment 'a' holds 1 items .*'a:elsewhere'"):
        _configured().load_state_dict(state)


def test_rewards_are_mapped_through_the_declared_range():
    sampler = _configured(score="reward", reward_range=(-1.0, 3.0))
    sampler.observe([_group("a", "a:train0", [1.0, 3.0])])
    assert sampler.curricula["a"].get_item_difficulty("a:train0") == 0.75
    with pytest.raises(HonedError, match=r"'a:train1' the reward 3\.5, outside curriculum"):
        sampler.observe([_group("a", "a:train1", [0.0, 3.5])])
