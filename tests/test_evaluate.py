"""Held-out evaluation with several completions an item (`eval.samples`): `pass@j` is the
expected best of j completions, the means are over all of them, and the trainer logs both."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
from tiny_run import DigitShareEnv, small_config

from honed.errors import HonedError
from honed.models.policy import PolicySampler, SamplingParams
from honed.rl.evaluate import evaluate, pass_at, pass_sizes
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir
from honed.types import Item, Score


class DigitShare(DigitShareEnv):
    """Success is the share of digits in the completion: an untrained policy's completions of
    one item differ in it, so pass@j rises with j."""

    def score(self, item: Item, completion: str) -> Score:
        share = sum(c.isdigit() for c in completion) / max(1, len(completion))
        return Score(reward=share, success=share)


def test_pass_at_is_the_expected_best_of_every_subset_of_j():
    """Against the definition, every j-subset enumerated, for partial successes; for 0/1 ones
    the closed form of Chen et al. (2021); pass@1 is the mean and pass@n the best."""
    rng = random.Random(0)
    for n in range(1, 8):
        values = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
        for j in range(1, n + 1):
            subsets = list(itertools.combinations(values, j))
            expected = sum(max(s) for s in subsets) / len(subsets)
            assert pass_at(values, j) == pytest.approx(expected, rel=1e-12)
        assert pass_at(values, 1) == pytest.approx(sum(values) / n, rel=1e-12)
        assert pass_at(values, n) == max(values)
        right = [float(v == 1.0) for v in values]
        c = int(sum(right))
        for j in range(1, n + 1):
            closed = 1 - math.comb(n - c, j) / math.comb(n, j)
            assert pass_at(right, j) == pytest.approx(closed, rel=1e-12)
    with pytest.raises(ValueError, match="pass@3"):
        pass_at([1.0, 0.0], 3)
    assert pass_sizes(1) == [1]
    assert pass_sizes(6) == [1, 2, 4, 6]
    assert pass_sizes(8) == [1, 2, 4, 8]


def test_evaluate_with_k_samples_reports_the_means_and_pass_at_j_of_the_same_completions(
    small_policy,
):
    """The metrics of `evaluate(samples=4)` are those of the k completions an item the
    environment rolls out with the same seed (same batch, so the same completions exactly)."""
    policy = small_policy
    env = DigitShare("digits")
    params = SamplingParams(temperature=1.0, max_tokens=4)
    results = evaluate(
        policy, {"digits": env}, num_items=12, temperature=1.0, max_tokens=4, seed=7, samples=4
    )
    groups = env.rollout(env.items("test")[:12], PolicySampler(policy, params), 4, 7)
    successes = [[t.success for t in g.trajectories] for g in groups]
    assert all(len(s) == 4 for s in successes)
    everything = [x for s in successes for x in s]
    assert results["accuracy"] == pytest.approx(sum(everything) / len(everything), rel=1e-12)
    best = sum(max(s) for s in successes) / len(successes)
    assert results["pass@4"] == results["digits/pass@4"] == pytest.approx(best, rel=1e-12)
    assert results["pass@1"] == pytest.approx(results["accuracy"], rel=1e-12)
    assert results["pass@1"] <= results["pass@2"] <= results["pass@4"]
    assert results["pass@4"] > results["pass@1"], "the test needs completions that differ"
    one = evaluate(policy, {"digits": env}, num_items=12, temperature=1.0, max_tokens=4, seed=7)
    assert not any(key.startswith("pass@") or "/pass@" in key for key in one)


def test_samples_above_one_need_a_temperature(tmp_path):
    with pytest.raises(HonedError, match=r"eval\.samples: 4 needs eval\.temperature > 0"):
        small_config(tmp_path, "eval.samples=4")


def test_the_trainer_logs_pass_at_j_at_every_evaluation(tmp_path):
    config = small_config(
        tmp_path,
        "eval.samples=2",
        "eval.temperature=1.0",
        "trainer.max_steps=2",
        "eval.every=1",
    )
    trainer = GRPOTrainer(config, RunDir(tmp_path / "run"))
    summary = trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evaluated = [r["step"] for r in rows if "eval/pass@2" in r]
    assert evaluated == [0, 1, 2]
    assert {"pass@1", "pass@2", "addition/pass@2"} <= set(summary["final_eval"])
