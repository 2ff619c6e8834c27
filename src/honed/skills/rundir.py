"""The run directory of a skill-optimisation run:

    config.yaml                 the resolved config (every default spelled out)
    skills/v0001.md ...         every accepted skill version (v0001 is the initial skill)
    best_skill.md               the best skill by selection score: the deliverable
    steps/step_0001/            per step: rollouts.json, proposed_edits.json, merged_edits.json,
                                ranked_edits.json, candidate_skill.md, apply_report.json,
                                gate.json, step.json
    consolidation/epoch_01/     per epoch, when consolidation is on
    cache/rollouts.jsonl        target answers by (skill hash, environment, item)
    journal.jsonl               every request sent and reply received, before use: what the
                                run spent, and replies a resumed run takes instead of paying
                                again (`honed.models.journal`)
    state.json                  everything `--resume` needs, rewritten after every step
    summary.json                written at the end
    eval/                       `honed skills eval` results

Step and epoch directories are built under a temporary name and renamed into place, and every
file is written atomically, so a crash leaves only whole files; on resume, whatever a crashed
step wrote beyond `state.json` is discarded and the step runs again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from honed.errors import HonedError
from honed.runs.files import atomic_write_json
from honed.runs.rundir import RunDir
from honed.skills.store import SkillStore


class SkillRunDir(RunDir):
    ENTRIES = (
        *RunDir.ENTRIES,
        "skills",
        "best_skill.md",
        "steps",
        "consolidation",
        "cache",
        "journal.jsonl",
        "state.json",
    )

    @property
    def skills(self) -> SkillStore:
        return SkillStore(self.file("skills"))

    @property
    def best_path(self) -> Path:
        return self.file("best_skill.md")

    @property
    def steps(self) -> Path:
        return self.file("steps")

    def step_dir(self, step: int) -> Path:
        return self.file("steps", f"step_{step:04d}")

    def consolidation_dir(self, epoch: int) -> Path:
        return self.file("consolidation", f"epoch_{epoch:02d}")

    @property
    def cache_path(self) -> Path:
        return self.file("cache", "rollouts.jsonl")

    @property
    def journal_path(self) -> Path:
        return self.file("journal.jsonl")

    @property
    def state_path(self) -> Path:
        return self.file("state.json")

    @property
    def eval_dir(self) -> Path:
        return self.file("eval")

    def holds_run(self) -> bool:
        return self.state_path.exists() or self.steps.exists() or self.skills.versions() != []

    def read_state(self) -> dict[str, Any] | None:
        if not self.state_path.is_file():
            return None
        try:
            return json.loads(self.state_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise HonedError(f"{self.state_path} is not valid JSON ({exc}); cannot resume") from exc

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.state_path, state)

    def discard_after(self, step: int, versions: int, epochs_closed: int) -> None:
        """Remove what a crashed step or epoch end wrote beyond the saved state."""
        for number in self.skills.versions():
            if number > versions:
                self.skills.path(number).unlink()
        if self.steps.is_dir():
            for child in self.steps.iterdir():
                # `.step_N.tmp-*`: a step directory whose build was cut short
                if child.name.startswith(".step_") or _number(child.name) > step:
                    _remove(child)
        epochs = self.file("consolidation")
        if epochs.is_dir():
            for child in epochs.iterdir():
                if child.name.startswith(".epoch_") or _number(child.name) > epochs_closed:
                    _remove(child)

    def discard_progress(self) -> None:
        """A fresh start in a directory with an unfinished beginning (no state to resume):
        forget every version, step and summary, but keep the rollout cache, which stays valid,
        and the journal: what was paid for here is counted, and its replies are not paid
        again."""
        for path in (self.file("skills"), self.steps, self.file("consolidation")):
            _remove(path)
        for path in (self.best_path, self.summary_path, self.state_path):
            path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    """Delete a run's file or folder; a link is removed itself, never what it points to."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _number(name: str) -> int:
    digits = name.rpartition("_")[2]
    return int(digits) if digits.isdigit() else -1
