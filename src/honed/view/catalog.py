"""The runs under the viewer's root, and the one way a request reaches a file of theirs.

A request names a run by its path relative to the root (`"."` when the root is itself a run)
and a file by a fixed name the viewer chooses; `Catalog.run` and `RunFiles.path` refuse anything
that is not below the root and the run (`..`, absolute paths, encoded separators) or has a
symbolic link on its way below the root (`honed.runs.files.confined`), answering as if it did
not exist, and files are opened without following a link in their place. Nothing here opens a
file for writing.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from honed.errors import HonedError
from honed.runs import run_state
from honed.runs.files import confined, read_bytes
from honed.yaml_data import load_yaml

# A folder holding `config.yaml` and one of these is a run.
MARKERS = (
    "metrics.jsonl",
    "warmstart.jsonl",
    "state.json",
    run_state.FILE,
    "summary.json",
    "checkpoints",
)
# A run's own folders, never searched for runs inside it.
RUN_FOLDERS = frozenset(
    {"checkpoints", "rollouts", "steps", "skills", "cache", "consolidation", "tensorboard", "eval"}
)
MAX_DEPTH = 4
# Largest file the viewer reads; a bigger one is reported instead of read.
MAX_FILE_BYTES = 64 * 1024 * 1024
# A run without `run_state.json` (written before honed kept one) counts as running while it
# wrote within this long, or three of its step intervals.
ACTIVE_SECONDS = 120.0


class NotFound(Exception):
    """What the viewer answers for a run or file it will not serve (404), outside or absent."""


def is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file() and any((path / m).exists() for m in MARKERS)


def within(root: Path, path: Path) -> bool:
    """Whether `path` exists below `root` (or is it) with no symbolic link on its way."""
    try:
        confined(root, path)
    except HonedError:
        return False
    return os.path.lexists(path)


class RunFiles:
    """The files of one run, each resolved and confined to it before it is read."""

    def __init__(self, root: Path, run_id: str, path: Path) -> None:
        self.root, self.id, self.dir = root, run_id, path

    def path(self, *parts: str) -> Path:
        """A file or folder of the run that exists, with no link on its way from the root."""
        path = self.dir.joinpath(*parts)
        if not within(self.root, path):
            raise NotFound("/".join(parts))
        return path

    def exists(self, *parts: str) -> bool:
        try:
            self.path(*parts)
        except NotFound:
            return False
        return True

    def text(self, *parts: str) -> str:
        """A file's text as valid UTF-8 (undecodable bytes replaced), size-checked."""
        path = self.path(*parts)
        if not path.is_file():
            raise NotFound("/".join(parts))
        if path.stat().st_size > MAX_FILE_BYTES:
            raise HonedError(f"{'/'.join(parts)} is over {MAX_FILE_BYTES >> 20} MiB; not read")
        try:
            return read_bytes(path).decode("utf-8", errors="replace")
        except (OSError, HonedError):
            raise NotFound("/".join(parts)) from None

    def json(self, *parts: str, default: Any = None) -> Any:
        """A JSON file's value, or `default` when it is absent or not JSON (a file being
        replaced is read whole or not at all: honed writes them atomically)."""
        try:
            return finite(json.loads(self.text(*parts)))
        except (NotFound, ValueError):
            return default

    def mtime(self, *parts: str) -> float:
        try:
            return self.path(*parts).stat().st_mtime
        except (NotFound, OSError):
            return 0.0


def finite(value: Any) -> Any:
    """A JSON value with NaN and infinities as None (JSON has no words for them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


class Catalog:
    """The runs under `root` (the root itself when it is a run), found again on every call so
    that runs started after the viewer appear."""

    def __init__(self, root: str | Path) -> None:
        root = Path(root)
        if not root.is_dir():
            raise HonedError(f"{root} is not a directory; give a run directory or a folder of runs")
        self.root = root.resolve()

    def run_ids(self) -> list[str]:
        """Relative paths (POSIX) of every run under the root, not following links out of it."""
        found: list[str] = []
        for folder, dirs, _files in os.walk(self.root, followlinks=False):
            here = Path(folder)
            depth = len(here.relative_to(self.root).parts)
            if is_run(here):
                found.append(here.relative_to(self.root).as_posix())
                dirs[:] = [d for d in dirs if d not in RUN_FOLDERS]
            if depth >= MAX_DEPTH:
                dirs[:] = []
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        return sorted(found)

    def run(self, run_id: str) -> RunFiles:
        """The run `run_id` names; `NotFound` for anything else (traversal, links out, a
        folder that is not a run)."""
        if not run_id or "\x00" in run_id or "\\" in run_id:
            raise NotFound(run_id)
        rel = PurePosixPath(run_id)
        if rel.is_absolute() or ".." in rel.parts:
            raise NotFound(run_id)
        path = self.root.joinpath(*rel.parts) if rel.parts else self.root
        if not within(self.root, path) or not path.is_dir() or not is_run(path):
            raise NotFound(run_id)
        return RunFiles(self.root, rel.as_posix(), path)


def read_config(run: RunFiles) -> dict[str, Any]:
    """The run's resolved config (YAML, read without constructing any object), or {}."""
    try:
        data = load_yaml(run.text("config.yaml"), "config.yaml")
    except (NotFound, HonedError):
        return {}
    return data if isinstance(data, dict) else {}


def kind(run: RunFiles, config: dict[str, Any]) -> str:
    """`skills` for a skill-optimisation run, `grpo` for a weights run."""
    if "target" in config or "reflector" in config or run.exists("state.json"):
        return "skills"
    return "grpo"


@dataclass
class Status:
    state: str  # running, finished, interrupted, failed or stale
    updated: float  # the run's last heartbeat or write, Unix seconds
    error: str | None = None  # what ended a failed run, one line


def status(run: RunFiles, times: list[float], now: float | None = None) -> Status:
    """What the run says it is doing in `run_state.json` (`honed.runs.run_state`): running,
    finished, interrupted, failed, or stale when it says running but its heartbeat stopped
    (killed outright). A run written before that file is judged by its files' times."""
    record = run.json(run_state.FILE)
    if isinstance(record, dict) and record.get("state") in (*run_state.ENDED, "running"):
        heartbeat = record.get("heartbeat")
        updated = float(heartbeat) if isinstance(heartbeat, int | float) else 0.0
        error = record.get("error") if record["state"] == "failed" else None
        return Status(
            run_state.judge(record, now), updated, error if isinstance(error, str) else None
        )
    return inferred_status(run, times, now)


def inferred_status(run: RunFiles, times: list[float], now: float | None = None) -> Status:
    """Finished when `summary.json` is the run's last write; running while it wrote lately
    (within `ACTIVE_SECONDS`, or three of its recent step intervals if longer); otherwise
    interrupted (stopped without a summary, or resumed and stopped again)."""
    now = time.time() if now is None else now
    last = max(run.mtime("metrics.jsonl"), run.mtime("state.json"), run.mtime("config.yaml"))
    summary = run.mtime("summary.json")
    if summary and summary >= last:
        return Status("finished", summary)
    gaps = [b - a for a, b in itertools.pairwise(times[-6:]) if b > a]
    window = max(ACTIVE_SECONDS, 3 * statistics.median(gaps)) if gaps else ACTIVE_SECONDS
    return Status("running" if now - last < window else "interrupted", last)
