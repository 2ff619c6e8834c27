"""honed touches only what it made in a run directory and never follows a link out of it
(docs/security.md, "Files"). Each test plants what a shared run held when honed once read,
wrote or deleted a file outside it, and checks the command refuses with one line (exit code 2)
while nothing outside was read (`run_trees.WATCH`), written or deleted (`run_trees.snapshot`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from run_trees import SECRET, WATCH, copy_run, sentinel_tree, snapshot

from honed.cli import main
from honed.errors import HonedError
from honed.runs.files import MANIFEST, atomic_write_text

SRC = Path(__file__).resolve().parents[1] / "src" / "honed"


def _err(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def _sent(server, since: int) -> str:
    return json.dumps([r.body for r in server.requests[since:]])


# A private file linked from a run (issue 35, items 3 and 4) -----------------------------------


def test_a_best_skill_linked_to_a_private_file_is_never_read_nor_sent(
    tmp_path, skills_base, skill_server, capsys
):
    config, base = skills_base
    run = copy_run(base, tmp_path / "run")
    secret = tmp_path / "id_rsa"
    secret.write_text(SECRET)
    (run / "best_skill.md").unlink()
    (run / "best_skill.md").symlink_to(secret)
    since = len(skill_server.requests)
    ask = ["skills", "eval", str(config), "--quiet", "--skill", str(run / "best_skill.md")]
    for extra in (["--run-dir", str(run)], []):  # with the run, and with the file alone
        with WATCH.watching(secret) as opened:
            code = main([*ask, *extra])
        err = _err(capsys)
        assert code == 2 and len(err) == 1 and "best_skill.md is a symbolic link" in err[0]
        assert opened == [] and SECRET not in _sent(skill_server, since)


def test_skill_files_are_read_without_links_even_with_the_users_own_config(
    tmp_path, skills_base, skill_server, capsys
):
    """`--skill` is checked as a file of the run that holds it: no link on its way below the
    run, none in its own place; a plain file of the user's is read as ever."""
    config, base = skills_base
    run = copy_run(base, tmp_path / "run")
    private = tmp_path / "private"
    private.mkdir()
    (private / "v0001.md").write_text(SECRET)
    shutil.rmtree(run / "skills")
    (run / "skills").symlink_to(private)
    loose = tmp_path / "skill.md"
    loose.symlink_to(private / "v0001.md")
    since = len(skill_server.requests)
    for skill, culprit in ((run / "skills" / "v0001.md", "run/skills"), (loose, "skill.md")):
        with WATCH.watching(private) as opened:
            code = main(["skills", "eval", str(config), "--quiet", "--skill", str(skill)])
        err = _err(capsys)
        assert code == 2 and len(err) == 1, err
        assert f"{culprit} is a symbolic link" in err[0]
        assert opened == [] and SECRET not in _sent(skill_server, since)
    mine = tmp_path / "mine.md"
    mine.write_text("# My skill\n")
    assert main(["skills", "eval", str(config), "--quiet", "--skill", str(mine)]) == 0


# Links inside a checkpoint (item 5) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("resume", "model.safetensors"),
        ("resume", "chat_template.jinja"),
        ("eval", "tokenizer.json"),
        ("export", "README.md"),
        ("export", "model.safetensors"),
    ],
)
def test_a_link_inside_a_checkpoint_is_refused(tmp_path, grpo_base, capsys, command, name):
    """A linked file inside a checkpoint was loaded on resume (weights), copied into the next
    checkpoint (the chat template) or into an export (a README): now none of it is read."""
    config, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    checkpoint = run / "checkpoints" / "step_1"
    outside = tmp_path / "outside"
    outside.mkdir()
    kept = checkpoint / name
    if kept.exists():
        shutil.move(kept, outside / name)
    else:
        (outside / name).write_text(SECRET)
    kept.symlink_to(outside / name)
    argv = {
        "resume": ["train", str(config), "--quiet", "--run-dir", str(run), "--resume"],
        "eval": ["eval", str(run), "--quiet"],
        "export": ["export", str(run), str(tmp_path / "export")],
    }[command]
    before = snapshot(outside)
    with WATCH.watching(outside) as opened:
        code = main([*argv, "-o", "trainer.max_steps=2"] if command == "resume" else argv)
    err = _err(capsys)
    assert code == 2 and len(err) == 1 and f"step_1/{name} is a symbolic link" in err[0]
    assert "inside a checkpoint" in err[0]
    assert opened == [] and snapshot(outside) == before
    assert not (tmp_path / "export").exists() and not (run / "checkpoints" / "step_2").exists()


