"""Spending caps that hold: checked before every request, not after the work that spent them.

A cap checked between steps is exceeded by a whole step's calls, and a run of concurrent
requests can each see room that only one of them has. `Caps.reserve` is called by the chat
client before each attempt with the attempt's worst case: one request, its prompt tokens (the
client's estimate) plus the `max_tokens` it allows, and that priced. The attempt goes out only if
what has been spent (`UsageMeter.totals`, requests lost in a crash included), what the attempts
in flight have reserved and this worst case together fit under every cap; otherwise `BudgetStop`
is raised and nothing is sent. An attempt that would fit what has been spent, but not with what the attempts in flight
hold, waits for them to end. When an attempt ends its reservation is released and what it
really cost is counted, so a run ends at most one request's estimate error past a cap (the only
way past it is a server counting more prompt tokens than the estimate said), and never by a
step's worth.

A request without `max_tokens` has no worst case for its completion; its reservation holds the
prompt alone, and the caps on tokens and USD can be passed by the completions in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from honed.errors import HonedError

# (cap, usage counter, unit as shown)
CAPS = (
    ("max_tokens", "total_tokens", "tokens"),
    ("max_requests", "requests", "requests"),
    ("max_usd", "usd", "USD"),
)


class BudgetStop(HonedError):
    """A request the budget has no room for, refused before it was sent; or, with `error`, a
    server whose spending the budget cannot meter as it was told to (`require_usage`).

    Not a `ChatFailure`: no stage may take it for one failed call and go on. `key` is the cap
    (`budget.max_requests`), `reason` one line for the summary."""

    def __init__(self, key: str, reason: str, error: bool = False) -> None:
        super().__init__(reason)
        self.key, self.reason, self.error = key, reason, error


@dataclass(frozen=True)
class Worst:
    """What one attempt can cost at most."""

    requests: float
    total_tokens: float
    usd: float

    def get(self, counter: str) -> float:
        return float(getattr(self, counter))


def _shown(value: float, unit: str) -> str:
    return f"{value:.4f}" if unit == "USD" else f"{value:,.0f}"


def _cap(value: float, unit: str) -> str:
    return f"{value:g}" if unit == "USD" else f"{value:,}"


class Caps:
    """The run's caps (`None`: none) over a usage meter's totals; thread-safe.

    `spent` gives the totals to check against (the meter's, with lost requests counted as
    requests). `name` prefixes the caps' keys in messages (`budget.max_usd`)."""

    def __init__(
        self,
        spent: Callable[[], Mapping[str, float]],
        max_tokens: int | None = None,
        max_requests: int | None = None,
        max_usd: float | None = None,
        require_usage: bool = False,
        name: str = "budget",
    ) -> None:
        self._spent = spent
        self.limits = {"max_tokens": max_tokens, "max_requests": max_requests, "max_usd": max_usd}
        self.require_usage = require_usage
        self.name = name
        self._lock = threading.Lock()
        self._reserved = {counter: 0.0 for _, counter, _ in CAPS}

    @property
    def active(self) -> bool:
        return any(v is not None for v in self.limits.values())

    def reserve(self, stage: str, worst: Worst, wait: Callable[[], None]) -> Worst:
        """Hold `worst` for an attempt of `stage` about to be sent; give the result back to
        `release` when the attempt ends.

        When it does not fit what has been spent, `BudgetStop`. When it fits that but not what
        the attempts in flight hold on top (their worst cases, mostly far above what they will
        cost), `wait()` is called until they have ended and counted what they really cost, and
        the check is made again: the run spends its budget to the end without two requests ever
        counting on the same room. (`wait` may raise, to give up waiting.)"""
        while True:
            with self._lock:
                spent: Mapping[str, float] = self._spent()
                room = True
                for key, counter, unit in CAPS:
                    cap = self.limits[key]
                    if cap is None:
                        continue
                    used, need = spent.get(counter, 0.0), worst.get(counter)
                    if used + need > cap:
                        raise BudgetStop(
                            f"{self.name}.{key}",
                            f"{self.name}.{key} reached: {_shown(used, unit)} of "
                            f"{_cap(cap, unit)} {unit} spent, and the next {stage} request may "
                            f"cost up to {_shown(need, unit)}",
                        )
                    room = room and used + self._reserved[counter] + need <= cap
                if room:
                    for _, counter, _ in CAPS:
                        self._reserved[counter] += worst.get(counter)
                    return worst
            wait()

    def release(self, worst: Worst) -> None:
        with self._lock:
            for _, counter, _ in CAPS:
                self._reserved[counter] -= worst.get(counter)

    def unmetered(self, where: str) -> None:
        """A reply came without `usage` (its tokens are estimated): refuse it when the caps on
        tokens or USD must be metered by the server's own counts (`require_usage`)."""
        if self.require_usage and (
            self.limits["max_tokens"] is not None or self.limits["max_usd"] is not None
        ):
            raise BudgetStop(
                f"{self.name}.require_usage",
                f"the server at {where} sends no usage with its replies, and "
                f"{self.name}.require_usage is true: {self.name}.max_tokens and "
                f"{self.name}.max_usd cannot be metered by its counts (set "
                f"{self.name}.require_usage: false to meter them by honed's estimate)",
                error=True,
            )


def spent_reason(
    limits: Mapping[str, float | None], totals: Mapping[str, float], name: str = "budget"
) -> str | None:
    """The first of `limits` (`max_tokens`, `max_requests`, `max_usd`; None: no cap) that the
    usage `totals` have reached, said in a sentence, or None while there is room left."""
    for key, counter, unit in CAPS:
        cap = limits.get(key)
        spent = totals.get(counter, 0)
        if cap is not None and spent >= cap:
            return f"{name}.{key} reached: {_shown(spent, unit)} of {_cap(cap, unit)} {unit} spent"
    return None
