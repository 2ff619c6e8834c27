"""A step's rollouts as the viewer serves them, in one shape for both loops.

GRPO runs keep a sample per step in `rollouts/step_N.json` (`honed.runs.rollouts`). Skill runs
keep every target answer of a step in `steps/step_N/rollouts.json`; here they become groups of
the same shape (one per item, a trajectory per answer: the soft score as the reward, the hard
score as success, the expected answer in the info), so the page shows either the same way.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

from honed.runs import rollouts as grpo_rollouts
from honed.view.catalog import NotFound, RunFiles

SKILL_STEP = re.compile(r"^step_(\d+)$")


def steps(run: RunFiles, run_kind: str) -> list[int]:
    """The steps whose rollouts the run kept, in order."""
    found: list[int] = []
    try:
        folder = run.path("steps" if run_kind == "skills" else grpo_rollouts.FOLDER)
    except NotFound:
        return []
    if not folder.is_dir():
        return []
    for child in folder.iterdir():
        if run_kind == "skills":
            m = SKILL_STEP.match(child.name)
            number = int(m.group(1)) if m else None
        else:
            number = grpo_rollouts.step_of(child.name)
        if number is not None:
            found.append(number)
    return sorted(found)


def step_record(run: RunFiles, run_kind: str, step: int) -> dict[str, Any]:
    """The step's record; `NotFound` when the run kept none for it."""
    if run_kind == "skills":
        answers = run.json("steps", f"step_{step:04d}", "rollouts.json")
        if not isinstance(answers, list):
            raise NotFound(f"step {step}")
        return {"step": step, "groups": skill_groups(answers), "groups_in_step": None}
    record = run.json(grpo_rollouts.FOLDER, grpo_rollouts.step_file(step))
    if not isinstance(record, dict):
        raise NotFound(f"step {step}")
    return record


def skill_groups(answers: list[Any]) -> list[dict[str, Any]]:
    """The target's answers of a skill step as groups, one per item, in first-seen order."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for answer in answers:
        if not isinstance(answer, dict):
            continue
        key = (str(answer.get("env", "")), str(answer.get("item_key", "")))
        group = groups.setdefault(
            key,
            {"env": key[0], "item": key[1], "level": None, "filtered": False, "trajectories": []},
        )
        hard, soft = answer.get("hard"), answer.get("soft")
        info = {
            k: v
            for k, v in answer.items()
            if k not in ("env", "item_key", "prompt", "reply", "hard", "soft")
        }
        group["trajectories"].append(
            {
                "reward": soft,
                "success": hard,
                "advantage": None,
                "components": {"hard": hard, "soft": soft},
                "length": None,
                "truncated": False,
                "prompt": str(answer.get("prompt", "")),
                "completion": str(answer.get("reply", "")),
                "info": info,
            }
        )
    return list(groups.values())


def curriculum_at(run: RunFiles, step: int | None) -> dict[str, Any]:
    """The curriculum snapshot kept with the latest GRPO step at or before `step` (the last
    one when `step` is None), and the steps that have one."""
    kept = steps(run, "grpo")
    out: dict[str, Any] = {"steps": kept, "step": None, "curriculum": {}}
    if not kept:
        return out
    at = kept[-1] if step is None else kept[max(0, bisect.bisect_right(kept, step) - 1)]
    record = run.json(grpo_rollouts.FOLDER, grpo_rollouts.step_file(at), default={})
    out["step"] = at
    out["curriculum"] = record.get("curriculum", {}) if isinstance(record, dict) else {}
    return out
