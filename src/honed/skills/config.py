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
import warnings
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
    renamed_keys,
)
from honed.errors import HonedDeprecationWarning, HonedError
from honed.models.chat import ChatModelConfig
from honed.skills.schedule import Anchor, LRScheduler, Rounding, build_scheduler
from honed.types import Split

# `skill.init` is read as a file when it is one line ending in one of these.
SKILL_FILE_SUFFIXES = (".md", ".markdown", ".txt")

DEFAULT_PREAMBLE = (
    "The skill document below holds guidance learned from earlier attempts at tasks like this "
    "one. Follow it when you answer."
)


class SkillConfig(Strict):
    """The skill document the run starts from, and how the target sees it.

    `init` is a path when it is a single line ending in `.md`, `.markdown` or `.txt` (relative
    to the working directory), and the skill text itself otherwise; empty means an empty skill.
    The target's system prompt is `preamble`, a blank line, then the skill (no system prompt at
    all while the skill is empty, so an empty skill measures the bare model).
    """

    init: str = ""
    preamble: str = DEFAULT_PREAMBLE
    # a candidate longer than this is rejected before the gate: the target must still have room
    # for the task in its context, and a run must not die on the next call's HTTP 400
    max_chars: int = Field(20_000, ge=1)
    # an edit whose content is longer than this is skipped (apply_report.json says why)
    max_edit_chars: int = Field(2_000, ge=1)

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
    """The outer loop: epochs of steps, each step a batch of training items.

    A step draws `batch_size` items through the sampler; failures (hard score below 1) and,
    unless `failure_only`, successes are cut into minibatches of `minibatch_size`, one
    reflection call each. An epoch has `steps_per_epoch` steps (default: training items /
    batch size, rounded up); `max_steps` caps the whole run. `merge` and `rank` choose how the
    proposals are combined and ordered (see `honed.skills.merge`).
    """

    epochs: int = Field(2, ge=1)
    batch_size: int = Field(16, ge=1)
    minibatch_size: int = Field(8, ge=1)
    failure_only: bool = False
    steps_per_epoch: int | None = Field(None, ge=1)
    max_steps: int | None = Field(None, ge=1)
    merge: Literal["deterministic", "llm"] = "deterministic"
    rank: Literal["llm", "deterministic"] = "llm"
    # the target's replies (and reasoning) shown to the reflector are cut to this many
    # characters: head, a marker saying how much was left out, tail
    max_evidence_chars: int = Field(2_000, ge=100)
    # show the reflector the target's reasoning (a reasoning model's thinking) too
    show_reasoning: bool = False
    # stop after this many steps in a row without an accepted candidate (None: never)
    patience: int | None = Field(None, ge=1)
    max_stored_reply_chars: int = Field(
        100_000,
        ge=1_000,
        description=(
            "every reply (and reasoning) a server sends is cut to this many characters as it "
            "arrives, head and tail around a marker: what is scored, cached, journaled and "
            "written to rollouts.json, so one runaway reply cannot fill the run directory"
        ),
    )


class EditBudgetConfig(Strict):
    """The edit budget per step: how many edits a step may apply, following a schedule
    (`honed.skills.schedule`); `total_steps` defaults to the run's number of steps. `max_lr` also
    caps the edits any single reflection may propose.

    The defaults give SkillOpt's budgets; `anchor: both` with `rounding: half_up` gives the
    schedule of honed before it matched SkillOpt, and `warmup_steps` is honed's own.
    """

    mode: Literal["constant", "linear", "cosine", "autonomous"] = "constant"
    max_lr: int = Field(4, ge=1)
    min_lr: int = Field(2, ge=0)
    total_steps: int | None = Field(None, ge=1)
    warmup_steps: int = Field(0, ge=0)
    anchor: Anchor = "last"
    rounding: Rounding = "half_even"

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
    """Which candidates become the current skill (`honed.skills.gate`).

    The candidate is scored on the first `num_items` items of each environment's `split`
    (`null`: all of them) and accepted only if its `mode` score beats the current skill's by
    more than `min_delta` (0: strictly higher). `strict` compares the hard score, `soft` the
    soft score, `mixed` `mixed_weight * hard + (1 - mixed_weight) * soft`. With `tie_break`,
    an exact tie on the gate's score is broken by the other score (soft for `strict`, hard for
    `soft`): the remedy for small selection splits, where the hard score moves in steps of
    1/num_items and most candidates tie. `enabled: false` still scores every candidate but
    accepts it whatever the result.
    """

    enabled: bool = True
    mode: Literal["strict", "soft", "mixed"] = "strict"
    split: Split = "validation"
    num_items: int | None = Field(None, ge=1)
    min_delta: float = Field(0.0, ge=0)
    mixed_weight: float = Field(0.5, ge=0, le=1)
    tie_break: bool = False


