"""Why GRPO moves the memory writer: the diagnostic metrics, and the unit-scale check that GRPO
from a random-ish start reaches the known optimum of a two-chunk task (`memory_unit.py`)."""

import json
from statistics import mean, stdev

import pytest
import yaml
from memory_unit import BUDGET, REPLIES, UnitMemoryEnv
from test_memory_env import ScriptedGenerator

from honed.config import TrainerConfig, load_config
from honed.rl.advantages import STD_EPS
from honed.rl.prepare import labelled_advantages, prepare
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir
from honed.types import Group, Segment, Trajectory, derive_seed

SKIP, FACT, EVENT = REPLIES


def _segment(reward: float | None) -> Segment:
    return Segment([1, 2], [3, 4, 5], [-0.5] * 3, reward=reward)


def _trajectory(rewards: list[float], labels: list[dict[str, int]]) -> Trajectory:
    return Trajectory(
        [_segment(r) for r in rewards], mean(rewards), info={"segment_labels": labels}
    )


def test_write_advantages_are_split_by_whether_the_write_later_answers():
    """On a constructed batch: chunk rewards become advantages by the group's mean and std
    (every chunk segment of the item's rollouts one group), and each write gets its chunk's."""
    a = _trajectory([2.0, 1.0], [{"answering_writes": 2}, {"no_write": 1}])
    b = _trajectory([0.5, 1.5], [{"other_writes": 1}, {"answering_writes": 1, "other_writes": 1}])
    c = _trajectory([1.0], [{"other_writes": 3}])
    groups = [Group("memory", "x", [a, b]), Group("memory", "y", [c, c])]
    prepared = prepare(groups, TrainerConfig(filter_zero_std=False))
    metrics = labelled_advantages(groups, prepared.advantages)

    x = [2.0, 1.0, 0.5, 1.5]
    adv = [(r - mean(x)) / (stdev(x) + STD_EPS) for r in x]  # group y has no spread: 0
    assert metrics == pytest.approx(
        {
            "advantage/memory/answering_writes": (2 * adv[0] + adv[3]) / 3,
            "advantage/memory/other_writes": (adv[2] + adv[3] + 3 * 0 + 3 * 0) / 8,
            "advantage/memory/no_write": adv[1],
        }
    )
    # one reward per rollout (grouping: trajectory): every chunk gets its rollout's advantage
    for t in (a, b):
        for s in t.segments:
            s.reward = None
    prepared = prepare(groups[:1], TrainerConfig())
    ta, tb = mean([2.0, 1.0]), mean([0.5, 1.5])
    spread = stdev([ta, tb]) + STD_EPS
    aa, ab = (ta - (ta + tb) / 2) / spread, (tb - (ta + tb) / 2) / spread
    assert labelled_advantages(groups[:1], prepared.advantages) == pytest.approx(
        {
            "advantage/memory/answering_writes": (2 * aa + ab) / 3,
            "advantage/memory/other_writes": (ab + ab) / 2,
            "advantage/memory/no_write": aa,
        }
    )


def _unit_rollout(env: UnitMemoryEnv, plans: list[tuple[str, str]]):
    """One group on the first unit instance, rollout g replying plans[g] to its two chunks."""
    (item,) = env.items("train")[:1]
    seeds = {
        derive_seed(0, item.key, g, t): plan[t] for g, plan in enumerate(plans) for t in (0, 1)
    }
    generator = ScriptedGenerator(lambda prompt, seed: seeds[seed])
    (group,) = env.rollout([item], generator, len(plans), seed=0)
    return group


# rollouts of the unit task: best (skip, fact); distractor stored (then the fact fails); as event
PLANS = [(SKIP, FACT), (FACT, FACT), (EVENT, SKIP), (SKIP, SKIP)]


