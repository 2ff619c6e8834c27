"""The rollouts-to-target statistics of the sample-efficiency benchmarks (bench/censoring.py):
a run that never reached a target is censored at its total, and no ratio, median or mean is
ever formed from such a bound."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from censoring import Crossing, censored_median, crossing, ratio, spread
from efficiency_report import report

# [step, held-out accuracy, rollouts so far, train CPU s, train wall s]; warm-start 0.30
CURVE = [[0, 0.30, 0, 0.0, 0.0], [5, 0.29, 5000, 10.0, 12.0], [10, 0.35, 11000, 21.0, 25.0]]


def hit(rollouts: int, censored: bool = False) -> Crossing:
    return Crossing(rollouts, 0, None, None, censored)


def test_crossing_is_the_first_evaluation_at_or_above_the_target() -> None:
    # 0.30 + 0.05 = 0.35 exactly: reached (floating-point sums must not miss it)
    found = crossing(CURVE, 0.05, total=12_000)
    assert (found.rollouts, found.step, found.cpu_s, found.wall_s) == (11000, 10, 21.0, 25.0)
    assert not found.censored
    assert found.cell() == "11,000 (10)"
    assert found.cell("cpu") == "21"


def test_the_warm_start_itself_never_counts_as_reaching_a_target() -> None:
    # gain 0: the first evaluation *after* GRPO began at or above 0.30 is step 10, not step 0
    assert crossing(CURVE, 0.0, total=12_000).step == 10


def test_a_run_that_never_reached_the_target_is_censored_at_its_total() -> None:
    found = crossing(CURVE, 0.06, total=12_345)
    assert found.censored
    assert found.rollouts == 12_345  # the whole run, not the last evaluation's count
    assert found.cell() == "> 12,345 (censored)"
    assert found.cell("cpu") == "> 21 (censored)"


def test_older_curves_without_times_still_cross() -> None:
    found = crossing([[0, 0.2, 0], [5, 0.3, 800]], 0.05, total=900)
    assert (found.rollouts, found.cpu_s) == (800, None)
    assert found.cell("wall") == "n/a"


def test_ratio_is_a_number_only_when_both_runs_crossed() -> None:
    assert ratio(hit(40_000), hit(80_000)).value == 0.5
    # the baseline never got there within 400,000: the arm needs less than 0.25 of its count
    bound = ratio(hit(100_000), hit(400_000, censored=True))
    assert (bound.value, bound.bound, bound.cell()) == (None, "<", "< 0.25")
    bound = ratio(hit(400_000, censored=True), hit(200_000))
    assert (bound.value, bound.cell()) == (None, "> 2.00")
    assert ratio(hit(1, censored=True), hit(1, censored=True)).cell() == "–"


def test_median_ranks_censored_runs_above_every_crossing() -> None:
    runs = [hit(300), hit(100), hit(400_000, censored=True), hit(200), hit(400_000, True)]
    # 100, 200, 300, then the two censored: the third of five is 300
    assert censored_median(runs) == (300, "exact; 2 of 5 censored")
    assert censored_median([*runs[:3], hit(400_000, True)]) == (None, "2 of 4 censored")
    assert censored_median([hit(100), hit(300)]) == (200, "exact")


def test_median_is_undetermined_when_a_censored_run_stopped_below_it() -> None:
    # a run cut off at 150 rollouts might have crossed anywhere above 150, below the 200 found
    runs = [hit(100), hit(200), hit(300), hit(150, censored=True), hit(400)]
    value, how = censored_median(runs)
    assert value is None and how.startswith("undetermined")


def test_spread_uses_exact_values_only_and_counts_the_rest() -> None:
    summary = spread([0.5, None, 0.7, 0.6])
    assert summary.n == 3 and summary.left_out == 1
    assert summary.mean == pytest.approx(0.6)
    assert summary.sd == pytest.approx(0.1)
    assert summary.median == pytest.approx(0.6)
    assert "1 more not exact" in summary.text()
    assert spread([None, None]).text() == "none exact (2 not: a bound, or both censored)"


def _result(seed: int, arm: str, accuracies: list[float], per_step: int) -> dict:
    curve = [[5 * i, acc, per_step * i, float(i), float(i)] for i, acc in enumerate(accuracies)]
    return {
        "seed": seed,
        "arm": arm,
        "warm_start_accuracy": accuracies[0],
        "final_accuracy": accuracies[-1],
        "curve": curve,
        "rollouts_total": curve[-1][2],
        "steps": curve[-1][0],
        "first_step": {"groups_drawn": 100, "zero_spread": 0.5},
        "levels": {"warm_start": {"sort/2": 1.0}, "final": {"sort/2": 1.0}},
        "train_cpu_seconds": curve[-1][3],
        "train_wall_seconds": curve[-1][4],
    }


def test_report_never_turns_a_censored_baseline_into_a_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = [
        # seed 1: both reach +0.1 at step 10, frontier at 1,000 rollouts, uniform at 2,000
        _result(1, "uniform", [0.2, 0.25, 0.3, 0.3, 0.3], 1000),
        _result(1, "frontier", [0.2, 0.25, 0.3, 0.3, 0.3], 500),
        # seed 2: uniform never reaches +0.1 within its 4,000; frontier at 1,000
        _result(2, "uniform", [0.2, 0.2, 0.25, 0.25, 0.25], 1000),
        _result(2, "frontier", [0.2, 0.3, 0.3, 0.3, 0.3], 1000),
    ]
    report(_args(), results)
    out = capsys.readouterr().out
    assert "| uniform | 2,000 (10) | > 4,000 (censored) |" in out
    # the per-seed ratio of seed 2 is a bound, 1,000 / 4,000, never the number 0.25
    assert "| frontier | 0.50 | < 0.25 |" in out
    # the summary over seeds uses seed 1's exact ratio only, and says one more was a bound
    assert "median 0.50, mean 0.50, range 0.50–0.50, n = 1; 1 more not exact" in out
    # uniform's median over 2 seeds is not known with one censored: no ratio of medians
    assert "| uniform | 2,000 (10) | > 4,000 (censored) | 1 of 2 censored |" in out
    assert "| +0.1 | frontier | 2 / 2 | 1 / 2 | median 0.50" in out
    assert "n = 1; 1 more not exact | – |" in out


def _args(**changes: object) -> argparse.Namespace:
    settings = dict(
        arms=["uniform", "frontier"],
        seeds=[1, 2],
        baseline="uniform",
        gains=[0.1],
        plot=None,
        env=[{"name": "sort", "levels": [2, 3], "weight": 1.0}],
        dynamic_sampling=True,
        max_rounds=6,
        train_per_level=100,
        sft_train_per_level=1000,
        sft_max_level=10,
        sft_steps=10,
        validation_size=100,
        prompts=8,
        generations=8,
        temperature=1.0,
        max_rollouts=4000,
        max_steps=20,
        lr=3e-4,
        eval_every=5,
    )
    return argparse.Namespace(**(settings | changes))


def test_result_files_of_other_seeds_are_reported_together(tmp_path: Path) -> None:
    import json

    from sample_efficiency import load_results

    def write(name: str, seeds: list[int], **setting: object) -> Path:
        path = tmp_path / name
        runs = [_result(s, "uniform", [0.2, 0.3], 100) for s in seeds]
        base = {"seeds": seeds, "arms": ["uniform"], "max_rollouts": 100, "date": name}
        path.write_text(json.dumps({"setting": base | setting, "results": runs}))
        return path

    setting, results = load_results([write("a", [20]), write("b", [21, 22])])
    assert setting["seeds"] == [20, 21, 22]
    assert sorted(r["seed"] for r in results) == [20, 21, 22]
    # another budget is another benchmark; the same seed twice would count one seed twice
    with pytest.raises(SystemExit, match="max_rollouts"):
        load_results([write("a", [20]), write("c", [21], max_rollouts=200)])
    with pytest.raises(SystemExit, match="more than once"):
        load_results([write("a", [20]), write("d", [20])])


def test_an_arm_missing_a_seed_is_shown_as_not_run_and_given_no_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = [
        _result(1, "uniform", [0.2, 0.25, 0.3, 0.3, 0.3], 1000),
        _result(1, "frontier", [0.2, 0.25, 0.3, 0.3, 0.3], 500),
        _result(2, "uniform", [0.2, 0.3, 0.3, 0.3, 0.3], 1000),  # frontier's seed 2 never ran
    ]
    report(_args(), results)
    out = capsys.readouterr().out
    assert "| frontier | 1,000 (10) | not run | 1,000 |" in out
    assert "| frontier | 0.50 | not run | median 0.50, mean 0.50, range 0.50–0.50, n = 1 |" in out
    # reached counts are out of the runs each arm has, not out of every seed
    assert "| +0.1 | frontier | 1 / 1 | 2 / 2 |" in out


def test_a_seeds_remaining_arms_from_another_file_are_merged(tmp_path: Path) -> None:
    import json

    from sample_efficiency import load_results

    def write(name: str, arms: list[str], baseline: str) -> Path:
        path = tmp_path / name
        runs = [_result(21, a, [0.2, 0.3], 100) for a in arms]
        base = {"seeds": [21], "arms": arms, "baseline": baseline, "max_rollouts": 100}
        path.write_text(json.dumps({"setting": base, "results": runs}))
        return path

    first = write("a", ["uniform", "frontier"], "uniform")
    rest = write("b", ["easy_first", "uniform-nods"], "easy_first")
    setting, results = load_results([first, rest])
    assert setting["arms"] == ["uniform", "frontier", "easy_first", "uniform-nods"]
    assert setting["baseline"] == "uniform"  # the first file's
    assert len(results) == 4


def test_tokens_to_a_target_follow_the_rollouts_rules() -> None:
    curve = [[*point, 100 * point[2]] for point in CURVE]
    found = crossing(curve, 0.05, total=12_000, total_tokens=1_300_000)
    assert (found.tokens, found.cell("tokens")) == (1_100_000, "1,100,000")
    censored = crossing(curve, 0.06, total=12_000, total_tokens=1_300_000)
    assert (censored.tokens, censored.cell("tokens")) == (1_300_000, "> 1,300,000 (censored)")
    assert crossing(CURVE, 0.05, total=12_000, total_tokens=5).tokens is None  # not recorded
    assert censored_median([found, censored], "tokens") == (None, "1 of 2 censored")