class ConsolidationConfig(Strict):
    """Epoch-end consolidation: the reflector rewrites the protected region `region` from how
    the skill changed over the epoch, judged on `num_items` training items rolled out with the
    epoch's first and last skill. With `gated`, the rewritten skill must pass the gate."""

    enabled: bool = False
    region: str = Field("guidance", pattern=r"^[A-Za-z0-9_.-]+$")
    num_items: int = Field(20, ge=1)
    gated: bool = True


class SkillEvalConfig(Strict):
    """The held-out evaluation of the initial and the best skill at the end of a run."""

    split: Split = "test"
    num_items: int | None = Field(None, ge=1)


class TargetConfig(ChatModelConfig):
    """The chat model that reads the skill and answers. A step in which more than
    `max_failed_fraction` of its replies failed (no usable reply after the retries) stops the
    run, state saved: the server is misbehaving, and `--resume` goes on once it is fixed."""

    max_failed_fraction: float = Field(0.2, ge=0, le=1)


class ReflectorConfig(ChatModelConfig):
    """The chat model that reflects, merges, ranks and consolidates. With `max_prompt_tokens`,
    a reflection prompt that would be longer (by the client's estimate) shows fewer attempts."""

    max_prompt_tokens: int | None = Field(None, ge=1)


class BudgetConfig(Strict):
    """Caps on what a run spends, over both models and every stage, the held-out evaluation and
    resumed runs included (`None`: no cap). Each request is checked before it is sent: when its
    worst case (its prompt tokens and `max_tokens`, priced) does not fit what is left, it is not
    sent, the step stops there (recorded, unsaved; `--resume` with a larger budget redoes it from
    the journal) and the summary says which cap stopped the run (`honed.models.budget`).
    `max_usd` needs a `price` for both models. `max_requests` counts completions received
    (retried attempts that got none are free) and requests a crash lost."""

    max_tokens: int | None = Field(None, ge=1)
    max_requests: int | None = Field(None, ge=1)
    max_usd: float | None = Field(None, gt=0)
    require_usage: bool = Field(
        False,
        description=(
            "with max_tokens or max_usd set, stop the run (exit code 2) at the first reply "
            "whose server sends no usage, instead of metering its tokens by honed's estimate"
        ),
    )


# Keys renamed since earlier honed versions (old -> new); the old ones still load, with a warning.
RENAMED_KEYS = {"optimizer": "reflector", "schedule": "edit_budget"}


def _renamed_attribute(old: str, new: str) -> None:
    warnings.warn(
        f"SkillsConfig.{old} is deprecated: use SkillsConfig.{new} (same value)",
        HonedDeprecationWarning,
        stacklevel=3,
    )


class SkillsConfig(Strict):
    """A skill-optimisation run. `target` is the chat model that reads the skill and answers;
    `reflector` the one that reflects on its attempts and proposes, merges, ranks and
    consolidates edits; `edit_budget` how many edits each step may apply."""

    seed: int = 0
    run_dir: str | None = None
    envs: list[EnvConfig]
    curriculum: CurriculumConfig = CurriculumConfig()
    target: TargetConfig
    reflector: ReflectorConfig
    skill: SkillConfig = SkillConfig()
    train: TrainConfig = TrainConfig()
    edit_budget: EditBudgetConfig = EditBudgetConfig()
    gate: GateConfig = GateConfig()
    consolidation: ConsolidationConfig = ConsolidationConfig()
    eval: SkillEvalConfig = SkillEvalConfig()
    budget: BudgetConfig = BudgetConfig()
    # metric sinks, as for GRPO: each step's record goes to metrics.jsonl, and to TensorBoard,
    # W&B or MLflow when on (`samples_per_step` is GRPO's only)
    logging: LoggingConfig = LoggingConfig()

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
        _renamed_attribute("optimizer", "reflector")
        return self.reflector

    @property
    def schedule(self) -> EditBudgetConfig:
        """Deprecated: `edit_budget`, the section's name before."""
        _renamed_attribute("schedule", "edit_budget")
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
