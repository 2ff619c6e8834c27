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
import os
from pathlib import Path
from typing import Any

from honed.errors import HonedError
from honed.runs.files import atomic_write_json, read_text
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
        return SkillStore(self.file("skills"), claim=self.claim)

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
        try:
            return json.loads(read_text(self.state_path))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise HonedError(f"{self.state_path} is not valid JSON ({exc}); cannot resume") from exc

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.claim(self.state_path), state)

    def discard_after(self, step: int, versions: int, epochs_closed: int) -> None:
        """Remove what a crashed step or epoch end wrote beyond the saved state."""
        for number in self.skills.versions():
            if number > versions:
                self.remove(self.skills.path(number))
        for folder, prefix, last in (
            (self.steps, ".step_", step),
            (self.file("consolidation"), ".epoch_", epochs_closed),
        ):
            if folder.is_dir():
                for name in sorted(os.listdir(folder)):
                    # `.step_N.tmp-*`: a step directory whose build was cut short
                    if name.startswith(prefix) or _number(name) > last:
                        self.remove(folder / name)

    def discard_progress(self) -> None:
        """A fresh start in a directory with an unfinished beginning (no state to resume):
        forget every version, step and summary, but keep the rollout cache, which stays valid,
        and the journal: what was paid for here is counted, and its replies are not paid
        again."""
        for path in (self.file("skills"), self.steps, self.file("consolidation")):
            self.remove(path)
        for path in (self.best_path, self.summary_path, self.state_path):
            self.remove(path)


def _number(name: str) -> int:
    digits = name.rpartition("_")[2]
    return int(digits) if digits.isdigit() else -1