def test_a_runs_config_linked_out_of_it_is_never_read(tmp_path, grpo_base, capsys):
    """`honed eval RUN` reads the run's own `config.yaml`: as a link to a file outside the run
    it is refused before that file is opened."""
    _, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(run / "config.yaml", outside / "config.yaml")
    (run / "config.yaml").symlink_to(outside / "config.yaml")
    with WATCH.watching(outside) as opened:
        code = main(["eval", str(run), "--quiet"])
    err = _err(capsys)
    assert code == 2 and len(err) == 1 and "config.yaml is a symbolic link" in err[0], err
    assert opened == []


# Temporary names (item 6) --------------------------------------------------------------------


def test_plots_never_write_through_links_planted_at_temporary_names(tmp_path):
    """`reward.png` was written to `.reward.tmp-<pid>.png`: links planted under the coming
    process ids made matplotlib overwrite a file outside the run."""
    from honed.runs.plots import plot_rewards

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    run = tmp_path / "run"
    run.mkdir()
    for pid in range(os.getpid() - 2, os.getpid() + 3):
        (run / f".reward.tmp-{pid}.png").symlink_to(victim)
    plot_rewards([{"step": 1, "reward/mean": 0.5}], run / "reward.png")
    assert victim.read_text() == "untouched"
    out = run / "reward.png"
    assert not out.is_symlink() and out.read_bytes().startswith(b"\x89PNG")


def test_an_atomic_write_draws_another_name_when_its_first_is_taken(tmp_path, monkeypatch):
    """Even a planted link under the very random name drawn is never opened."""
    import honed.runs.files as files

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.json.tmp-aaaaaaaaaaaa").symlink_to(victim)
    atomic_write_text(tmp_path / "out.json", "new")
    assert victim.read_text() == "untouched" and (tmp_path / "out.json").read_text() == "new"


# The run root and what honed cleans (item 7) -------------------------------------------------


def _world(tmp_path: Path) -> tuple[Path, Path]:
    """A sentinel tree holding another project, and `runs/x` linking to it."""
    sentinel = sentinel_tree(tmp_path / "sentinel")
    (tmp_path / "runs").mkdir()
    link = tmp_path / "runs" / "x"
    link.symlink_to(sentinel / "other_project")
    return sentinel, link


def test_a_run_root_linked_to_another_project_is_refused_and_left_alone(
    tmp_path, grpo_base, skills_base, capsys
):
    """`runs/x -> ../another_project`: resuming once deleted that project's steps and rollouts
    and overwrote its config, summary and metrics."""
    sentinel, link = _world(tmp_path)
    before = snapshot(sentinel)
    for argv in (
        ["skills", "train", str(skills_base[0]), "--run-dir", str(link), "--resume"],
        ["train", str(grpo_base[0]), "--run-dir", str(link), "--resume"],
        ["skills", "train", str(skills_base[0]), "--run-dir", str(link), "--overwrite"],
        ["train", str(grpo_base[0]), "--run-dir", str(link), "--overwrite"],
    ):
        code = main([*argv, "--quiet"])
        err = _err(capsys)
        assert code == 2 and len(err) == 1, (argv, err)
        assert "other_project (through the link" in err[0] and "is not a honed run" in err[0]
        assert snapshot(sentinel) == before


def test_a_run_root_that_links_to_a_honed_run_is_used_and_shown(tmp_path, grpo_base, capsys):
    config, base = grpo_base
    run = copy_run(base, tmp_path / "disk" / "run")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x").symlink_to(run)
    argv = ["train", str(config), "--run-dir", str(tmp_path / "runs" / "x"), "--resume"]
    assert main([*argv, "-o", "trainer.max_steps=2", "-o", "logging.progress=true"]) == 0
    said = "".join(capsys.readouterr().out.split())  # as the terminal wrapped it
    shown = f"run directory: {run} (through the link {tmp_path / 'runs' / 'x'})"
    assert "".join(shown.split()) in said
    assert (run / "checkpoints" / "step_2").is_dir()


def test_a_run_written_before_the_manifest_resumes_and_is_listed(tmp_path, grpo_base):
    """An older honed wrote no `honed-run.jsonl`: its layout (a config honed wrote beside its
    logs, every entry a name honed writes) makes it a run, and what is there is listed."""
    config, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    (run / MANIFEST).unlink()
    argv = ["train", str(config), "--quiet", "--run-dir", str(run), "--resume"]
    assert main([*argv, "-o", "trainer.max_steps=2"]) == 0
    listed = [json.loads(line) for line in (run / MANIFEST).read_text().splitlines()]
    assert listed[0] == {"honed_run": 1}
    names = {entry.get("file") or entry.get("tree") for entry in listed[1:]}
    assert {"config.yaml", "checkpoints/step_1/model.safetensors", "checkpoints/step_2"} <= names


