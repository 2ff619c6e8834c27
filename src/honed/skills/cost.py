"""What a skill run costs: at most how many calls it makes and about how many tokens, before it
starts (`honed skills train --dry-run`), and whether a `budget` cap is spent while it runs.

The count of calls is an upper bound on first attempts, by stage, from the config alone: a
step's training batch, the gate's selection items for its candidate, one reflection per
minibatch (the most minibatches a batch can be cut into, failures and successes apart), one
merge and one ranking, and at each epoch's end the consolidation's rollouts and call; then the
held-out evaluation of the initial, best and final skills. Cached answers make the real count
lower; retries (up to `max_retries` per call) come on top.

Tokens are estimated from the real prompts of the first step: the target's requests for the
step's items and the selection items with the initial skill, and reflection prompts built from
those items with replies as long as the reflector may be shown (`train.max_evidence_chars`).
Completions count at their cap, `max_tokens`, where one is set; without it they are unknown,
and so is the cost. Skills grow during a run (up to `skill.max_chars`), so later prompts are
longer: the estimate is the first step's, repeated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from honed.models.chat import Price
from honed.skills.config import BudgetConfig

# (budget key, usage counter, unit as shown)
_CAPS = (
    ("max_tokens", "total_tokens", "tokens"),
    ("max_requests", "requests", "requests"),
    ("max_usd", "usd", "USD"),
)


def budget_spent(budget: BudgetConfig, totals: Mapping[str, float]) -> str | None:
    """The first cap of `budget` that the usage `totals` (`UsageMeter.totals`) reached, said in
    a sentence, or None while there is budget left."""
    for key, counter, unit in _CAPS:
        cap = getattr(budget, key)
        spent = totals.get(counter, 0)
        if cap is not None and spent >= cap:
            shown = f"{spent:.4f} of {cap:g}" if unit == "USD" else f"{spent:,.0f} of {cap:,}"
            return f"budget.{key} reached: {shown} {unit} spent"
    return None


@dataclass
class StageEstimate:
    """At most `calls` first attempts of one stage, each with about `prompt_tokens` in and at
    most `completion_tokens` out (None: no `max_tokens`, unbounded)."""

    stage: str
    role: str  # "target" or "reflector"
    calls: int
    prompt_tokens: int
    completion_tokens: int | None

    def total_prompt(self) -> int:
        return self.calls * self.prompt_tokens

    def total_completion(self) -> int | None:
        return None if self.completion_tokens is None else self.calls * self.completion_tokens

    def usd(self, price: Price | None) -> float | None:
        completion = self.total_completion()
        if price is None or completion is None:
            return None
        return price.usd(self.total_prompt(), completion)


def most_minibatches(batch_size: int, minibatch_size: int, failure_only: bool) -> int:
    """The most reflection calls a batch can need: failures and successes are cut apart, so the
    worst split of `batch_size` answers between them gives the bound."""
    if failure_only:
        return math.ceil(batch_size / minibatch_size)
    return max(
        math.ceil(f / minibatch_size) + math.ceil((batch_size - f) / minibatch_size)
        for f in range(batch_size + 1)
    )
