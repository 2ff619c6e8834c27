"""The regime benchmark (bench/curriculum_regime.py over bench/sample_efficiency.py) run end to
end at a toy size: every arm starts from the seed's one warm-start, each run folder is honed's
own (so the trainer accepts it), `--collect` rebuilds the same results from the kept folders,
and `--stop-at-targets` ends a run at the evaluation that reached the highest target."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import curriculum_regime
from sample_efficiency import main

from honed.runs.files import Manifest

TOY = [
    *("--seeds", "1", "--threads", "1", "--train-per-level", "20", "--validation-size", "20"),
    *("--prompts", "4", "--generations", "4", "--screen-rollouts", "2", "--sft-steps", "2"),
    *("--sft-train-per-level", "20", "--eval-every", "2"),
]
ARMS = ["--arms", "uniform", "skip+screen-nods"]


def run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    args = [*TOY, *ARMS, "--work", str(tmp_path / name), "--out", str(out), *extra]
    main(args, doc=curriculum_regime.__doc__, defaults=curriculum_regime.SETTING)
    return json.loads(out.read_text())


def test_every_arm_runs_from_the_seeds_warm_start_in_a_folder_honed_owns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = run(tmp_path, "full", "--max-rollouts", "600")
    results = {r["arm"]: r for r in saved["results"]}
    assert set(results) == {"uniform", "skip+screen-nods"}
    warm = {r["warm_start_accuracy"] for r in results.values()}
    assert len(warm) == 1  # one starting policy for every arm
    for arm, result in results.items():
        assert result["curve"][0][:3] == [0, result["warm_start_accuracy"], 0]
        # the budget ends the run; its last step may draw up to `max_rounds` batches of 4 x 4
        rounds = curriculum_regime.SETTING["max_rounds"]
        assert 600 <= result["rollouts_total"] < 600 + rounds * 4 * 4
        manifest = Manifest.load(tmp_path / "full" / f"{arm}-1")
        assert manifest is not None and manifest.owns("checkpoints/warmstart")
    # the kept folders give the same results again, without running anything
    collected = tmp_path / "collected.json"
    capsys.readouterr()
    main(
        [*TOY, *ARMS, "--collect", str(tmp_path / "full"), "--out", str(collected)],
        doc=curriculum_regime.__doc__,
        defaults=curriculum_regime.SETTING,
    )
    again = {r["arm"]: r for r in json.loads(collected.read_text())["results"]}
    for arm, result in results.items():
        assert again[arm]["curve"] == result["curve"]


def test_stop_at_targets_ends_a_run_at_the_evaluation_that_reached_the_highest(
    tmp_path: Path,
) -> None:
    # a gain of 0 is reached by the first evaluation (step 2), whatever the policy does
    saved = run(tmp_path, "stop", "--max-rollouts", "2000", "--gains", "0", "--stop-at-targets")
    for result in saved["results"]:
        assert result["steps"] == 2
        assert result["curve"][-1][0] == 2
    # a saved file cannot report a target above the one its runs stopped at: those runs would
    # read as censored when they only stopped early
    with pytest.raises(SystemExit, match="stopped at warm-start"):
        main(["--results", str(tmp_path / "stop.json"), "--gains", "0.1"])


def test_an_arm_that_screens_is_ended_by_its_rollout_budget_not_the_step_cap() -> None:
    from argparse import Namespace

    from sample_efficiency import arm_settings, step_cap

    # 4 groups of 4, a screen of 2: a step may generate only 8 rollouts, so 600 take 75 steps
    args = Namespace(max_steps=10, max_rollouts=600, prompts=4, generations=4, screen_rollouts=2)
    args.dynamic_sampling = True
    assert step_cap(arm_settings("screen-nods", args), args) == 75
    assert step_cap(arm_settings("skip+screen", args), args) == 75
    # the other arms keep --max-steps (the length of easy_first's and competence_based's
    # schedules too)
    assert step_cap(arm_settings("uniform-nods", args), args) == 10
    assert step_cap(arm_settings("easy_first", args), args) == 10
