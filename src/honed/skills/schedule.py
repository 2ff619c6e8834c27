"""Edit-budget schedules: the skill loop's learning rate.

In the skill loop the trained parameter is a Markdown document and one step changes it by a
handful of edits; how many edits a step may keep is the step's *budget*, and it plays the role
that a learning rate plays for weights: large budgets move fast and risk piling up edits the gate
cannot tell apart, small budgets are safe and slow. A schedule gives the budget of each step.

The public interface is the original ReflACT one, so code written for it works unchanged:
`build_scheduler(mode, max_lr, min_lr, total_steps)`, `scheduler.step()` (advance one 1-indexed
step and return its budget), `get_lr(step)`, `state_dict()` / `load_state_dict()`.

Budgets are whole numbers of edits, rounded half up (`2.5 -> 3`), never below `min_lr`. This is
small integer arithmetic, not a `torch.optim` scheduler: those produce floats, know nothing of a
floor in edits, and would make the skill loop depend on torch.
"""

from __future__ import annotations

import math
from typing import Any

from honed.errors import did_you_mean

MODES = ("constant", "linear", "cosine", "autonomous")

# What `autonomous` returns as its budget: the original used 999, i.e. "no cap"; the optimizer
# LLM chooses the count instead (see `clamp_autonomous`).
AUTONOMOUS_BUDGET = 999


def _whole(name: str, value: Any, minimum: int | None) -> int:
    """`value` as an int (>= `minimum` if given); whole-valued floats (`8.0`) are accepted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number of edits, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def _round_half_up(x: float) -> int:
    # Python's round() sends 2.5 to 2 and 3.5 to 4 (banker's rounding); a budget schedule should
    # not zig-zag like that, so ties go up.
    return math.floor(x + 0.5)


def clamp_autonomous(requested: Any, pool_size: int) -> int:
    """How many ranked edits to keep when the optimizer LLM chose the count (`autonomous` mode).

    `requested` comes from untrusted LLM output, so it may be anything: an int, a numeric string
    (`"3"`), a float, `None`, or garbage. A usable number is rounded half up and clamped to
    `[1, pool_size]` (a step always tries at least one edit when there is one, just as every
    budget is at least 1); anything unusable means the LLM gave no limit, so the whole pool is
    kept, which is what "autonomous: no cap" meant in the original. An empty pool keeps 0.
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


