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