def test_a_folder_that_is_not_a_run_is_never_cleaned(tmp_path, grpo_base, capsys):
    """`--overwrite` once removed whatever folder `--run-dir` named."""
    config, base = grpo_base
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (mine / "config.yaml").write_text("seed: 0\nenvs: []\nrun_dir: null\n")
    argv = ["train", str(config), "--quiet", "--run-dir", str(mine), "--overwrite"]
    assert main(argv) == 2
    assert "is not a honed run (no honed-run.jsonl and holds thesis.tex)" in _err(capsys)[0]
    assert (mine / "thesis.tex").read_text() == "years of work"
    # a honed run's own files go; a file honed did not write stays
    run = copy_run(base, tmp_path / "run")
    (run / "notes.txt").write_text("mine")
    argv = ["train", str(config), "--quiet", "--run-dir", str(run), "--overwrite"]
    assert main(argv) == 0
    assert (run / "notes.txt").read_text() == "mine"


def test_honed_deletes_only_files_it_wrote(tmp_path, grpo_base, capsys):
    """A resume drops the rollouts of steps after its checkpoint: one honed did not write (not
    in the manifest) is named and left, and nothing is deleted."""
    config, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    planted = run / "rollouts" / "step_000009.json"
    planted.write_text("{}")
    argv = ["train", str(config), "--quiet", "--run-dir", str(run), "--resume"]
    assert main([*argv, "-o", "trainer.max_steps=2"]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "step_000009.json was not written by honed" in err[0]
    assert planted.exists() and (run / "rollouts" / "step_000001.json").exists()


def test_a_run_directory_refuses_links_on_every_path_it_hands_out(tmp_path):
    from honed.runs.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.create()
    run.claim(run.file("checkpoints", "step_0"), tree=True).mkdir(parents=True)
    (run.path / "checkpoints" / "step_1").symlink_to(tmp_path)
    for call in (
        lambda: run.file("checkpoints", "step_1", "trainer_state.pt"),
        lambda: run.remove(run.path / "checkpoints"),
        lambda: run.claim(run.path / "checkpoints" / "step_1", tree=True),
    ):
        with pytest.raises(HonedError, match=r"checkpoints/step_1 is a symbolic link"):
            call()
    assert (run.path / "checkpoints" / "step_0").is_dir()  # checked whole before deleting
    with pytest.raises(HonedError, match=r"climbs out"):
        run.file("..", "x")


# One module for every file operation in a run ------------------------------------------------

# The modules that write or delete files other than through `honed.runs.files`, and why that
# is not a run's file.
OUTSIDE_RUNS = {
    "runs/files.py": "the one module itself",
    "models/sources.py": "honed's model cache (its own folder under ~/.cache)",
    "distributed/weight_sync.py": "the weights folder for inference servers, from your config",
    "config_reference.py": "the README's configuration reference (a developer tool)",
}
DIRECT = re.compile(
    r"shutil\.(rmtree|copy2?|move)\(|\.unlink\(|os\.(remove|unlink|rmdir|replace|rename)\("
    r"|\.rename\(|\.write_(text|bytes)\("
    r"|\.open\(\s*\"[wa]|\bopen\((?![^)]*opener=)[^)]*\"[wa]"
)


def test_only_the_files_module_writes_or_deletes_in_a_run():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in OUTSIDE_RUNS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if DIRECT.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []


def test_honed_serve_refuses_a_runs_checkpoint_holding_a_link(tmp_path, grpo_base):
    """`honed serve RUN` loads the run's latest checkpoint whole, as resume and export do: a
    link inside it is refused before anything is read through it."""
    from honed.runs.rundir import RunDir
    from honed.serve.weights import load_policy

    _, base = grpo_base
    run = copy_run(base, tmp_path / "run")
    _, checkpoint = RunDir(run).latest_checkpoint()
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(checkpoint / "tokenizer.json", outside / "tokenizer.json")
    (checkpoint / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    with WATCH.watching(outside) as opened, pytest.raises(HonedError, match="symbolic link"):
        load_policy(str(run), "cpu", "float32", 0)
    assert opened == []
