"""Edit-budget schedules: the skill loop's learning rate.

In the skill loop the trained parameter is a Markdown document and one step changes it by a
handful of edits; how many edits a step may keep is the step's *budget*, and it plays the role
that a learning rate plays for weights: large budgets move fast and risk piling up edits the gate
cannot tell apart, small budgets are safe and slow. A schedule gives the budget of each step.

The interface and, by default, the values are those of SkillOpt's (ReflACT's) schedulers, so code
and configs written for it run unchanged and give the same budgets at every step:
`build_scheduler(mode, max_lr, min_lr, total_steps)`, the `LRScheduler` base class with its
`_compute_lr(step)` hook, `ConstantScheduler`, `LinearScheduler`, `CosineScheduler`,
`AutonomousScheduler` (`NO_LIMIT`), `step()`, `get_lr(step)`, `state_dict()` /
`load_state_dict()`. honed adds keyword options, each off by default: `warmup_steps`, and
`anchor` / `rounding`, which select the schedule honed used before it matched SkillOpt.

Budgets are small whole numbers, not a `torch.optim` scheduler: those produce floats, know
nothing of a floor in edits, and would make the skill loop depend on torch.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Literal, get_args

from honed.errors import did_you_mean

# The schedules by name (`edit_budget.mode`): `build_scheduler` builds each with the class whose
# `mode` it is (`_REGISTRY`).
ScheduleMode = Literal["constant", "linear", "cosine", "autonomous"]
MODES: tuple[str, ...] = get_args(ScheduleMode)

# What `autonomous` returns as its budget: no cap, the reflector (an LLM) chooses the count instead
# (see `clamp_autonomous`). SkillOpt's value, kept so that code comparing with it still works.
NO_LIMIT = 999

# `last`: step k gets the schedule's value after k of T steps, so only the last step is pinned
# (to min_lr) and step 1 is already one step down from max_lr (SkillOpt). `both`: step 1 gets
# max_lr, step T gets min_lr and the steps between are evenly spaced (honed before it matched
# SkillOpt).
Anchor = Literal["last", "both"]
ANCHORS: tuple[str, ...] = get_args(Anchor)
# `half_even`: Python's round(), 2.5 -> 2 and 3.5 -> 4 (SkillOpt). `half_up`: 2.5 -> 3.
Rounding = Literal["half_even", "half_up"]
ROUNDINGS: tuple[str, ...] = get_args(Rounding)


def _whole(name: str, value: Any, minimum: int | None) -> int:
    """`value` as an int (>= `minimum` if given); whole-valued floats (`8.0`) are accepted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number of edits, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(
            f"unknown {name} {value!r}{did_you_mean(str(value), options)}; "
            f"available: {', '.join(options)}"
        )
    return value


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def clamp_autonomous(requested: Any, pool_size: int) -> int:
    """How many ranked edits to keep when the reflecting LLM chose the count (`autonomous` mode).

    `requested` comes from untrusted LLM output, so it may be anything: an int, a numeric string
    (`"3"`), a float, `None`, or garbage. A usable number is rounded half up and clamped to
    `[1, pool_size]`: the reflector was asked because there are edits to weigh, and a step that
    keeps none of them would spend its rollouts and reflections for nothing. Anything unusable
    means the LLM gave no limit, so the whole pool is kept, which is what "autonomous: no cap"
    means. An empty pool keeps 0.
    """
    pool_size = max(0, int(pool_size))
    if pool_size == 0:
        return 0
    if isinstance(requested, str):
        try:
            requested = float(requested.strip())
        except ValueError:
            return pool_size
    if isinstance(requested, bool) or not isinstance(requested, int | float):
        return pool_size
    if not math.isfinite(requested):
        return pool_size
    return min(pool_size, max(1, _round_half_up(requested)))


