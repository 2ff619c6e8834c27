"""The run directory: everything one training run writes, and how to find it again.

config.yaml        the resolved config (every default spelled out)
metrics.jsonl      one JSON object per step
samples.jsonl      a few prompts / completions / rewards per step
rollouts/          step_NNNNNN.json: a bounded sample of each step's groups (`runs/rollouts.py`)
checkpoints/       step_N/ (a Hugging Face model directory + trainer_state.pt), warmstart/
summary.json       initial_eval, final_eval, timings
run_state.json     running (with a heartbeat), finished, interrupted or failed (`runs/run_state.py`)
reward.png         reward per step
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from honed.runs import rollouts, run_state
from honed.runs.files import atomic_write_json, atomic_write_text, inside

STEP_DIR = re.compile(r"^step_(\d+)$")
STATE_FILE = "trainer_state.pt"


class RunDir:
    """A GRPO run's directory. Every path it hands out has been checked to stay inside it
    (`file`), so no read, write or delete through it follows a link out of the run."""

    # whether this process writes the run (learner processes other than rank 0 only read it)
    read_only = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def file(self, *parts: str) -> Path:
        return inside(self.path, self.path.joinpath(*parts))

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
        rollouts.write_step(self.rollouts_path(int(record["step"])), record, max_bytes)

    @property
    def summary_path(self) -> Path:
        return self.file("summary.json")

    @property
    def checkpoints(self) -> Path:
        return self.file("checkpoints")

    @property
    def warmstart(self) -> Path:
        return self.file("checkpoints", "warmstart")

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.check()

    # The files and folders honed writes at a run's top level; `check` refuses a run whose
    # entries link outside it before anything is written.
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
        "warmstart_eval.json",
    )

    def check(self) -> None:
        for name in self.ENTRIES:
            self.file(name)

    def write_config(self, text: str) -> None:
        atomic_write_text(self.config_path, text)

    # ------------------------------------------------------------ append-only logs

    def append(self, path: Path, record: dict[str, Any]) -> None:
        with path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

    def read_jsonl(self, path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
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
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
        if self.rollouts_dir.is_dir():
            for child in self.rollouts_dir.iterdir():
                step = rollouts.step_of(child.name)
                if step is not None and (not keep_start or step > last_step):
                    child.unlink()  # a link is removed itself, never what it points to

    # ------------------------------------------------------------ checkpoints

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        if not self.checkpoints.is_dir():
            return []
        found = []
        for child in self.checkpoints.iterdir():
            m = STEP_DIR.match(child.name)
            if m and inside(self.path, child / STATE_FILE).is_file():
                found.append((int(m.group(1)), child))
        return sorted(found)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        found = self.step_checkpoints()
        return found[-1] if found else None

    def prune(self, keep_last: int) -> None:
        for _, path in self.step_checkpoints()[:-keep_last]:
            if path.is_symlink():  # a link inside the run: drop the link, never its target
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.summary_path, summary)

    def read_summary(self) -> dict[str, Any]:
        if not self.summary_path.exists():
            return {}
        return json.loads(self.summary_path.read_text())


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

    def write_rollouts(self, record: dict[str, Any], max_bytes: int) -> None:
        pass

    def truncate_logs(self, last_step: int, keep_start: bool = True) -> None:
        pass

    def prune(self, keep_last: int) -> None:
        pass

    def write_summary(self, summary: dict[str, Any]) -> None:
        pass
