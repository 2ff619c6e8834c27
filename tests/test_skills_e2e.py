"""`honed skills train` end to end against a local OpenAI-compatible server playing both roles
(see `skill_world.py`): the selection score rises, budgets hold, the harmful edit is rejected,
a crashed and resumed run ends where an uninterrupted one does, a resumed run follows the config
in force (and refuses what cannot apply, and leaves a finished run alone), and bad servers stop
the run before any work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest
import yaml
from openai_server import FakeOpenAIServer
from skill_world import HARMFUL, INITIAL_SKILL, World, write_config

from honed.cli import main
from honed.skills.schedule import build_scheduler
from honed.skills.trainer import SkillTrainer


@pytest.fixture(scope="module")
def world():
    with pytest.MonkeyPatch.context() as mp:  # a CI proxy must not see the local server
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        w = World()
        with FakeOpenAIServer(w, models=("target", "reflector")) as server:
            yield w, server


def train(config: Path, run: Path, *flags: str) -> int:
    return main(["skills", "train", str(config), "--run-dir", str(run), "--quiet", *flags])


@pytest.fixture(scope="module")
def full_run(world, tmp_path_factory):
    folder = tmp_path_factory.mktemp("full")
    config = write_config(folder, world[1].base_url)
    assert train(config, folder / "run") == 0
    return folder / "run"


def read(path: Path):
    return json.loads(path.read_text())


def steps(run: Path) -> list[Path]:
    return sorted((run / "steps").iterdir())


def test_the_selection_score_rises_and_the_best_skill_is_kept(full_run):
    summary = read(full_run / "summary.json")
    selection = summary["selection"]
    assert selection["initial"]["hard"] == pytest.approx(1 / 6)  # only the alpha rule
    assert selection["best"]["hard"] == 1.0 > selection["initial"]["hard"]
    assert summary["eval"]["best"]["hard"] > summary["eval"]["initial"]["hard"]
    assert summary["accepted_steps"] and summary["rejected_steps"]
    best = (full_run / "best_skill.md").read_text()
    assert best == (full_run / "skills" / f"v{summary['best_version']:04d}.md").read_text()
    assert (full_run / "skills" / "v0001.md").read_text() == INITIAL_SKILL
    assert {"rollout", "gate", "reflect", "rank", "eval", "consolidate"} <= set(summary["tokens"])
    assert summary["tokens"]["reflect"]["prompt_tokens"] > 0
    # Versions' scores never fall under a strict gate.
    metrics = [v["metric"] for v in summary["versions"]]
    assert metrics == sorted(metrics)


def test_edits_applied_per_step_never_exceed_the_budget(full_run):
    schedule = build_scheduler("linear", max_lr=2, min_lr=1, total_steps=6)
    expected = [schedule.step() for _ in range(6)]
    summary = read(full_run / "summary.json")
    assert summary["budget_per_step"] == expected == [2, 2, 2, 1, 1, 1]
    capped = 0
    for step_dir, budget in zip(steps(full_run), expected, strict=True):
        record = read(step_dir / "step.json")
        report = read(step_dir / "apply_report.json")
        ranked = read(step_dir / "ranked_edits.json")
        assert record["budget"] == ranked["budget"] == budget
        assert report["applied"] == record["applied"] <= record["kept"] <= budget
        capped += record["pool"] > budget
        for name in ("rollouts.json", "proposed_edits.json", "merged_edits.json", "gate.json"):
            assert (step_dir / name).is_file()
        assert (step_dir / "candidate_skill.md").is_file()
    assert capped  # the budget, not the pool, limited some step
    assert summary["applied_per_step"] == [
        read(d / "step.json")["applied"] for d in steps(full_run)
    ]


def test_the_harmful_edit_is_rejected_and_not_proposed_again_in_the_epoch(full_run):
    harmful_steps = []
    for step_dir in steps(full_run):
        if HARMFUL in (step_dir / "candidate_skill.md").read_text():
            gate = read(step_dir / "gate.json")
            assert gate["outcome"] == "rejected"
            assert gate["decision"]["metric_after"] < gate["decision"]["metric_before"]
            harmful_steps.append(read(step_dir / "step.json"))
    assert harmful_steps
    assert HARMFUL not in (full_run / "best_skill.md").read_text()
    # The step after a rejection, in the same epoch, saw it in the buffer and left it out.
    first = harmful_steps[0]
    following = read(full_run / "steps" / f"step_{first['step'] + 1:04d}" / "proposed_edits.json")
    assert following and HARMFUL not in json.dumps(following)


def test_a_run_stopped_by_a_failing_server_resumes_to_the_same_best_skill(
    full_run, world, tmp_path, capsys
):
    """The target goes down in step 3: the step is abandoned, the run stops with exit code 2
    and one message, step 2's state saved and the reason in the summary; once the server is
    back, --resume ends where an uninterrupted run does."""
    w, server = world
    config = write_config(tmp_path, server.base_url)
    run = tmp_path / "run"
    gate_items = read(full_run / "summary.json")["gate"]["items"]
    before = gate_items + sum(read(d / "step.json")["target_replies"] for d in steps(full_run)[:2])
    w.target_down_after = w.calls["target"] + before  # the world counts across runs
    try:
        assert train(config, run) == 2
    finally:
        w.target_down_after = None
    err = capsys.readouterr().err
    assert "the target server is misbehaving" in err and "the target is down" in err
    assert "continue with --resume once it is fixed" in err
    assert read(run / "state.json")["step"] == 2
    assert not (run / "steps" / "step_0003").exists()
    stopped = read(run / "summary.json")["stopped"]
    assert stopped["kind"] == "server" and stopped["after_step"] == 2
    assert train(config, run) == 2  # refuses to overwrite a run without --resume
    assert train(config, run, "--resume") == 0

    resumed, full = read(run / "summary.json"), read(full_run / "summary.json")
    assert (run / "best_skill.md").read_text() == (full_run / "best_skill.md").read_text()
    for key in ("accepted_steps", "rejected_steps", "unchanged_steps", "budget_per_step"):
        assert resumed[key] == full[key]
    assert [v["hash"] for v in resumed["versions"]] == [v["hash"] for v in full["versions"]]
    assert [d.name for d in steps(run)] == [d.name for d in steps(full_run)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_finishes_the_step_saves_it_and_the_resumed_run_ends_as_the_full_one(
    full_run, world, tmp_path, monkeypatch, capsys, signum
):
    """The run lifecycle GRPO uses: the first Ctrl-C, or a SIGTERM (a job scheduler preempting
    the run), lets the step under way finish and saves it (a step cut short would leave the
    edit budget and the sampler past the saved state), exit code 128 plus the signal's
    number; every step's record goes to metrics.jsonl once, across the interruption."""
    _, server = world
    config = write_config(tmp_path, server.base_url)
    run = tmp_path / "run"
    real_reflect = SkillTrainer._reflect

    def reflect_with_ctrl_c(trainer, step, rollouts):
        if step == 3:
            os.kill(os.getpid(), signum)
        return real_reflect(trainer, step, rollouts)

    monkeypatch.setattr(SkillTrainer, "_reflect", reflect_with_ctrl_c)
    assert train(config, run) == 128 + signum
    err = capsys.readouterr().err
    assert f"interrupted after step 3; saved {run / 'state.json'}; continue with --resume" in err
    assert read(run / "state.json")["step"] == 3
    assert (run / "steps" / "step_0003").is_dir() and not (run / "steps" / "step_0004").exists()
    monkeypatch.setattr(SkillTrainer, "_reflect", real_reflect)
    assert train(config, run, "--resume") == 0
    assert (run / "best_skill.md").read_text() == (full_run / "best_skill.md").read_text()
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    full = [json.loads(line) for line in (full_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [r["step"] for r in full] == list(range(1, len(full) + 1))
    assert [r["outcome"] for r in logged] == [r["outcome"] for r in full]
    assert logged[0]["time"] > 0  # the wall clock `honed view` plots against
    assert logged[0] == read(run / "steps" / "step_0001" / "step.json") | {
        "step": 1,
        "time": logged[0]["time"],
    }


def test_skills_eval_scores_a_skill_from_the_run_cache(full_run, world):
    w, _ = world
    calls = w.calls["target"]
    best = full_run / "best_skill.md"
    ask = ["skills", "eval", "--skill", str(best), "--run-dir", str(full_run), "--quiet"]
    assert main(ask) == 2  # the run's own config names a server: not without being told
    assert main([*ask, "--trust-run-config"]) == 0
    result = read(full_run / "eval" / "best_skill_test.json")
    assert result["hard"] == 1.0 and result["qa/zeta/hard"] == 1.0
    assert w.calls["target"] == calls  # every answer came from the run's cache


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_unreachable_or_misconfigured_servers_stop_the_run_before_any_work(world, tmp_path, capsys):
    w, server = world
    calls = dict(w.calls)
    config = write_config(tmp_path, closed_port_url())
    assert train(config, tmp_path / "run") == 2
    assert "cannot reach the chat server" in capsys.readouterr().err
    wrong_model = write_config(tmp_path, server.base_url, reflector={"model": "gpt-nope"})
    assert train(wrong_model, tmp_path / "run") == 2
    assert "model 'gpt-nope' is not served" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert w.calls == calls  # no chat request was made


def test_autonomous_budget_and_llm_merge_in_the_loop(world, tmp_path):
    """The reflector chooses how many ranked edits to keep (2 here), never more than the pool."""
    _, server = world
    config = write_config(
        tmp_path,
        server.base_url,
        edit_budget={"mode": "autonomous", "max_lr": 3},
        train={"merge": "llm", "max_steps": 3},
        consolidation={"enabled": False},
    )
    assert train(config, tmp_path / "run") == 0
    records = [read(d / "step.json") for d in steps(tmp_path / "run")]
    assert [r["budget"] for r in records] == [999] * 3
    ranked = [r for r in records if r["rank"] == "llm"]
    assert ranked and all(r["kept"] == min(2, r["pool"]) for r in ranked)
    assert all(r["applied"] <= r["kept"] <= r["pool"] for r in records)
    assert {r["merge"] for r in records if r["pool"] > 1} == {"llm"}
    assert read(tmp_path / "run" / "summary.json")["selection"]["best"]["hard"] > 1 / 6


# ---------------------------------------------------------------- resume: settings from the config


@pytest.fixture(scope="module")
def four_steps(world, tmp_path_factory):
    """A finished run of 4 cosine steps (budget 6 -> 0), and its config."""
    folder = tmp_path_factory.mktemp("four")
    config = write_config(
        folder,
        world[1].base_url,
        edit_budget={"mode": "cosine", "max_lr": 6, "min_lr": 0},
        train={"epochs": 3, "max_steps": 4},
        consolidation={"enabled": False},
        skill={"preamble": "Read the skill."},
    )
    assert train(config, folder / "run") == 0
    assert read(folder / "run" / "summary.json")["budget_per_step"] == [5, 3, 1, 0]
    return config, folder / "run"


def copy_run(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def resume(config: Path, run: Path, *overrides: str) -> int:
    """`--resume` with `-o` overrides, not quiet: the changed settings are printed."""
    flags = [flag for override in overrides for flag in ("-o", override)]
    return main(["skills", "train", str(config), "--run-dir", str(run), "--resume", *flags])


def files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


def change_lines(out: str) -> list[str]:
    return [line.removeprefix("· ") for line in out.splitlines() if " -> " in line]


def test_a_resumed_run_takes_the_edit_budget_from_the_config_in_force(
    four_steps, world, tmp_path, capsys
):
    config, finished = four_steps
    run = copy_run(finished, tmp_path)
    capsys.readouterr()
    assert resume(config, run, "edit_budget.mode=linear", "train.max_steps=8") == 0
    assert change_lines(capsys.readouterr().out) == [
        "train.max_steps: 4 -> 8",
        "edit_budget.mode: cosine -> linear",
    ]
    # Steps 5..8 get what a fresh 8-step linear run gets there; steps 1..4 stay as they were.
    fresh = build_scheduler("linear", max_lr=6, min_lr=0, total_steps=8)
    budgets = read(run / "summary.json")["budget_per_step"]
    assert (
        budgets == [5, 3, 1, 0] + [fresh.get_lr(k) for k in range(5, 9)] == [5, 3, 1, 0, 2, 2, 1, 0]
    )
    assert [read(d / "step.json")["budget"] for d in steps(run)] == budgets
    # A budget of 0 keeps nothing and asks the reflector for no ranking.
    zero = [read(d / "step.json") for d in steps(run) if read(d / "step.json")["budget"] == 0]
    assert all(r["kept"] == r["applied"] == 0 for r in zero)
    assert [r["rank"] for r in zero if r["pool"]] == ["deterministic (the budget is 0)"]


def test_resuming_a_finished_run_changes_nothing(four_steps, world, tmp_path, capsys):
    w, _ = world
    config, finished = four_steps
    run = copy_run(finished, tmp_path)
    before, calls = files(run), dict(w.calls)
    assert train(config, run, "--resume") == 0
    assert files(run) == before  # no second evaluation or summary
    # A changed setting is reported (verbatim, brackets included), and applies to nothing.
    capsys.readouterr()
    assert resume(config, run, "skill.preamble=Use the [alpha] rules.") == 0
    out = capsys.readouterr().out
    assert change_lines(out) == ["skill.preamble: Read the skill. -> Use the [alpha] rules."]
    assert "the run finished after step 4: nothing to do" in out
    assert files(run) == before
    assert w.calls == calls


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("skill.init=Answer with the number only.", "skill.init"),
        ("train.max_steps=3", "train.max_steps"),
        ("gate.num_items=1", "gate.num_items"),
        ("train.steps_per_epoch=2", "train.steps_per_epoch"),
    ],
)
def test_a_change_that_cannot_apply_stops_the_resume_naming_the_key(
    four_steps, world, tmp_path, capsys, override, key
):
    w, _ = world
    config, finished = four_steps
    run = copy_run(finished, tmp_path)
    before, calls = files(run), dict(w.calls)
    assert train(config, run, "--resume", "-o", override) == 2
    assert f"honed: error: {key} cannot change when resuming ({key}: " in capsys.readouterr().err
    assert files(run) == before
    assert w.calls == calls


def with_old_key_names(config: dict) -> dict:
    """A saved config as honed wrote it before `reflector` and `edit_budget` were renamed: the
    same sections, in the same places, under `optimizer` and `schedule`."""
    old = {"reflector": "optimizer", "edit_budget": "schedule"}
    assert set(old) <= set(config)
    return {old.get(key, key): value for key, value in config.items()}


def test_a_run_saved_with_the_old_key_names_resumes_under_the_new_ones(
    four_steps, world, tmp_path, capsys
):
    """A state whose config says `optimizer` and `schedule` compares equal to the same settings
    under `reflector` and `edit_budget` (a finished run: nothing to do, nothing reported), and a
    changed setting is reported under its new name."""
    config, finished = four_steps
    run = copy_run(finished, tmp_path)
    state = read(run / "state.json")
    state["config"] = with_old_key_names(state["config"])
    (run / "state.json").write_text(json.dumps(state))
    before = files(run)
    capsys.readouterr()
    assert train(config, run, "--resume") == 0
    assert files(run) == before
    assert resume(config, run, "edit_budget.max_lr=7", "train.max_steps=5") == 0
    out, err = capsys.readouterr()
    assert change_lines(out) == ["train.max_steps: 4 -> 5", "edit_budget.max_lr: 6 -> 7"]
    assert "deprecated" not in err
    assert read(run / "summary.json")["steps"] == 5


def test_a_run_from_an_earlier_honed_resumes_with_the_schedule_in_force(
    four_steps, tmp_path, capsys
):
    """Its state holds the schedule's settings and no config; its config.yaml predates
    `anchor` and `rounding`, and names the reflector `optimizer` and the edit budget `schedule`:
    the change of default is reported under the new names, the config's settings apply, and the
    run's own old key names draw no deprecation message."""
    config, finished = four_steps
    run = copy_run(finished, tmp_path)
    state = read(run / "state.json")
    for key in ("config", "steps_per_epoch"):
        del state[key]
    state["scheduler"] = {
        "mode": "cosine",
        "max_lr": 6,
        "min_lr": 0,
        "total_steps": 4,
        "warmup_steps": 0,
        "current_step": 4,
    }
    (run / "state.json").write_text(json.dumps(state))
    old = with_old_key_names(yaml.safe_load((run / "config.yaml").read_text()))
    del old["schedule"]["anchor"], old["schedule"]["rounding"]
    (run / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    capsys.readouterr()
    overrides = ("edit_budget.max_lr=8", "edit_budget.total_steps=10", "train.max_steps=5")
    assert resume(config, run, *overrides) == 0
    out, err = capsys.readouterr()
    assert change_lines(out) == [
        "train.max_steps: 4 -> 5",
        "edit_budget.max_lr: 6 -> 8",
        "edit_budget.total_steps: null -> 10",
        "edit_budget.anchor: both -> last",
        "edit_budget.rounding: half_up -> half_even",
    ]
    assert "deprecated" not in err
    # Step 5 of cosine 8 -> 0 over 10 steps; the state's settings would give 0, and a schedule
    # restarted at step 1 would give 8.
    fresh = build_scheduler("cosine", max_lr=8, min_lr=0, total_steps=10)
    assert read(run / "summary.json")["budget_per_step"][4] == fresh.get_lr(5) == 4