class LRScheduler(ABC):
    """The budget (number of edits kept) of each 1-indexed step.

    Subclasses implement `_compute_lr(step)`; `step()` advances the position by one and returns
    that step's budget, `get_lr(step)` gives any step's budget without moving. A subclass that
    only calls `super().__init__(max_lr, min_lr, total_steps)` and overrides `_compute_lr`
    works as it did with SkillOpt.

    The keyword options are honed's (see `build_scheduler`): `warmup_steps`, `anchor`,
    `rounding`. The built-in schedules read them through `_anneal`; a custom `_compute_lr` may
    use them or not.

    The state is the position only (`{"current_step": n}`, as SkillOpt writes it); the
    settings are the constructor's. A resumed run rebuilds the schedule from the config in
    force and loads the position, so later steps get the budgets that config gives them.
    """

    mode: ClassVar[str] = "custom"
    # Whether the budget moves from max_lr to min_lr, which then must not exceed max_lr.
    anneals: ClassVar[bool] = False

    def __init__(
        self,
        max_lr: int,
        min_lr: int,
        total_steps: int,
        *,
        warmup_steps: int = 0,
        anchor: str = "last",
        rounding: str = "half_even",
    ) -> None:
        self.max_lr = _whole("max_lr", max_lr, 0)
        self.min_lr = _whole("min_lr", min_lr, 0)
        self.total_steps = _whole("total_steps", total_steps, None)
        self.warmup_steps = _whole("warmup_steps", warmup_steps, 0)
        self.anchor = _choice("anchor", anchor, ANCHORS)
        self.rounding = _choice("rounding", rounding, ROUNDINGS)
        if self.min_lr > self.max_lr and (self.anneals or self.warmup_steps):
            raise ValueError(
                f"min_lr ({self.min_lr}) must not exceed max_lr ({self.max_lr}): the budget "
                "moves between max_lr and min_lr"
            )
        if self.warmup_steps and self.warmup_steps >= self.total_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be less than total_steps "
                f"({self.total_steps}) so that the schedule reaches max_lr"
            )
        self._current_step = 0

    @abstractmethod
    def _compute_lr(self, step: int) -> int:
        """The budget of 1-indexed `step`."""

    def step(self) -> int:
        """Advance one step (the first call is step 1) and return that step's budget."""
        self._current_step += 1
        return self._compute_lr(self._current_step)

    def get_lr(self, step: int) -> int:
        """The budget of 1-indexed `step`, without moving the schedule."""
        return self._compute_lr(step)

    @property
    def is_autonomous(self) -> bool:
        """True when the reflecting LLM, not the schedule, chooses how many edits to keep."""
        return self.mode == "autonomous"

    clamp_autonomous = staticmethod(clamp_autonomous)

    def state_dict(self) -> dict[str, Any]:
        return {"current_step": self._current_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position. Tolerant, as SkillOpt's is: a missing or unusable
        `current_step` means 0 and a negative one is 0; other keys (settings written by
        earlier honed versions) are ignored, because the settings are the constructor's."""
        try:
            self._current_step = max(0, int(state.get("current_step", 0)))
        except (TypeError, ValueError, OverflowError):
            self._current_step = 0

    def _anneal(self, step: int, curve: Callable[[float], float]) -> int:
        """The budget of `step` for a decay `curve(t)` from max_lr (t = 0) to min_lr (t = 1).

        With `T = total_steps` and `W = warmup_steps`, steps `W + 1 .. T` follow the curve
        exactly as a schedule of `T - W` steps would (any schedule of at most one step gives
        max_lr), and steps past `T` hold the last value:

        - anchor `last`: decay step `j` (1-based) is at `t = j / (T - W)`; the warm-up climbs
          from min_lr in a straight line and reaches max_lr at step `W`.
        - anchor `both`: decay step `j` is at `t = (j - 1) / (T - W - 1)`; the warm-up starts
          at min_lr at step 1 and reaches max_lr at step `W + 1`, the first decay step.

        With `W = 0` and anchor `last` this is SkillOpt's formula. The value is rounded as
        `rounding` says and never below min_lr. Steps before the first are clamped to the
        start of the schedule (max_lr without warm-up), never above it.
        """
        total, warm = self.total_steps, self.warmup_steps
        if total <= 1:
            return self.max_lr
        lo, hi = self.min_lr, self.max_lr
        if self.anchor == "last":
            k = min(max(step, 0), total)
            if k < warm:
                value = lo + (hi - lo) * k / warm
            else:
                n = total - warm
                value = hi if n <= 1 else curve((k - warm) / n)
        else:
            k = min(max(step, 1), total)
            if k <= warm:
                value = lo + (hi - lo) * (k - 1) / warm
            else:
                n = total - warm
                value = hi if n <= 1 else curve((k - warm - 1) / (n - 1))
        rounded = round(value) if self.rounding == "half_even" else _round_half_up(value)
        return max(lo, rounded)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_lr={self.max_lr}, min_lr={self.min_lr}, "
            f"total_steps={self.total_steps}, warmup_steps={self.warmup_steps}, "
            f"anchor={self.anchor!r}, rounding={self.rounding!r}, "
            f"current_step={self._current_step})"
        )


