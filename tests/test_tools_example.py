"""examples/tools.yaml, the README's tool-using agent: its data is what `world.py` generates, and
its reward, run through the real `tools` environment, ranks episodes as the README says: a
wrong answer earns no more than running out of turns (the design GRPO needs there), a failed
call is logged but costs nothing, and success is a correct answer whatever the calls.

Turns are scripted (`ScriptedGenerator`); the template, parsing, tools and rewards are the
example's and the product's.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from tool_world import ScriptedGenerator, hermes

from honed.config import PolicyConfig, TinyModelConfig, load_config
from honed.models.policy import Policy
from honed.rl.trainer import build_envs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tools"
SHAPE = TinyModelConfig(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
)


def test_the_shipped_world_is_what_world_py_generates(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("tools_world", EXAMPLE / "world.py")
    world = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(world)
    monkeypatch.setattr(world, "HERE", tmp_path)
    world.main()
    for name in ("world.json", "train.jsonl", "test.jsonl", "validation.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
    rows = {
        split: [json.loads(line) for line in (EXAMPLE / f"{split}.jsonl").open()]
        for split in ("train", "validation", "test")
    }
    prompts = [{row["prompt"] for row in split} for split in rows.values()]
    assert sum(map(len, prompts)) == len(set().union(*prompts))  # disjoint splits

    def one_turn_pairs(split: str) -> float:
        sums = [row for row in rows[split] if row["kind"] == "sum"]
        return sum(len(row["reference"][0]["tool_calls"]) == 2 for row in sums) / len(sums)

    # held out (the warm-start's check, the reference solver): both lookups in one turn, the
    # way GRPO must learn; training demonstrations mostly one per turn (world.SEQUENTIAL)
    assert one_turn_pairs("validation") == one_turn_pairs("test") == 1.0
    assert one_turn_pairs("train") == pytest.approx(1 - world.SEQUENTIAL, abs=0.05)


@pytest.fixture(scope="module")
def shop():
    config = load_config(ROOT / "examples" / "tools.yaml")
    env = build_envs(config)["shop"]
    policy = Policy.from_config(PolicyConfig(tiny=SHAPE, chat_template=True), seed=0)
    return env, policy, config.trainer.max_completion_length


def episode(shop, kind: str, plan: str = ""):
    """A scripted agent on the first test question of `kind` (`price` or `sum`): it looks the
    question's products up, all in one turn (`sequential`: one per turn, as most training
    demonstrations of sums do), adds two prices with `calc`, and answers; `wrong` answers one
    more than that, `typo` also looks up a product that does not exist in its first turn, and
    `garbled` also writes a call that is not JSON there."""
    env, policy, budget = shop
    item = next(i for i in env.items("test") if i.data["kind"] == kind)
    products = item.data["products"]

    def script(context: str, seed: int) -> str:
        turn = context.count("A:") - 1
        results = [int(r) for r in re.findall(r"R:(\d+)\n", context)]
        lookups = [hermes("lookup", name=n) for n in products]
        if "typo" in plan:
            lookups.append(hermes("lookup", name="zz9"))
        if "garbled" in plan:
            lookups.append("<tool_call>{lookup zz9</tool_call>")
        if "sequential" in plan and turn < len(lookups):
            return lookups[turn]
        if turn == 0:
            return "".join(lookups)
        if len(results) == 2 and kind == "sum":
            return hermes("calc", expression=f"{results[0]}+{results[1]}")
        return str(results[-1] + ("wrong" in plan))

    return env.rollout([item], ScriptedGenerator(policy, script, budget), 1, 0)[0].trajectories[0]


def test_a_right_answer_succeeds_and_a_wrong_one_earns_what_running_out_of_turns_does(shop):
    right, wrong, out_of_turns = (
        episode(shop, "sum", plan) for plan in ("", "wrong", "sequential")
    )
    assert right.info["episode"]["stop"] == wrong.info["episode"]["stop"] == "answer"
    assert out_of_turns.info["episode"]["stop"] == "max_turns"
    assert (right.reward, right.success) == (1.0, 1.0)
    assert (wrong.reward, wrong.success) == (0.0, 0.0)
    assert (out_of_turns.reward, out_of_turns.success) == (0.0, 0.0)


def test_a_failed_call_is_logged_but_not_penalised_and_a_right_answer_after_it_succeeds(shop):
    """A penalty for failed calls made GRPO unlearn looking both products up in one turn (a
    miscopied second name cost it; running out of turns did not): the component is logged
    with weight 0 (examples/tools/README.md)."""
    slip, slip_wrong = (episode(shop, "price", plan) for plan in ("typo", "typo wrong"))
    assert slip.info["episode"]["stop"] == "answer"
    assert slip.components == {"correct": 1.0, "call_errors": -1.0}
    assert (slip.reward, slip.success) == (1.0, 1.0)
    assert (slip_wrong.reward, slip_wrong.success) == (0.0, 0.0)


def test_clean_calls_credits_only_an_answer_after_calls_that_all_went_right(shop):
    """The shaping term examples/skills_tools.yaml keeps (the reflector reads it) shares the
    example's check for a call that went wrong with `call_errors`."""
    spec = importlib.util.spec_from_file_location("tools_rewards", EXAMPLE / "rewards.py")
    rewards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rewards)
    plans = [("sum", ""), ("price", "typo"), ("price", "garbled"), ("sum", "sequential")]
    runs = [episode(shop, kind, plan) for kind, plan in plans]
    assert [t.info["episode"]["stop"] for t in runs] == ["answer"] * 3 + ["max_turns"]
    episodes = [t.info["episode"] for t in runs]
    # right; a failed call; an unreadable call; out of turns
    assert rewards.clean_calls(episodes) == [1.0, 0.0, 0.0, 0.0]
    assert rewards.call_errors(episodes) == [0.0, -1.0, -1.0, 0.0]


def test_seeds_py_tabulates_each_run_and_counts_the_gains(tmp_path):
    """examples/tools/seeds.py's table (the robustness table of examples/tools/README.md) is
    read from the runs' summaries; a run without one is left out, and so is a folder not named
    as seeds.py names runs (an earlier attempt moved aside)."""
    spec = importlib.util.spec_from_file_location("tools_seeds", EXAMPLE / "seeds.py")
    seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seeds)
    runs = (("s0_t1", 0.6, 0.9), ("s10_t2", 0.5, 0.55), ("s1_t1", 0.4, None), ("s0_t1_old", 0, 1))
    for name, start, end in runs:
        (tmp_path / name).mkdir()
        if end is None:
            continue  # still running
        evals = [
            {"accuracy": value, "episodes/shop/max_turns": turns}
            for value, turns in ((start, 0.3), (end, 0.0))
        ]
        summary = {
            "initial_eval": evals[0],
            "final_eval": evals[1],
            "warmstart": {"sft/steps": 1400.0, "sft/check/copy_accuracy": 0.983},
            "seconds": 1347.0,
        }
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    lines = seeds.table(tmp_path).splitlines()
    assert lines[2] == "| 0 | 1 | 1400 | 0.983 | 0.600 | 0.900 | +0.300 | 0.300 → 0.000 | 22.4 |"
    assert lines[3].startswith("| 10 | 2 |") and "+0.050" in lines[3] and len(lines) == 6
    assert lines[5].endswith("1 of 2 gain at least 0.15")