def test_memory_metrics_and_labels_of_a_scripted_step():
    env = UnitMemoryEnv()
    group = _unit_rollout(env, PLANS)
    best, distractor, event, silent = group.trajectories
    assert best.success == 1.0 and best.components["memory_tokens"] == BUDGET
    assert best.info["segment_labels"] == [{"no_write": 1}, {"answering_writes": 1}]
    assert distractor.info["segment_labels"] == [{"other_writes": 1}, {"no_write": 1}]
    assert event.info["segment_labels"] == [{"other_writes": 1}, {"no_write": 1}]
    assert silent.info["segment_labels"] == [{"no_write": 1}, {"no_write": 1}]

    metrics = env.step_metrics([group])
    # semantic calls: best's fact (ok), the distractor (ok), its fact (memory full): 2 of 3
    assert metrics["memory/memory/semantic/tool_success"] == pytest.approx(2 / 3)
    assert metrics["memory/memory/semantic/validity"] == 1.0
    assert metrics["memory/memory/semantic/writes"] == pytest.approx(2 / 4)
    assert metrics["memory/memory/semantic/tokens"] == pytest.approx(2 * BUDGET / 4)
    # the distractor as an event has no time: stored (r2) but invalid (r4)
    assert metrics["memory/memory/episodic/tool_success"] == 1.0
    assert metrics["memory/memory/episodic/validity"] == 0.0
    assert metrics["memory/memory/core/writes"] == 0.0
    assert "memory/memory/core/tool_success" not in metrics  # no core call: nothing to average
    assert metrics["memory/memory/chunk_spread"] == 1.0  # both chunk positions spread
    assert metrics["memory/memory/accuracy_spread"] == 1.0  # only `best` answers
    same = _unit_rollout(env, [(SKIP, FACT)] * 2)
    assert env.step_metrics([same])["memory/memory/chunk_spread"] == 0.0
    # the event and the silent rollout both answer nothing but differ on r2..r4
    answer_alike = _unit_rollout(env, [(EVENT, SKIP), (SKIP, SKIP)])
    assert env.step_metrics([answer_alike])["memory/memory/chunk_spread"] == 1.0
    assert env.step_metrics([answer_alike])["memory/memory/accuracy_spread"] == 0.0
    both = env.step_metrics([group, answer_alike])
    assert both["memory/memory/accuracy_spread"] == 0.5


@pytest.mark.parametrize("grouping", ["instance", "trajectory"])
def test_credit_for_skipping_the_distractor(grouping):
    """The first chunk's choice, credited by each grouping on the same rollouts: Mem-α's own
    per-chunk reward (`instance`) pays storing the distractor (r2 and r4 at once) more than
    skipping it, although that write makes the fact's write fail; one reward per rollout
    (`trajectory`) pays skipping more, the optimum's first move."""
    env = UnitMemoryEnv(grouping=grouping)
    group = _unit_rollout(env, PLANS)
    (advantages,) = prepare([group], TrainerConfig()).advantages
    first_chunk = advantages[0::2] if grouping == "instance" else advantages
    skip_then_fact, stored_distractor = first_chunk[0], first_chunk[1]
    if grouping == "instance":
        assert stored_distractor > skip_then_fact
    else:
        assert skip_then_fact > stored_distractor


def _unit_config(tmp_path, *overrides: str):
    data = {
        "seed": 0,
        "torch_threads": 1,
        "policy": {
            "model": "tiny",
            "tiny": {
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 256,
            },
        },
        "envs": [
            {
                "name": "memory",
                "type": "memory_unit:UnitMemoryEnv",
                "args": {"grouping": "trajectory"},
            }
        ],
        "sft": {"steps": 400, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 10},
        "trainer": {
            "max_steps": 30,
            "prompts_per_step": 4,
            "num_generations": 8,
            "learning_rate": 1e-3,
            "temperature": 1.0,
            "max_completion_length": 24,
            "loss_type": "dapo",
            "beta": 0.1,
            "log_reference_kl": True,
        },
        "eval": {"num_items": 8},
        "checkpoint": {"every": 1000},
        "logging": {"progress": False},
        "run_dir": str(tmp_path / "run"),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path, list(overrides))


def test_grpo_reaches_the_known_optimum_of_the_unit_task(tmp_path):
    """From a warm-start that picks among skip / fact / event about uniformly (greedy: it
    stores the distractor, accuracy 0), GRPO with one reward per rollout learns to skip the
    distractor and store the fact: accuracy 1 at the fact's 4 tokens, greedy, on every
    instance. Fails when credit stops reaching the first chunk's choice."""
    trainer = GRPOTrainer(_unit_config(tmp_path), RunDir(tmp_path / "run"))
    summary = trainer.train()
    start, end = summary["initial_eval"], summary["final_eval"]
    assert start["memory/accuracy"] <= 0.25
    assert end["memory/accuracy"] >= 0.9
    assert end["memory/memory_tokens"] == BUDGET  # the fact, nothing else
    assert end["memory/validity"] == 0.5  # stored as a fact (valid), the distractor skipped

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    steps = [r for r in rows if "reward/memory/accuracy" in r]
    assert len(steps) == 30
    for key in (
        "reward/memory/accuracy",
        "reward/memory/tool_success",
        "reward/memory/compression",
        "reward/memory/validity",
        "memory/memory/semantic/tool_success",
        "memory/memory/episodic/validity",
        "memory/memory/chunk_spread",
        "memory/memory/accuracy_spread",
        "advantage/memory/no_write",
        "kl/reference",
    ):
        assert all(key in r for r in steps), key
    assert steps[0]["kl/reference"] == 0.0  # the first step samples from the reference itself
    assert steps[-1]["kl/reference"] > 0.0
    # at the end the writes that answer are paid more than the others
    late = [r for r in steps[-10:] if "advantage/memory/answering_writes" in r]
    assert mean(r["advantage/memory/answering_writes"] for r in late) > 0
