"""Tree fuzz: random run directories with links planted in them, fed to every command that opens
a run (docs/security.md, "Files").

Each case copies a small real run (`conftest.grpo_base`, `conftest.skills_base`) into
`world/runs/`, beside a sentinel tree of private files and another project (`run_trees`), and
plants links drawn from a seeded RNG: in place of the run's files and folders (checkpoint files
included), at new names honed writes, at the temporary names of its atomic writes, to the run's
own root or above it, and now and then as the run root itself. Whatever the command answers
(exit code 0 or 2, never a traceback), no file of the sentinel tree was written or deleted (its
content hashes) or opened (`run_trees.WATCH`).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from run_trees import WATCH, copy_run, sentinel_tree, snapshot
from starlette.testclient import TestClient

from honed.cli import main
from honed.view.app import create_app

SEEDS = range(6)
# names honed writes that a base run does not hold yet
NEW_NAMES = (
    "eval",
    "tensorboard",
    "warmstart_eval.json",
    "checkpoints/step_2",
    "checkpoints/warmstart",
    "rollouts/step_000002.json",
    "steps/step_0002",
    "skills/v0002.md",
    "eval/best_skill_test.json",
)
TEMPORARY = (
    ".reward.tmp-{pid}.png",
    ".metrics.jsonl.tmp-{pid}",
    ".summary.json.tmp-{pid}",
    ".config.yaml.old-{pid}",
    "checkpoints/.step_2.tmp-{pid}",
    "steps/.step_0002.tmp-{pid}",
)


def _entries(run: Path) -> tuple[list[Path], list[Path]]:
    files, dirs = [], []
    for folder, subdirs, names in os.walk(run, followlinks=False):
        dirs += [Path(folder, d) for d in subdirs if not Path(folder, d).is_symlink()]
        files += [Path(folder, n) for n in names if not Path(folder, n).is_symlink()]
    return sorted(files), sorted(dirs)


def _through_link(run: Path, folder: Path) -> bool:
    """Whether a link lies between `run` and `folder` (planting there would write outside)."""
    parts = folder.relative_to(run).parts
    return any((run.joinpath(*parts[: i + 1])).is_symlink() for i in range(len(parts)))


KINDS = ("checkpoint", "temporary", "file", "dir", "new", "root")


def plant(rng: random.Random, run: Path, sentinel: Path, seed: int) -> list[str]:
    """One to three links in `run`, each to a file or folder of `sentinel`, or to the run or
    above it, of kinds taken in turn from `KINDS` (from `seed` on, so that every kind comes
    first in some tree of every command: a link honed refuses early hides those after it);
    what was planted, for the failure message."""
    targets = [
        sentinel / "id_rsa",
        sentinel / "dir",
        sentinel / "dir" / "notes.md",
        sentinel / "other_project",
        sentinel / "other_project" / "steps",
    ]
    planted = []
    for i in range(rng.randint(1, 3)):
        files, dirs = _entries(run)
        kind = KINDS[(seed + i) % len(KINDS)]
        if kind == "checkpoint" and (run / "checkpoints").is_dir():
            kind, files = "file", [f for f in files if "checkpoints" in f.parts] or files
        target: Path | str = rng.choice(targets)
        if kind == "file" and files:
            deep = [f for f in files if len(f.relative_to(run).parts) > 1]
            where = rng.choice(deep if deep and rng.random() < 0.7 else files)
            where.unlink()
        elif kind == "dir" and dirs:
            where = rng.choice(dirs)
            shutil.rmtree(where)
        elif kind in ("new", "root"):
            where = run / rng.choice(NEW_NAMES)
            if kind == "root":
                target = rng.choice([".", "..", os.path.relpath(run, where.parent), str(run)])
        else:
            pid = os.getpid() + rng.choice([0, 0, 1])  # this process's, or the next one's
            where = run / rng.choice(TEMPORARY).format(pid=pid)
        if os.path.lexists(where) or _through_link(run, where.parent):
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(target)
        planted.append(f"{where.relative_to(run)} -> {target}")
    return planted


def _view(runs: Path) -> None:
    """Every JSON route of `honed view` over the runs folder, for every run it lists."""
    client = TestClient(create_app(runs))
    listed = client.get("/api/runs").json()["runs"]
    for run_id in [r["id"] for r in listed] + ["run", "runlink"]:
        for route in (
            "run",
            "metrics",
            "rollouts",
            "rollouts/step?step=1",
            "curriculum",
            "skills",
            "skills/version?v=1",
            "skills/diff?a=1&b=1",
            "skills/step?step=1",
        ):
            joiner = "&" if "?" in route else "?"
            client.get(f"/api/{route}{joiner}run={run_id}")


def _commands(kind: str, config: Path, run: Path, world: Path) -> dict[str, list[str] | None]:
    if kind == "grpo":
        return {
            "train --resume": [
                *("train", str(config), "--run-dir", str(run)),
                *("--resume", "-o", "trainer.max_steps=2"),
            ],
            "eval": ["eval", str(run)],
            "export": ["export", str(run), str(world / "export")],
            "view": None,
        }
    return {
        "skills train --resume": [
            *("skills", "train", str(config), "--run-dir", str(run)),
            *("--resume", "-o", "train.max_steps=2"),
        ],
        "skills eval": [
            *("skills", "eval", str(config), "--run-dir", str(run)),
            *("--skill", str(run / "best_skill.md")),
        ],
        "view": None,
    }


CASES = [
    (kind, command, seed)
    for kind, commands in (
        ("grpo", ("train --resume", "eval", "export", "view")),
        ("skills", ("skills train --resume", "skills eval", "view")),
    )
    for command in commands
    for seed in SEEDS
]


@pytest.mark.parametrize(("kind", "command", "seed"), CASES)
def test_no_command_reaches_outside_a_run_whatever_its_links(
    tmp_path, grpo_base, skills_base, capsys, kind, command, seed
):
    config, base = grpo_base if kind == "grpo" else skills_base
    rng = random.Random(f"{kind}/{command}/{seed}")
    sentinel = sentinel_tree(tmp_path / "sentinel")
    run = copy_run(base, tmp_path / "runs" / "run")
    planted = plant(rng, run, sentinel, seed)
    watched = [sentinel / "id_rsa", sentinel / "dir", sentinel / "other_project"]
    if seed == SEEDS[-1]:  # the run root itself a link to another project
        run = tmp_path / "runs" / "runlink"
        run.symlink_to(sentinel / "other_project")
        planted.append(f"the root -> {sentinel / 'other_project'}")
        watched = watched[:2]  # its files are the run's now; the command must refuse them
    before = snapshot(sentinel)
    argv = _commands(kind, config, run, tmp_path)[command]
    with WATCH.watching(*watched) as opened:
        if argv is None:
            _view(tmp_path / "runs")
        else:
            code = main([*argv, "--quiet"] if argv[0] != "export" else argv)
            assert code in (0, 2), (planted, capsys.readouterr())
    assert opened == [], planted
    assert snapshot(sentinel) == before, planted
