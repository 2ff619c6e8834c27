"""The run directory: everything one training run writes, and how to find it again.

config.yaml        the resolved config (every default spelled out)
metrics.jsonl      one JSON object per step
samples.jsonl      a few prompts / completions / rewards per step
rollouts/          step_NNNNNN.json: a bounded sample of each step's groups (`runs/rollouts.py`)
checkpoints/       step_N/ (a Hugging Face model directory + trainer_state.pt), warmstart/,
                   best/ (`checkpoint.keep_best`: `runs/best.py`)
warmstart.jsonl    the supervised warm-start's loss and held-out checks, written as it runs
summary.json       initial_eval, final_eval, timings
run_state.json     running (with a heartbeat), finished, interrupted or failed (`runs/run_state.py`)
reward.png         reward per step
honed-run.jsonl    what honed wrote here: the only files it writes over or deletes (`runs/files.py`)
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from honed.errors import HonedError
from honed.runs import files, rollouts, run_state
from honed.runs.files import (
    MANIFEST,
    Manifest,
    append_text,
    atomic_write_dir,
    atomic_write_json,
    atomic_write_text,
    confined,
    read_text,
)

STEP_DIR = re.compile(r"^step_(\d+)$")
STATE_FILE = "trainer_state.pt"
# A folder written by a honed older than `honed-run.jsonl` is recognised by its config (the
# resolved config honed writes spells these keys) and one of these beside it.
LAYOUT = ("metrics.jsonl", "summary.json", run_state.FILE, "checkpoints", "state.json", "skills")
CONFIG_KEYS = ("seed", "envs", "run_dir")
MAX_CONFIG_BYTES = 1 << 20


class RunDir:
    """A GRPO run's directory, and the one way honed reads, writes and deletes in it.

    The root is resolved once (`link` keeps the name it was given when that is a link, to say
    so). Every path it hands out has no symbolic link below the root (`file`); what honed
    writes is listed in `honed-run.jsonl` first (`claim`), and only what is listed is written
    over or deleted (`remove`). A non-empty folder without that list is refused unless it is a
    run an older honed wrote, which is then listed (`manifest`).
    """

    # whether this process writes the run (learner processes other than rank 0 only read it)
    read_only = False

    def __init__(self, path: str | Path) -> None:
        given = Path(path)
        self.link = given if given.is_symlink() else None
        self.path = given.resolve() if self.link else given
        self._manifest: Manifest | None = None

    def describe(self) -> str:
        """The run's folder for a person: with the link it was reached through, if any."""
        return f"{self.path} (through the link {self.link})" if self.link else str(self.path)

    def file(self, *parts: str) -> Path:
        return confined(self.path, self.path.joinpath(*parts))

    def relative(self, path: Path) -> str:
        return confined(self.path, path).relative_to(self.path).as_posix()

    @property
    def config_path(self) -> Path:
        return self.file("config.yaml")

    @property
    def metrics_path(self) -> Path:
        return self.file("metrics.jsonl")

    @property
    def samples_path(self) -> Path:
        return self.file("samples.jsonl")

    @property
    def rollouts_dir(self) -> Path:
        return self.file(rollouts.FOLDER)

    def rollouts_path(self, step: int) -> Path:
        return self.file(rollouts.FOLDER, rollouts.step_file(step))

    def write_rollouts(self, record: dict[str, Any], max_bytes: int) -> None:
        """A step's rollout sample (`runs/rollouts.py`), atomically, within `max_bytes`: the one
        place it is written, so a run directory that writes nothing (as `append` writes
        nothing for learner processes other than rank 0) overrides this too."""
        path = self.claim(self.rollouts_path(int(record["step"])))
        rollouts.write_step(path, record, max_bytes)

    @property
    def summary_path(self) -> Path:
        return self.file("summary.json")

    @property
    def checkpoints(self) -> Path:
        return self.file("checkpoints")

    @property
    def warmstart(self) -> Path:
        return self.file("checkpoints", "warmstart")

    @property
    def warmstart_log(self) -> Path:
        return self.file("warmstart.jsonl")

    def create(self) -> None:
        """Make the run's folder (or take the one there: honed's own, or empty) before
        anything is written; a folder that is not honed's is refused, exit code 2."""
        if os.path.lexists(self.path) and not self.path.is_dir():
            raise HonedError(f"{self.path} exists and is not a directory; choose another run dir")
        self.path.mkdir(parents=True, exist_ok=True)
        self.check()
        self.manifest  # noqa: B018 (read, or made: the refusal comes before any write)

    # The files and folders honed writes at a run's top level; `check` refuses a run whose
    # entries are links before anything is written.
    ENTRIES = (
        "config.yaml",
        "metrics.jsonl",
        "samples.jsonl",
        rollouts.FOLDER,
        "summary.json",
        run_state.FILE,
        "checkpoints",
        "reward.png",
        "eval",
        "tensorboard",
        "mlruns",
        "wandb",
        "warmstart_eval.json",
        "warmstart.jsonl",
    )

    def check(self) -> None:
        for name in self.ENTRIES:
            self.file(name)

    # ------------------------------------------------------------ what honed wrote

    @property
    def manifest(self) -> Manifest:
        """The list of what honed wrote here, read once; a folder without one is taken as a
        run only when it is empty or laid out as honed lays out a run (then listed)."""
        if self._manifest is None:
            self._manifest = Manifest.load(self.path) or self._adopt()
        return self._manifest

    def _adopt(self) -> Manifest:
        """The manifest of a new run, or of a run an older honed wrote: every file and folder
        under the names honed writes (`ENTRIES`, and their temporary names), links left out."""
        entries = sorted(os.listdir(self.path)) if self.path.is_dir() else []
        if entries:
            self._refuse_unless_honed(entries)
        manifest = Manifest(self.path)
        for name in entries:
            self._list(manifest, self.path / name)
        manifest.save()
        return manifest

    def _honed_name(self, name: str) -> bool:
        return name in self.ENTRIES or any(
            name.startswith((f".{entry}.tmp-", f".{entry}.old-")) for entry in self.ENTRIES
        )

    def _refuse_unless_honed(self, entries: list[str]) -> None:
        foreign = [name for name in entries if not self._honed_name(name)]
        layout = "config.yaml" in entries and any(name in entries for name in LAYOUT)
        if not foreign and layout and self._honed_config():
            return
        held = f" and holds {', '.join(foreign[:3])}" + (", ..." if len(foreign) > 3 else "")
        raise HonedError(
            f"{self.describe()} is not empty and is not a honed run (no {MANIFEST}"
            f"{held if foreign else ''}); honed writes runs only into a new or empty folder or "
            "one of its own runs: give another --run-dir"
        )

    def _honed_config(self) -> bool:
        """Whether config.yaml is a config honed wrote (its resolved config spells
        `CONFIG_KEYS`)."""
        path = self.config_path
        try:
            if os.lstat(path).st_size > MAX_CONFIG_BYTES:
                return False
            data = yaml.safe_load(read_text(path))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return False
        return isinstance(data, dict) and all(key in data for key in CONFIG_KEYS)

    def _list(self, manifest: Manifest, path: Path) -> None:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return
        manifest.files.add(path.relative_to(self.path).as_posix())
        if stat.S_ISDIR(mode):
            for name in sorted(os.listdir(path)):
                self._list(manifest, path / name)

    def owns(self, rel: str) -> bool:
        """Whether honed wrote `rel`, asking the file again before saying no (another
        `RunDir` of this process, or a learner process, may have listed it since)."""
        if self.manifest.owns(rel):
            return True
        self._manifest = Manifest.load(self.path) or self._manifest
        return self.manifest.owns(rel)

    def claim(self, path: Path, tree: bool = False) -> Path:
        """`path`, which honed is about to write (a file, or with `tree` a folder built whole
        or by a library), listed in the manifest first; refused when something honed did not
        write is there, or a link is on the way."""
        rel = self.relative(path)
        if os.path.lexists(path) and not self.owns(rel):
            raise HonedError(
                f"{path} was not written by honed (it is not listed in {self.path / MANIFEST}); "
                "honed writes over and deletes only what it wrote: move it away"
            )
        self.manifest.record(rel, tree)
        return path

    def remove(self, path: Path) -> None:
        """Delete a file or folder honed wrote (all of it, or nothing when any part of it was
        not honed's, which is named; exit code 2)."""
        plan: list[tuple[Path, Callable[[Path], None]]] = []
        self._plan_removal(path, plan)
        for target, delete in plan:
            delete(target)

    def _plan_removal(self, path: Path, plan: list[tuple[Path, Callable[[Path], None]]]) -> None:
        rel = self.relative(path)  # a link on the way, or at `path`, is refused here
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not self.owns(rel):
            raise HonedError(
                f"{path} was not written by honed (it is not listed in {self.path / MANIFEST}); "
                "honed deletes only what it wrote: move it away"
            )
        manifest = self.manifest
        if stat.S_ISDIR(mode) and rel not in manifest.trees and not manifest.in_tree(rel):
            for name in sorted(os.listdir(path)):
                self._plan_removal(path / name, plan)
            plan.append((path, os.rmdir))
        else:
            plan.append((path, files.remove))

    def clear(self) -> None:
        """`--overwrite`: delete everything honed wrote here (what it did not write stays)."""
        if not self.path.is_dir():
            return
        self.check()
        for name in sorted(os.listdir(self.path)):
            if name != MANIFEST and self.owns(name):
                self.remove(self.path / name)

    def write_config(self, text: str) -> None:
        atomic_write_text(self.claim(self.config_path), text)

    # ------------------------------------------------------------ append-only logs

    def append(self, path: Path, record: dict[str, Any]) -> None:
        append_text(self.claim(path), json.dumps(record) + "\n")

    def restart_log(self, path: Path) -> None:
        """Start a log again, empty, as a new file renamed over the old one: a reader that
        tells files apart by their inode (`honed view`) sees a new log, never the old rows
        followed by the new, as it could if the old file were deleted and its inode reused."""
        atomic_write_text(self.claim(path), "")

    def read_jsonl(self, path: Path) -> list[dict[str, Any]]:
        try:
            text = read_text(confined(self.path, path))
        except FileNotFoundError:
            return []
        rows = []
        for line in text.splitlines():
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut short by a crash ends the readable log
        return rows

    def truncate_logs(self, last_step: int, keep_start: bool = True) -> None:
        """Drop log lines from steps after `last_step` (on resume, the checkpoint's step).
        Without `keep_start`, a new run's, every line goes, step 0's initial evaluation too."""
        for path in (self.metrics_path, self.samples_path):
            if not path.exists():
                continue
            rows = (
                [r for r in self.read_jsonl(path) if int(r.get("step", 0)) <= last_step]
                if keep_start
                else []
            )
            atomic_write_text(self.claim(path), "".join(json.dumps(r) + "\n" for r in rows))
        if self.rollouts_dir.is_dir():
            for name in sorted(os.listdir(self.rollouts_dir)):
                step = rollouts.step_of(name)
                if step is not None and (not keep_start or step > last_step):
                    self.remove(self.rollouts_dir / name)

    # ------------------------------------------------------------ checkpoints

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        if not self.checkpoints.is_dir():
            return []
        found = []
        for name in os.listdir(self.checkpoints):
            m = STEP_DIR.match(name)
            if m and self.file("checkpoints", name, STATE_FILE).is_file():
                found.append((int(m.group(1)), self.checkpoints / name))
        return sorted(found)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        found = self.step_checkpoints()
        return found[-1] if found else None

    def has_steps(self) -> bool:
        """Whether GRPO has logged or checkpointed a step here: a folder holding only a
        warm-start (`honed sft`) has none, and `honed train` may start in it."""
        return self.metrics_path.exists() or self.latest_checkpoint() is not None

    def write_checkpoint(self, path: Path, fill: Callable[[Path], None]) -> None:
        """A checkpoint folder (`checkpoints/step_N`, `checkpoints/warmstart`), built whole
        under a temporary name and renamed into place."""
        atomic_write_dir(self.claim(path, tree=True), fill)

    def prune(self, keep_last: int) -> None:
        for _, path in self.step_checkpoints()[:-keep_last]:
            self.remove(path)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.claim(self.summary_path), summary)

    def read_summary(self) -> dict[str, Any]:
        try:
            return json.loads(read_text(self.summary_path))
        except FileNotFoundError:
            return {}


class ReadOnlyRunDir(RunDir):
    """A run directory as the learner processes other than rank 0 see it: they read it (the
    checkpoint to resume from) and write nothing, since rank 0 writes everything once."""

    read_only = True

    def create(self) -> None:
        self.check()

    def write_config(self, text: str) -> None:
        pass

    def append(self, path: Path, record: dict[str, Any]) -> None:
        pass

    def restart_log(self, path: Path) -> None:
        pass

    def write_rollouts(self, record: dict[str, Any], max_bytes: int) -> None:
        pass

    def remove(self, path: Path) -> None:
        pass

    def truncate_logs(self, last_step: int, keep_start: bool = True) -> None:
        pass

    def prune(self, keep_last: int) -> None:
        pass

    def write_summary(self, summary: dict[str, Any]) -> None:
        pass
