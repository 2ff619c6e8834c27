"""The configuration of a skill-optimisation run (`honed skills train CONFIG`).

Loaded with the same YAML + `-o dotted.key=value` machinery as the GRPO config
(`honed.config.load_model`), so unknown keys are one-line errors naming the closest valid key.
Environments are configured exactly as for GRPO (`honed.config.EnvConfig`); the two chat models
(the `target`, which reads the skill, and the `reflector`, which reflects on the target's
attempts and proposes edits) are `honed.models.chat.ChatModelConfig`s.

`reflector` and `edit_budget` were called `optimizer` and `schedule` before; the old keys still
load, with a deprecation warning (`SkillsConfig._renamed`), and messages about them name the key
as the user's config spells it (`SkillsConfig.key`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidatorFunctionWrapHandler, model_validator

from honed.config import (
    CurriculumConfig,
    EnvConfig,
    LoggingConfig,
    Strict,
    check_envs,
    load_model,
)
from honed.errors import HonedError, renamed_keys, warn_renamed
from honed.models.chat import ChatModelConfig
from honed.skills.schedule import Anchor, LRScheduler, Rounding, ScheduleMode, build_scheduler
from honed.types import Split

# `skill.init` is read as a file when it is one line ending in one of these.
SKILL_FILE_SUFFIXES = (".md", ".markdown", ".txt")

DEFAULT_PREAMBLE = (
    "The skill document below holds guidance learned from earlier attempts at tasks like this "
    "one. Follow it when you answer."
)


class SkillConfig(Strict):
    """The skill document the run starts from, and how the target sees it."""

    init: str = Field(
        "",
        description="The initial skill: a path (relative to the working directory) when it is "
        "one line ending in `.md`, `.markdown` or `.txt`, else the skill text itself; empty: "
        "an empty skill, which measures the bare model.",
    )
    preamble: str = Field(
        DEFAULT_PREAMBLE,
        description="Put before the skill in the target's system prompt: the prompt is "
        "`preamble`, a blank line, then the skill (no system prompt at all while the skill is "
        "empty).",
    )
    max_chars: int = Field(
        20_000,
        ge=1,
        description="A candidate skill longer than this is rejected before the gate (the "
        "reason goes to `gate.json` and the step buffer), so that the target keeps room for "
        "the task in its context and a run does not die on the next call's HTTP 400; an "
        "initial skill longer than this is an error.",
    )
    max_edit_chars: int = Field(
        2_000,
        ge=1,
        description="An edit whose content is longer than this is skipped "
        "(`apply_report.json` says why).",
    )

    def initial_text(self) -> str:
        init = self.init
        if "\n" not in init and init.strip().lower().endswith(SKILL_FILE_SUFFIXES):
            path = Path(init.strip())
            if not path.is_file():
                raise HonedError(f"skill.init names a file that does not exist: {path}")
            try:
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise HonedError(f"cannot read skill.init file {path}: {exc}") from exc
        return init


class TrainConfig(Strict):
    """The outer loop: epochs of steps, each step a batch of training items whose attempts are
    reflected on minibatch by minibatch (`honed.skills.merge` combines and orders the
    proposals)."""

    epochs: int = Field(2, ge=1, description="Passes over the training items.")
    batch_size: int = Field(
        16, ge=1, description="Training items a step draws through the sampler."
    )
    minibatch_size: int = Field(
        8, ge=1, description="Attempts per reflection call (a step makes one per minibatch)."
    )
    failure_only: bool = Field(
        False,
        description="Reflect on failures (hard score below 1) only; otherwise on successes too.",
    )
    steps_per_epoch: int | None = Field(
        None,
        ge=1,
        description="Steps per epoch; `null`: training items / `batch_size`, rounded up.",
    )
    max_steps: int | None = Field(
        None, ge=1, description="Cap on the run's steps; `null`: `epochs` decide."
    )
    merge: Literal["deterministic", "llm"] = Field(
        "deterministic",
        description="How a step's proposals are combined: `deterministic`, or `llm` (one more "
        "reflector call per step).",
    )
    rank: Literal["llm", "deterministic"] = Field(
        "llm",
        description="How the merged edits are ordered when there are more than the budget: "
        "`llm` (a reflector call) or `deterministic`.",
    )
    max_evidence_chars: int = Field(
        2_000,
        ge=100,
        description="The target's replies (and reasoning) shown to the reflector are cut to "
        "this many characters: head, a marker saying how much was left out, tail.",
    )
    show_reasoning: bool = Field(
        False,
        description="Also show the reflector a reasoning model's reasoning (docs/skills.md, "
        '"Reasoning models").',
    )
    patience: int | None = Field(
        None,
        ge=1,
        description="Stop after this many steps in a row without an accepted candidate; "
        "`null`: never.",
    )
    max_stored_reply_chars: int = Field(
        100_000,
        ge=1_000,
        description="Every reply (and reasoning) a server sends is cut to this many characters "
        "as it arrives, head and tail around a marker: what is scored, cached, journaled and "
        "written to rollouts.json, so one runaway reply cannot fill the run directory.",
    )


class EditBudgetConfig(Strict):
    """The edit budget per step: how many edits a step may apply, following a schedule
    (`honed.skills.schedule`).

    The defaults give SkillOpt's budgets; `anchor: both` with `rounding: half_up` gives the
    schedule of honed before it matched SkillOpt, and `warmup_steps` is honed's own.
    """

    mode: ScheduleMode = Field(
        "constant",
        description="How the budget moves over the run: `constant` (`max_lr`), `linear` or "
        "`cosine` (from `max_lr` down to `min_lr`), or `autonomous` (no cap: the reflector "
        "says how many edits to keep).",
    )
    max_lr: int = Field(
        4,
        ge=1,
        description="The largest budget, in edits; also caps the edits any single reflection "
        "may propose.",
    )
    min_lr: int = Field(
        2,
        ge=0,
        description="The smallest budget (`constant` uses it only to warm up from).",
    )
    total_steps: int | None = Field(
        None,
        ge=1,
        description="Steps to anneal over, later steps holding the last value; `null`: the "
        "run's steps.",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Climb from `min_lr` to `max_lr` over the first steps, then follow the "
        'schedule (docs/skills.md, "Edit-budget schedules").',
    )
    anchor: Anchor = Field(
        "last",
        description="`last` (SkillOpt: only the last step is pinned to `min_lr`, step 1 is "
        "already one step down) or `both` (step 1 gets `max_lr`, step T `min_lr`).",
    )
    rounding: Rounding = Field(
        "half_even",
        description="`half_even` (Python's `round()`, SkillOpt: 2.5 → 2) or `half_up` (2.5 → 3).",
    )

    def build(self, run_steps: int) -> LRScheduler:
        """The budget's scheduler, annealing over `total_steps` or else over the run's
        `run_steps`."""
        return build_scheduler(
            self.mode,
            self.max_lr,
            self.min_lr,
            self.total_steps or run_steps,
            self.warmup_steps,
            anchor=self.anchor,
            rounding=self.rounding,
        )


# The name this section had before it was `edit_budget`.
ScheduleConfig = EditBudgetConfig


class GateConfig(Strict):
    """Which candidates become the current skill (`honed.skills.gate`)."""

    enabled: bool = Field(
        True, description="`false`: still score every candidate, but accept it whatever the result."
    )
    mode: Literal["strict", "soft", "mixed"] = Field(
        "strict",
        description="The score compared: `strict` the hard score, `soft` the soft score, "
        "`mixed` `mixed_weight` · hard + (1 − `mixed_weight`) · soft.",
    )
    split: Split = Field("validation", description="The selection split candidates are scored on.")
    num_items: int | None = Field(
        None,
        ge=1,
        description="Selection items per environment (the first ones of `split`); `null`: all.",
    )
    min_delta: float = Field(
        0.0,
        ge=0,
        description="A candidate is accepted only if its score beats the current skill's by "
        "more than this; 0: strictly higher.",
    )
    mixed_weight: float = Field(
        0.5, ge=0, le=1, description="Weight of the hard score in `mode: mixed`."
    )
    tie_break: bool = Field(
        False,
        description="Break an exact tie on the gate's score with the other score (soft for "
        "`strict`, hard for `soft`): the remedy for small selection splits, where the hard "
        "score moves in steps of 1/num_items and most candidates tie.",
    )


class ConsolidationConfig(Strict):
    """Epoch-end consolidation of a protected region of the skill."""

    enabled: bool = Field(
        False,
        description="At the end of each epoch, the reflector rewrites the protected region "
        "`region` from how the skill changed over the epoch.",
    )
    region: str = Field(
        "guidance", pattern=r"^[A-Za-z0-9_.-]+$", description="The protected region's name."
    )
    num_items: int = Field(
        20,
        ge=1,
        description="Training items rolled out with the epoch's first and last skill, whose "
        "answers the rewrite is judged on.",
    )
    gated: bool = Field(True, description="The rewritten skill must pass the gate.")


class SkillEvalConfig(Strict):
    """The held-out evaluation of the initial and the best skill at the end of a run."""

    split: Split = Field(
        "test", description="The held-out split the initial and the best skill are scored on."
    )
    num_items: int | None = Field(
        None, ge=1, description="Items per environment; `null`: the whole split."
    )


class TargetConfig(ChatModelConfig):
    """The chat model that reads the skill and answers."""

    max_failed_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Target only: a step in which more than this share of the target's "
        "replies failed (no usable reply after the retries) stops the run, state saved: the "
        "server is misbehaving, and `--resume` goes on once it is fixed.",
    )


class ReflectorConfig(ChatModelConfig):
    """The chat model that reflects, merges, ranks and consolidates."""

    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="Reflector only: a reflection prompt that would be longer (by the "
        "client's estimate) shows fewer attempts; `null`: no cap.",
    )


class BudgetConfig(Strict):
    """Caps on what a run spends, over both models and every stage, the held-out evaluation and
    resumed runs included. Each request is checked before it is sent: when its worst case (its
    prompt tokens and `max_tokens`, priced) does not fit what is left, it is not sent, the step
    stops there (recorded, unsaved; `--resume` with a larger budget redoes it from the journal)
    and the summary says which cap stopped the run (`honed.models.budget`; docs/skills.md,
    "Cost: before and during a run")."""

    max_tokens: int | None = Field(
        None,
        ge=1,
        description="The run's tokens (both models, all stages, the evaluation included) never "
        "pass this: a request whose worst case does not fit what is left is not sent, and the "
        "run stops there; `null`: no cap.",
    )
    max_requests: int | None = Field(
        None,
        ge=1,
        description="The same for completions received (retried attempts that got none are "
        "free) and requests a crash lost; `null`: no cap.",
    )
    max_usd: float | None = Field(
        None,
        gt=0,
        description="The same for USD; needs `target.price` and `reflector.price`; `null`: no cap.",
    )
    require_usage: bool = Field(
        False,
        description="With `max_tokens` or `max_usd` set, stop the run (exit code 2) at the first "
        "reply whose server sends no `usage`, instead of metering its tokens by honed's estimate.",
    )


# Keys renamed since earlier honed versions (old -> new); the old ones still load, with a warning.
RENAMED_KEYS = {"optimizer": "reflector", "schedule": "edit_budget"}


class SkillsConfig(Strict):
    """A skill-optimisation run. `target` is the chat model that reads the skill and answers;
    `reflector` the one that reflects on its attempts and proposes, merges, ranks and
    consolidates edits; `edit_budget` how many edits each step may apply."""

    seed: int = Field(
        0, description="Seeds the sampler, the minibatch shuffles and the consolidation items."
    )
    run_dir: str | None = Field(
        None,
        description="Where the run is written; `null`: `runs/<config file name>`. `--run-dir` "
        "wins.",
    )
    envs: list[EnvConfig] = Field(
        description="The environments, as for GRPO (`envs[]`): the target attempts their items."
    )
    curriculum: CurriculumConfig = Field(
        CurriculumConfig(),
        description='Which items each step draws, as for GRPO (README, "Curriculum and '
        'reward normalisation").',
    )
    target: TargetConfig = Field(
        description="The chat model that reads the skill and answers (any OpenAI-compatible "
        "server)."
    )
    reflector: ReflectorConfig = Field(
        description="The chat model that reflects on the target's attempts and proposes, "
        "merges, ranks and consolidates edits (before: `optimizer`, still accepted with a "
        "deprecation message)."
    )
    skill: SkillConfig = Field(
        SkillConfig(),
        description="The skill document the run starts from, and how the target sees it.",
    )
    train: TrainConfig = Field(
        TrainConfig(),
        description="The outer loop: epochs of steps, each a batch of training items whose "
        "attempts are reflected on minibatch by minibatch.",
    )
    edit_budget: EditBudgetConfig = Field(
        EditBudgetConfig(),
        description="How many edits each step may apply, following a schedule: the skill "
        "loop's learning rate (before: `schedule`, still accepted with a deprecation message).",
    )
    gate: GateConfig = Field(
        GateConfig(),
        description="Which candidates become the current skill: a candidate is scored on the "
        "selection split and accepted only if it beats the current skill.",
    )
    consolidation: ConsolidationConfig = Field(
        ConsolidationConfig(),
        description="Epoch-end rewrite of a protected region of the skill.",
    )
    eval: SkillEvalConfig = Field(
        SkillEvalConfig(),
        description="The held-out evaluation of the initial and the best skill at the end of "
        "a run.",
    )
    budget: BudgetConfig = Field(
        BudgetConfig(),
        description="Caps on what a run spends, over both models and every stage, resumed "
        "runs included; when one is reached the run stops after the step under way, its "
        "state saved, and `--resume` with a larger budget continues.",
    )
    logging: LoggingConfig = Field(
        LoggingConfig(),
        description="Metric sinks, as for GRPO: each step's record goes to `metrics.jsonl`, "
        "and to TensorBoard, W&B or MLflow when on.",
    )

    # the sections this config named by their old names (new name -> old name)
    _old_names: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _renamed(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> SkillsConfig:
        """`optimizer` and `schedule`, the keys' names before, still load (with a warning), and
        the config remembers which it used, so messages can name them as the user wrote them."""
        used = {}
        if isinstance(data, Mapping):
            used = {new: old for old, new in RENAMED_KEYS.items() if old in data}
        config = handler(renamed_keys(data, RENAMED_KEYS))
        config._old_names = {**config._old_names, **used}
        return config

    def __eq__(self, other: object) -> bool:
        """Equal settings, however the sections were named."""
        if not isinstance(other, SkillsConfig):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic models are

    def key(self, dotted: str) -> str:
        """A setting's key as this config spells it: `reflector.max_tokens`, or
        `optimizer.max_tokens (now reflector.max_tokens)` in a config that used the old name."""
        section, dot, rest = dotted.partition(".")
        old = self._old_names.get(section)
        return dotted if old is None else f"{old}{dot}{rest} (now {dotted})"

    @property
    def optimizer(self) -> ChatModelConfig:
        """Deprecated: `reflector`, the section's name before."""
        warn_renamed("SkillsConfig.optimizer", "SkillsConfig.reflector", stacklevel=2)
        return self.reflector

    @property
    def schedule(self) -> EditBudgetConfig:
        """Deprecated: `edit_budget`, the section's name before."""
        warn_renamed("SkillsConfig.schedule", "SkillsConfig.edit_budget", stacklevel=2)
        return self.edit_budget

    @model_validator(mode="after")
    def _consistent(self) -> SkillsConfig:
        check_envs(self.envs)
        if self.budget.max_usd is not None:
            unpriced = [n for n in ("target", "reflector") if getattr(self, n).price is None]
            if unpriced:
                raise ValueError(
                    f"budget.max_usd needs a price for each model: set "
                    f"{' and '.join(f'{n}.price' for n in unpriced)} (USD per million tokens, "
                    "e.g. {input: 0.15, output: 0.6})"
                )
        try:  # the scheduler's own checks, with its own messages; the run's length comes later
            self.edit_budget.build(run_steps=10**9)
        except ValueError as exc:
            raise ValueError(f"edit_budget: {exc}") from None
        return self

    def total_steps(self, train_items: int) -> tuple[int, int]:
        """(steps per epoch, steps in the run) for a training set of `train_items` items."""
        per_epoch = self.train.steps_per_epoch or max(
            1, math.ceil(train_items / self.train.batch_size)
        )
        total = per_epoch * self.train.epochs
        if self.train.max_steps is not None:
            total = min(total, self.train.max_steps)
        return per_epoch, total


def load_skills_config(path: str | Path | None, overrides: list[str] | None = None) -> SkillsConfig:
    """Read a skills YAML config and apply `-o` overrides (see `honed.config.load_model`)."""
    return load_model(SkillsConfig, path, overrides)
