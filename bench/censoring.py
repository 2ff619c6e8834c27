"""Rollouts to a target accuracy when some runs never reach it: censoring-aware statistics.

A run that spends its whole budget below the target did not take "the budget" to reach it: it
needs more than it generated, by an unknown amount. The run is *right-censored* at its total.
Dividing another run's crossing point by that total gives a bound, not a ratio (an earlier
sample-efficiency claim of this repository was mostly one strategy's crossing point divided by
the other's budget). So here:

- a run's crossing is the first evaluation after GRPO began at or above its warm-start accuracy
  plus the gain, or *censored* at the rollouts it generated in all;
- a ratio of two runs is a number only when both crossed; when one did, it is a bound (`<` or
  `>`), and when neither did, nothing;
- a median over seeds ranks a censored run above every run that crossed before the censored
  run's total, so it is exact as long as fewer than half the runs are censored (and a censored
  run's total is not below the median found: see `censored_median`);
- a mean and standard deviation are only ever taken over exact values, with the count of the
  censored beside them.

A curve is a list of evaluations `[step, accuracy, rollouts, train CPU s, train wall s, tokens]`
(older result files have only the first three or five); its first point is the warm-start at
step 0. Tokens to a target follow the same rules as rollouts: a censored run's are its total.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Accuracies are means of 0/1 outcomes: compare against the target without rounding surprises.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Crossing:
    """Where one run first reached a target, or that it never did (`censored`).

    `rollouts` is the crossing point, or, when censored, the run's total (the value is larger);
    `step`, `cpu_s`, `wall_s` and `tokens` likewise (None when the curve did not record them).
    """

    rollouts: int
    step: int
    cpu_s: float | None
    wall_s: float | None
    censored: bool
    tokens: int | None = None

    def cell(self, what: str = "rollouts") -> str:
        """`12,345 (40)` (rollouts, and the step), `> 400,000 (censored)`; CPU/wall seconds,
        tokens."""
        if what == "rollouts":
            text = f"{self.rollouts:,}"
            return f"> {text} (censored)" if self.censored else f"{text} ({self.step})"
        value = {"cpu": self.cpu_s, "wall": self.wall_s, "tokens": self.tokens}[what]
        if value is None:
            return "n/a"
        return f"> {value:,.0f} (censored)" if self.censored else f"{value:,.0f}"


def crossing(
    curve: Sequence[Sequence[float]], gain: float, total: int, total_tokens: int | None = None
) -> Crossing:
    """The first evaluation after step 0 at or above warm-start + `gain`, or censored at the end
    of the curve (rollouts: `total`, what the run generated in all; tokens: `total_tokens`)."""
    target = curve[0][1] + gain - _TOLERANCE
    for point in curve[1:]:
        if point[1] >= target:
            tokens = int(point[5]) if len(point) >= 6 else None
            return Crossing(int(point[2]), int(point[0]), *_times(point), False, tokens)
    last = curve[-1]
    tokens = total_tokens if len(last) >= 6 else None
    return Crossing(int(total), int(last[0]), *_times(last), True, tokens)


def _times(point: Sequence[float]) -> tuple[float | None, float | None]:
    return (point[3], point[4]) if len(point) >= 5 else (None, None)


@dataclass(frozen=True)
class Ratio:
    """`arm / baseline` rollouts to the target for one seed: a number, or a bound, or nothing."""

    value: float | None  # exact: both crossed
    bound: str | None  # "<" (only the arm crossed) or ">" (only the baseline did)
    limit: float | None  # the bound's value

    def cell(self) -> str:
        if self.value is not None:
            return f"{self.value:.2f}"
        if self.bound is not None:
            return f"{self.bound} {self.limit:.2f}"
        return "–"


def ratio(arm: Crossing, baseline: Crossing) -> Ratio:
    """The arm's rollouts to the target over the baseline's. When the baseline is censored the
    true ratio is below arm / (baseline's total); when the arm is, above (arm's total) /
    baseline."""
    if not arm.censored and not baseline.censored:
        return Ratio(arm.rollouts / baseline.rollouts, None, None)
    if not arm.censored:
        return Ratio(None, "<", arm.rollouts / baseline.rollouts)
    if not baseline.censored:
        return Ratio(None, ">", arm.rollouts / baseline.rollouts)
    return Ratio(None, None, None)


def censored_median(
    crossings: Sequence[Crossing], what: str = "rollouts"
) -> tuple[float | None, str]:
    """The median over seeds of rollouts (or `cpu_s`, `wall_s`) to the target, and how to read it.

    A censored run's value is above its recorded one (its total). The median is exact when the
    middle value(s) are crossings and no censored run's total is below the median found (so
    every censored run truly ranks above it); otherwise only the count of censored runs, or
    "undetermined", can be said.
    """
    values = [(c.censored, getattr(c, what)) for c in crossings]
    n = len(values)
    if n == 0 or any(v is None for _, v in values):
        return None, "no runs" if n == 0 else "not recorded"
    ordered = sorted(values)  # crossings first, by value; censored runs after them
    middle = ordered[(n - 1) // 2 : n // 2 + 1]
    censored = sum(c for c, _ in values)
    if any(c for c, _ in middle):
        return None, f"{censored} of {n} censored"
    median = statistics.fmean(v for _, v in middle)
    if any(c and v < median for c, v in values):
        return None, "undetermined (a censored run stopped below the median)"
    return median, "exact" if not censored else f"exact; {censored} of {n} censored"


@dataclass(frozen=True)
class Spread:
    """Mean, standard deviation, median and range of exact values, and how many were left out."""

    n: int
    mean: float | None
    sd: float | None
    median: float | None
    low: float | None
    high: float | None
    left_out: int

    def text(self, fmt: str = "{:.2f}") -> str:
        if not self.n:
            return (
                f"none exact ({self.left_out} not: a bound, or both censored)"
                if self.left_out
                else "none"
            )
        out = f"median {fmt.format(self.median)}, mean {fmt.format(self.mean)}"
        if self.sd is not None:
            out += f" ± {fmt.format(self.sd)} (sd)"
        out += f", range {fmt.format(self.low)}–{fmt.format(self.high)}, n = {self.n}"
        return out + (f"; {self.left_out} more not exact" if self.left_out else "")


def spread(values: Sequence[float | None]) -> Spread:
    """Summary of the exact values (None marks a bound or a censored run: counted, not used)."""
    exact = [v for v in values if v is not None and math.isfinite(v)]
    left_out = len(values) - len(exact)
    if not exact:
        return Spread(0, None, None, None, None, None, left_out)
    sd = statistics.stdev(exact) if len(exact) > 1 else None
    return Spread(
        len(exact),
        statistics.fmean(exact),
        sd,
        statistics.median(exact),
        min(exact),
        max(exact),
        left_out,
    )
