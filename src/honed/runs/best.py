"""`checkpoint.keep_best`: the checkpoint whose held-out evaluation was the best so far, kept
as `checkpoints/best` beside the latest ones.

Held-out accuracy moves by several points between evaluations of one run, and the last
checkpoint is often not the best one; `keep_last` prunes the better ones away. So after each
evaluation during training (`eval.every`, and the final one) whose metric beats every earlier
one, that step's checkpoint is also kept under `checkpoints/best`, with `best.json` naming the
step, the metric and its value. Only checkpoints of trained steps compete: the evaluation
before training is the baseline, not a candidate.

- **Written whole, or not at all**, as every checkpoint (`RunDir.write_checkpoint`). Its files
  are hard links to the step's (a checkpoint's files are never written in place, so sharing
  them is safe and costs no disk), copies where the file system has no hard links.
- **The best so far survives a resume** through `best.json` itself, not the trainer state: the
  final evaluation comes after the last checkpoint is written. A best kept from a step after
  the one resumed from (a run resumed from an older checkpoint by hand) no longer counts, nor
  does one kept for another metric; the next evaluation then replaces it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from honed.errors import HonedError
from honed.runs.files import atomic_write_json, link_tree, read_text
from honed.runs.rundir import RunDir

BEST_DIR = "best"
BEST_FILE = "best.json"


class BestCheckpoint:
    """The best evaluation of a run so far by `metric` (higher is better; None: keep none)."""

    def __init__(self, run: RunDir, metric: str | None) -> None:
        self.run = run
        self.metric = metric
        self.step: int | None = None
        self.value: float | None = None
        self.pending = False  # the latest evaluation is the best: keep its step's checkpoint

    @property
    def path(self) -> Path:
        return self.run.checkpoints / BEST_DIR

    def restore(self, step: int) -> None:
        """The best kept by the run being resumed at `step`, if it still counts."""
        self.step = self.value = None
        self.pending = False
        marker = self.path / BEST_FILE
        if self.metric is None or not marker.is_file():
            return
        try:
            kept = json.loads(read_text(marker))  # a link there is refused, as everywhere
            if kept["metric"] == self.metric and int(kept["step"]) <= step:
                self.step, self.value = int(kept["step"]), float(kept["value"])
        except (ValueError, KeyError, TypeError):
            return  # unreadable: the next evaluation replaces it

    def check(self, results: Mapping[str, float]) -> None:
        """Refuse a metric the evaluation does not give, at the first evaluation (before
        training), naming those it does."""
        if self.metric is not None and self.metric not in results:
            known = ", ".join(sorted(results))
            raise HonedError(
                f"checkpoint.keep_best: the evaluation gives no metric {self.metric!r}; it "
                f"gives {known}"
            )

    def consider(self, step: int, results: Mapping[str, float]) -> bool:
        """Whether the evaluation of `step` is the best so far (its checkpoint is then due)."""
        if self.metric is None:
            return False
        value = float(results[self.metric])
        if self.value is None or value > self.value:
            self.step, self.value, self.pending = step, value, True
        return self.pending

    def keep(self, checkpoint: Path, write: bool = True) -> None:
        """Keep `checkpoint` (the best step's, just written) as `checkpoints/best`; every
        learner process calls this, and the one that writes the run (`write`) writes it."""
        if not self.pending:
            return
        self.pending = False
        if not write:
            return
        marker = {"step": self.step, "metric": self.metric, "value": self.value}

        def fill(tmp: Path) -> None:
            link_tree(checkpoint, tmp)
            atomic_write_json(tmp / BEST_FILE, marker)

        self.run.write_checkpoint(self.path, fill)

    def summary(self) -> dict[str, Any] | None:
        if self.step is None:
            return None
        return {
            "path": str(self.path),
            "step": self.step,
            "metric": self.metric,
            "value": self.value,
        }