class ConstantScheduler(LRScheduler):
    """`max_lr` at every step (after the warm-up, if any)."""

    mode = "constant"

    def _compute_lr(self, step: int) -> int:
        # Without warm-up min_lr plays no part (and may exceed max_lr, as SkillOpt allows).
        if not self.warmup_steps:
            return self.max_lr
        return self._anneal(step, lambda t: self.max_lr)


class LinearScheduler(LRScheduler):
    """A straight line from `max_lr` down to `min_lr`: `max_lr + (min_lr - max_lr) * t`."""

    mode = "linear"
    anneals = True

    def _compute_lr(self, step: int) -> int:
        return self._anneal(step, lambda t: self.max_lr + (self.min_lr - self.max_lr) * t)


class CosineScheduler(LRScheduler):
    """Half a cosine from `max_lr` down to `min_lr`, falling slowly at both ends and fastest in
    the middle: `min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * t))`."""

    mode = "cosine"
    anneals = True

    def _compute_lr(self, step: int) -> int:
        return self._anneal(
            step,
            lambda t: self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * t)),
        )


class AutonomousScheduler(LRScheduler):
    """No cap: every step's budget is `NO_LIMIT` and the reflecting LLM's ranking reply says how
    many edits to keep, clamped to the pool by `clamp_autonomous`."""

    mode = "autonomous"
    NO_LIMIT: ClassVar[int] = NO_LIMIT

    def __init__(
        self, max_lr: int, min_lr: int, total_steps: int, *, warmup_steps: int = 0, **options: str
    ) -> None:
        if warmup_steps:
            raise ValueError("warmup_steps has no meaning in autonomous mode (there is no cap)")
        super().__init__(max_lr, min_lr, total_steps, **options)

    def _compute_lr(self, step: int) -> int:
        return self.NO_LIMIT


_REGISTRY: dict[str, type[LRScheduler]] = {
    cls.mode: cls
    for cls in (ConstantScheduler, LinearScheduler, CosineScheduler, AutonomousScheduler)
}


def build_scheduler(
    mode: str = "constant",
    max_lr: int = 8,
    min_lr: int = 2,
    total_steps: int = 8,
    warmup_steps: int = 0,
    *,
    anchor: str = "last",
    rounding: str = "half_even",
) -> LRScheduler:
    """The edit-budget schedule `mode` (SkillOpt's signature and defaults, plus honed's options).

    - `warmup_steps`: climb from min_lr to max_lr over the first steps before decaying (see
      `LRScheduler._anneal`); 0, the default, is SkillOpt's schedule.
    - `anchor`: `last` (default, SkillOpt) or `both` (step 1 gets max_lr, step T min_lr).
    - `rounding`: `half_even` (default, SkillOpt: Python's round()) or `half_up`.

    Raises `ValueError` for an unknown mode or option (naming the available ones) and for
    invalid bounds.
    """
    if mode not in MODES:
        raise ValueError(
            f"unknown edit-budget schedule mode {mode!r}{did_you_mean(str(mode), MODES)}; "
            f"available modes: {', '.join(MODES)}"
        )
    return _REGISTRY[mode](
        max_lr, min_lr, total_steps, warmup_steps=warmup_steps, anchor=anchor, rounding=rounding
    )
