"""What `honed skills train --resume` takes from the checkpoint and what from the config.

The checkpoint (`state.json`) supplies the *state*: the step reached, the skill versions, the
scores, the sampler, the step buffer, the edit budget's position. The config in force supplies
the *settings*: a resumed run with another edit budget or number of steps follows the new
config from the next step on, exactly as a run started with it would at those steps. Each
changed setting is reported in one line (`edit_budget.mode: cosine -> linear`). A run saved
before `optimizer` and `schedule` were renamed `reflector` and `edit_budget` is compared under
the new names.

A few settings cannot apply to a run in progress, and changing one stops the resume (exit code
2) before anything is written, naming the key:

- `skill.init`: the run's initial skill is version 1, already scored and built upon;
- the environments (`envs`: how many, their `name` and `type`): the sampler's state and every
  recorded score belong to them;
- the selection items (`gate.split`, `gate.num_items`): the current and best skills' scores,
  which every later candidate is compared with, were measured on them;
- the steps per epoch (`train.steps_per_epoch`, or `train.batch_size` when that derives it),
  once a step is done: the steps so far were cut into epochs (step buffer, consolidation);
- a length shorter than the steps already done (`train.max_steps`, `train.epochs`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from honed.config import LoggingConfig
from honed.errors import renamed_keys
from honed.runs.lifecycle import Change, changes_environments, refuse, resume_changes
from honed.skills.config import RENAMED_KEYS, BudgetConfig

__all__ = ["Change", "check_changes", "config_changes"]

# What honed wrote before these edit-budget keys existed: a run started then used these values.
SCHEDULE_BEFORE_ANCHOR = {"anchor": "both", "rounding": "half_up"}


def config_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[Change]:
    """The settings that differ between the run's config (None: unknown) and the one in force,
    as for GRPO (`honed.runs.lifecycle.resume_changes`). A run's config saved with the keys'
    earlier names (`optimizer`, `schedule`) is read under the new ones, silently: the run's own
    file is no one's to fix. A run started before the edit budget had `anchor` and `rounding`,
    or before the skill loop had a `logging` or `budget` section (or `budget.require_usage`),
    is compared as having used what honed did then."""
    if not isinstance(before, Mapping):
        return []
    with suppress(ValueError):  # both names: honed never saved such a config; compare it as is
        before = renamed_keys(before, RENAMED_KEYS, warn=False)
    edit_budget = before.get("edit_budget")
    if isinstance(edit_budget, Mapping) and "anchor" not in edit_budget:
        before = {**before, "edit_budget": {**edit_budget, **SCHEDULE_BEFORE_ANCHOR}}
    if "logging" not in before and "logging" in after:
        before = {**before, "logging": LoggingConfig().model_dump(mode="json")}
    if "budget" not in before and "budget" in after:  # no section, no caps: as honed did then
        before = {**before, "budget": BudgetConfig().model_dump(mode="json")}
    budget = before.get("budget")
    if isinstance(budget, Mapping) and "require_usage" not in budget:  # estimates were all
        before = {**before, "budget": {**budget, "require_usage": False}}
    return resume_changes(before, after)


def check_changes(
    changes: list[Change],
    steps_done: int,
    steps_per_epoch: tuple[int | None, int],
    total_steps: int,
) -> None:
    """Refuse (HonedError, exit code 2) a change that cannot apply to the run in progress.

    `steps_per_epoch` is (the run's, the config's) number of steps per epoch, the run's None in
    a state written before honed recorded it; `total_steps` is the config's run length.
    """
    for change in changes:
        reason = _fixed(change.key)
        if reason:
            refuse(change, reason)
    before, after = steps_per_epoch
    if steps_done and before is not None and before != after:
        refuse(
            _cause(changes, ("train.steps_per_epoch", "train.batch_size"))
            or Change("train.steps_per_epoch", before, after),  # the training data changed
            f"it makes epochs of {after} steps instead of {before}, and the run's {steps_done} "
            f"steps so far were cut into epochs of {before} (step buffer, consolidation); set "
            f"train.steps_per_epoch: {before} to keep them",
        )
    if total_steps < steps_done:
        refuse(
            _cause(
                changes,
                ("train.max_steps", "train.epochs", "train.steps_per_epoch", "train.batch_size"),
            )
            or "the run's length",
            f"the config in force makes a run of {total_steps} steps and this one has done "
            f"{steps_done}",
        )


def _fixed(key: str) -> str | None:
    """Why the setting `key` cannot change in a run in progress, or None if it can."""
    if key == "skill.init":
        return "the run's initial skill is version 1, already scored and built upon"
    if changes_environments(key):
        return "the sampler's state and every recorded score belong to the run's environments"
    if key in ("gate.split", "gate.num_items"):
        return (
            "the current and best skills' scores, which every candidate is compared with, were "
            "measured on the run's selection items"
        )
    return None


def _cause(changes: list[Change], keys: tuple[str, ...]) -> Change | None:
    """The first change among `keys` or the environments' arguments: the settings a derived
    value (steps per epoch, run length) comes from."""
    for change in changes:
        if change.key in keys or (change.key.startswith("envs.") and ".args." in change.key):
            return change
    return None