class EditBudgetScheduler:
    """The budget (number of edits kept) of each 1-indexed step.

    With `T = total_steps`, `W = warmup_steps` and decay progress
    `p = (step - W - 1) / (T - W - 1)` (0 at the first step after warm-up, 1 at step `T`):

    - `constant`: `max_lr` at every step.
    - `linear`: `max_lr + (min_lr - max_lr) * p`; step `W + 1` gets `max_lr`, step `T` gets
      `min_lr`, and the steps between fall on a straight line.
    - `cosine`: `min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2`; `max_lr` at step `W + 1`,
      `min_lr` at step `T`, falling slowly at both ends and fastest in the middle.
    - `autonomous`: no cap; `get_lr` returns `AUTONOMOUS_BUDGET` (999) and the optimizer LLM
      chooses the count, clamped to the ranked pool by `clamp_autonomous`.

    Every budget is rounded half up and never below `min_lr`. Steps past `T` hold the value of
    step `T`; steps before 1 get the value of step 1. With `T <= 1` there is nothing to anneal
    over and every step gets `max_lr`.

    Warm-up (`W > 0`) ramps the budget linearly up from `min_lr` at step 1 towards `max_lr`,
    which step `W + 1` reaches: `min_lr + (max_lr - min_lr) * (step - 1) / W`. For an edit budget
    this means the first steps, which reflect on a young skill and have no rejected edits to learn
    from yet, change the skill a little at a time, so the gate can tell which edits helped. The
    decay then runs over steps `W + 1 .. T`. Warm-up needs `T > W` and has no meaning for
    `autonomous`.

    `load_state_dict` restores the whole state, settings included (as `torch.optim` schedulers
    do), so a resumed run continues the schedule it started with.
    """

    def __init__(
        self,
        mode: str = "constant",
        max_lr: int = 8,
        min_lr: int = 2,
        total_steps: int = 8,
        warmup_steps: int = 0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(
                f"unknown edit-budget schedule mode {mode!r}{did_you_mean(str(mode), MODES)}; "
                f"available modes: {', '.join(MODES)}"
            )
        self.mode = mode
        self.max_lr = _whole("max_lr", max_lr, 1)
        self.min_lr = _whole("min_lr", min_lr, 1)
        if self.min_lr > self.max_lr:
            raise ValueError(
                f"min_lr ({self.min_lr}) must not exceed max_lr ({self.max_lr}): the budget "
                "anneals from max_lr down to min_lr"
            )
        self.total_steps = _whole("total_steps", total_steps, None)
        self.warmup_steps = _whole("warmup_steps", warmup_steps, 0)
        if self.warmup_steps and mode == "autonomous":
            raise ValueError("warmup_steps has no meaning in autonomous mode (there is no cap)")
        if self.warmup_steps and self.warmup_steps >= self.total_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be less than total_steps "
                f"({self.total_steps}) so that the schedule reaches max_lr"
            )
        self.current_step = 0

    @property
    def is_autonomous(self) -> bool:
        """True when the optimizer LLM, not the schedule, chooses how many edits to keep."""
        return self.mode == "autonomous"

    clamp_autonomous = staticmethod(clamp_autonomous)

    def get_lr(self, step: int) -> int:
        """The budget of 1-indexed `step` (see the class docstring for the formulas)."""
        if self.mode == "autonomous":
            return AUTONOMOUS_BUDGET
        step = max(1, step)
        if self.total_steps <= 1:
            return self.max_lr
        step = min(step, self.total_steps)
        lo, hi, warm = self.min_lr, self.max_lr, self.warmup_steps
        if step <= warm:
            value = lo + (hi - lo) * (step - 1) / warm
        elif self.mode == "constant" or self.total_steps - warm <= 1:
            value = hi
        else:
            p = (step - warm - 1) / (self.total_steps - warm - 1)
            if self.mode == "linear":
                value = hi + (lo - hi) * p
            else:
                value = lo + (hi - lo) * (1 + math.cos(math.pi * p)) / 2
        return max(lo, _round_half_up(value))

    def step(self) -> int:
        """Advance one step (the first call is step 1) and return that step's budget."""
        self.current_step += 1
        return self.get_lr(self.current_step)

    def state_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "max_lr": self.max_lr,
            "min_lr": self.min_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "current_step": self.current_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restored = EditBudgetScheduler(
            mode=state["mode"],
            max_lr=state["max_lr"],
            min_lr=state["min_lr"],
            total_steps=state["total_steps"],
            warmup_steps=state.get("warmup_steps", 0),
        )
        restored.current_step = _whole("current_step", state["current_step"], 0)
        self.__dict__.update(restored.__dict__)

    def __repr__(self) -> str:
        return (
            f"EditBudgetScheduler(mode={self.mode!r}, max_lr={self.max_lr}, "
            f"min_lr={self.min_lr}, total_steps={self.total_steps}, "
            f"warmup_steps={self.warmup_steps}, current_step={self.current_step})"
        )


def build_scheduler(
    mode: str = "constant",
    max_lr: int = 8,
    min_lr: int = 2,
    total_steps: int = 8,
    warmup_steps: int = 0,
) -> EditBudgetScheduler:
    """The edit-budget schedule for a skill run (same signature as the original, plus warm-up).

    Raises `ValueError` for an unknown mode (naming the available ones) and for invalid bounds.
    """
    return EditBudgetScheduler(mode, max_lr, min_lr, total_steps, warmup_steps)
