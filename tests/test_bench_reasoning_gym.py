"""The reasoning-gym curriculum benchmark (bench/reasoning_gym_curriculum.py over
bench/sample_efficiency.py) end to end at a toy size, with the embedded tiny policy through the
same code as SmolLM2: every arm's rollouts are counted, every arm of a seed starts from the same
policy (no warm-start), the baseline arm's run measures the untrained model zero-shot and
3-shot, and the report shows them, also from a saved result file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from honed.envs.reasoning_gym import INSTALL

pytest.importorskip(
    "reasoning_gym", reason=f"reasoning-gym is not installed; to run these tests: {INSTALL}"
)

from reasoning_gym_curriculum import MIXTURE, SETTING, main

BUDGET = 256
TOY = [
    *("--model", "tiny", "--seeds", "1", "--threads", "1", "--train-per-level", "4"),
    *("--validation-size", "4", "--max-rollouts", str(BUDGET), "--eval-every", "2"),
    *("--max-completion-length", "16"),
]


def test_every_arm_counts_its_rollouts_from_the_untrained_policy_beside_its_prompting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rg.json"
    main([*TOY, "--work", str(tmp_path / "work"), "--out", str(out)])
    printed = capsys.readouterr().out
    results = {r["arm"]: r for r in json.loads(out.read_text())["results"]}
    assert list(results) == SETTING["arms"]
    step = SETTING["prompts"] * SETTING["generations"]
    for arm, result in results.items():
        # the budget ends the run; its last step may draw up to `max_rounds` batches
        assert BUDGET <= result["rollouts_total"] < BUDGET + 6 * step, arm
        assert result["curve"][-1][2] == result["rollouts_total"]
        assert result["tokens_total"] > 0
        assert result["groups"]["drawn"] > 0
    # a fixed batch costs prompts x generations per step; screening spends less on some groups
    assert results["uniform-nods"]["rollouts_total"] == results["uniform-nods"]["steps"] * step
    screened = results["skip+screen-nods"]
    assert screened["rollouts_total"] < screened["steps"] * step
    # no warm-start: every arm of the seed starts from the same policy, the untrained one (the
    # tiny policy solves nothing, so its whole first evaluation is compared, rewards included)
    initial = [
        json.loads((tmp_path / "work" / f"{arm}-1" / "summary.json").read_text())["initial_eval"]
        for arm in results
    ]
    assert all(evaluation == initial[0] for evaluation in initial)
    assert not (tmp_path / "work" / "uniform-1" / "checkpoints" / "warmstart").exists()
    # the baseline arm alone measures the untrained model zero-shot and 3-shot, per environment
    start = results["uniform"]["start"]
    assert start["zero_shot"]["mean"] == results["uniform"]["warm_start_accuracy"]
    assert set(start["zero_shot"]) == set(start["few_shot"]) == {"mean", *MIXTURE}
    assert all("start" not in r for arm, r in results.items() if arm != "uniform")
    for text in ("Rollouts to warm-start + 0.05", "untrained, zero-shot", "untrained, 3-shot"):
        assert text in printed
    assert "NOT the same starting accuracy" not in printed
    # a saved file is reported again with the same rows
    main(["--results", str(out)])
    again = capsys.readouterr().out
    assert "untrained, 3-shot" in again and "| ba_3x1 |" in again


@pytest.mark.parametrize(
    "option",
    [["--sft-steps", "5"], ["--env", "no_such_setting:1:1"], ["--few-shot", "0"]],
    ids=["sft", "env", "few-shot"],
)
def test_an_option_the_benchmark_cannot_honour_is_refused(option: list[str]) -> None:
    with pytest.raises(SystemExit):
        main([*TOY, *option])


def test_the_runs_config_carries_the_system_prompt_and_the_truncation_mask() -> None:
    """`--system-prompt` reaches every environment (the measured settings' own otherwise) and
    cut replies are masked by default (the reported setting), `--no-mask-truncated` not."""
    from reasoning_gym_curriculum import rg_config, rg_parser

    def config(*options: str):
        args = rg_parser().parse_args(list(options))
        args.env = SETTING["env"]  # as `execute` fills it in
        return rg_config(43, "uniform", args)

    default = config()
    assert default.trainer.mask_truncated_completions
    assert all(env.args["system_prompt"] is None for env in default.envs)
    assert [env.name for env in default.envs] == MIXTURE
    changed = config("--system-prompt", "Reply with the number only.", "--no-mask-truncated")
    assert not changed.trainer.mask_truncated_completions
    assert {env.args["system_prompt"] for env in changed.envs} == {"Reply with the number only."}


def test_the_example_is_the_benchmarks_uniform_arm_on_seed_43() -> None:
    """examples/reasoning_gym.yaml quotes the benchmark's `uniform` arm on seed 43 as its
    measured result, so every setting that shapes the training run must be that arm's: the
    seed, the policy, the five environments with their splits, the whole trainer and curriculum
    and what is evaluated (no warm-start, so the warm-start's own settings do not matter).
    Thread count, logging, checkpoints and the prompting baseline (3-shot, measured before
    training and changing nothing in it) are the benchmark's own business."""
    from reasoning_gym_curriculum import rg_config, rg_parser

    from honed.config import load_config

    args = rg_parser().parse_args([])
    args.env = SETTING["env"]
    bench = rg_config(43, "uniform", args).model_dump()
    example = load_config(Path(__file__).resolve().parents[1] / "examples" / "reasoning_gym.yaml")
    example = example.model_dump()
    for key in ("seed", "policy", "envs", "trainer", "curriculum"):
        assert example[key] == bench[key], key
    assert example["sft"]["steps"] == bench["sft"]["steps"] == 0  # no warm-start
    for key in ("split", "num_items", "every"):
        assert example["eval"][key] == bench["eval"][key], key
