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
from dataclasses import dataclass

from honed.models.budget import CAPS
from honed.models.chat import Price
from honed.skills.config import SkillsConfig


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


@dataclass
class FirstStep:
    """The real prompts of a run's first step, with the initial skill: the target's requests
    for the step's items, the selection items and the evaluation items, and the reflector's
    prompts at their largest (`None` where the stage is off)."""

    rollout: list[int]  # estimated prompt tokens per request
    gate: list[int]
    eval: list[int]
    reflect: int
    merge: int | None
    rank: int | None
    consolidate: int | None


def _mean(values: list[int]) -> int:
    return math.ceil(sum(values) / len(values)) if values else 0


def estimate_stages(
    config: SkillsConfig,
    first: FirstStep,
    total_steps: int,
    steps_per_epoch: int,
    consolidation_items: int,
) -> list[StageEstimate]:
    """At most how many calls each stage makes over the run, and about how many tokens each
    takes (see the module's docstring for what the numbers assume)."""
    train = config.train
    epochs = math.ceil(total_steps / steps_per_epoch)
    consolidating = config.consolidation.enabled
    target_out, reflector_out = config.target.max_tokens, config.reflector.max_tokens
    # the gate: the initial skill, every step's candidate, every epoch's consolidated skill
    gate_runs = 1 + total_steps + (epochs if consolidating else 0)
    rows = [
        StageEstimate(
            "rollout", "target", total_steps * train.batch_size, _mean(first.rollout), target_out
        ),
        StageEstimate("gate", "target", gate_runs * len(first.gate), _mean(first.gate), target_out),
        StageEstimate(
            "reflect",
            "reflector",
            total_steps
            * most_minibatches(train.batch_size, train.minibatch_size, train.failure_only),
            first.reflect,
            reflector_out,
        ),
    ]
    if first.merge is not None:
        rows.append(StageEstimate("merge", "reflector", total_steps, first.merge, reflector_out))
    if first.rank is not None:
        rows.append(StageEstimate("rank", "reflector", total_steps, first.rank, reflector_out))
    if consolidating and first.consolidate is not None:
        rows.append(
            StageEstimate(
                "consolidate_rollout",
                "target",
                epochs * 2 * consolidation_items,
                _mean(first.rollout),
                target_out,
            )
        )
        rows.append(
            StageEstimate("consolidate", "reflector", epochs, first.consolidate, reflector_out)
        )
    # the held-out evaluation: initial, best and (when it differs) final skill
    rows.append(StageEstimate("eval", "target", 3 * len(first.eval), _mean(first.eval), target_out))
    return [row for row in rows if row.calls]


def _usd(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


# ≤: at most; ≈: an estimate
ESTIMATE_HEADER = ("stage", "model", "calls ≤", "prompt tokens ≈", "completion tokens ≤", "USD ≈")


def estimate_report(
    config: SkillsConfig, rows: list[StageEstimate]
) -> tuple[list[list[object]], list[str]]:
    """The dry run's table (`ESTIMATE_HEADER`, a total last) and the notes that go with it: what
    the numbers leave out, and where the run stands against its `budget`."""
    models = {"target": config.target, "reflector": config.reflector}
    table: list[list[object]] = []
    total_prompt, total_completion, total_usd, calls = 0, 0, 0.0, 0
    unbounded = unpriced = False
    for row in rows:
        model = models[row.role]
        usd = row.usd(model.price)
        completion = row.total_completion()
        table.append([row.stage, row.role, row.calls, row.total_prompt(), completion, _usd(usd)])
        calls += row.calls
        total_prompt += row.total_prompt()
        unbounded |= completion is None
        total_completion += completion or 0
        unpriced |= usd is None
        total_usd += usd or 0.0
    table.append(
        [
            "total",
            "",
            calls,
            total_prompt,
            None if unbounded else total_completion,
            None if unpriced else _usd(total_usd),
        ]
    )
    notes = [
        "calls are first attempts: each may be retried up to max_retries times (target "
        f"{config.target.max_retries}, reflector {config.reflector.max_retries}), and answers "
        "already cached cost nothing",
        "prompt tokens are estimated from the first step's prompts with the initial skill; the "
        f"skill may grow to skill.max_chars ({config.skill.max_chars:,} characters)",
    ]
    for role, model in models.items():
        if model.max_tokens is None:
            notes.append(
                f"{config.key(role + '.max_tokens')} is not set: completions are unbounded"
            )
        if model.price is None:
            notes.append(f"no {config.key(role + '.price')}: no cost for the {role}'s calls")
    totals = {"requests": calls, "total_tokens": total_prompt + total_completion, "usd": total_usd}
    for key, counter, unit in CAPS:
        cap = getattr(config.budget, key)
        if cap is None:
            continue
        reach = totals[counter] >= cap or (counter != "requests" and unbounded)
        notes.append(
            f"budget.{key} {cap:,} {unit}: "
            + (
                "the run may reach it and then stops after that step"
                if reach
                else "the run stays within it"
            )
        )
    return table, notes
