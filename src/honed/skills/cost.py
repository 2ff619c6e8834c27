"""What a skill run costs before it starts (`honed skills train --dry-run`): per stage, the calls,
prompt tokens, completion tokens and USD it is expected to spend, and the most it can spend.

**The bound (≤)** holds for any server, however it misbehaves, for one run from start to end:

- calls count every attempt: each call may be retried `max_retries` times, and a reflector call
  (reflect, merge, rank, consolidate) cut at `max_tokens` is asked again once, with its own
  retries; a target item of a `tools` environment is up to its `max_turns` requests;
- a target request that failed is asked again when its skill is scored again: the gate scores
  the current skill at every step (cached answers cost nothing, failed ones are re-asked) and
  the candidate, so a step's gate may ask twice the selection items; an epoch's consolidated
  skill the same; the held-out evaluation asks for the initial, best and final skills;
- reflections are the most minibatches a batch can be cut into (failures and successes apart),
  merges and rankings one a step;
- prompt tokens are estimated (3 UTF-8 bytes per token, 4 per message) with the skill at
  `skill.max_chars` and, for the reflector, the step buffer as full as an epoch can make it
  (`reflector.max_prompt_tokens` caps a reflection prompt); completions count at `max_tokens`
  (without it they are unbounded, and so is the cost).

**The expectation (≈)** is a run on a server that behaves: one attempt per call, a gate that
scores the candidate only, the usual number of minibatches, and the first step's real prompts
with the initial skill (completions still at `max_tokens`, the most a call may write).

Resuming a run redoes its cut step (what it had received comes from the journal, free), and a
stopped run's failed requests are asked again: each run is bounded alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from honed.models.budget import CAPS
from honed.models.chat import Price
from honed.skills.config import SkillsConfig


@dataclass
class StageEstimate:
    """One stage's calls, expected (`calls`) and at most (`max_calls`), with each call's
    prompt tokens, expected and at most, and its completion's cap (None: no `max_tokens`)."""

    stage: str
    role: str  # "target" or "reflector"
    calls: int
    max_calls: int
    prompt_tokens: int
    max_prompt_tokens: int
    completion_tokens: int | None

    def total_prompt(self, worst: bool = False) -> int:
        if worst:
            return self.max_calls * self.max_prompt_tokens
        return self.calls * self.prompt_tokens

    def total_completion(self, worst: bool = False) -> int | None:
        if self.completion_tokens is None:
            return None
        return (self.max_calls if worst else self.calls) * self.completion_tokens

    def usd(self, price: Price | None, worst: bool = False) -> float | None:
        completion = self.total_completion(worst)
        if price is None or completion is None:
            return None
        return price.usd(self.total_prompt(worst), completion)


def most_minibatches(batch_size: int, minibatch_size: int, failure_only: bool) -> int:
    """The most reflection calls a batch can need: failures and successes are cut apart, so the
    worst split of `batch_size` answers between them gives the bound."""
    if failure_only:
        return math.ceil(batch_size / minibatch_size)
    return max(
        math.ceil(f / minibatch_size) + math.ceil((batch_size - f) / minibatch_size)
        for f in range(batch_size + 1)
    )


def usual_minibatches(batch_size: int, minibatch_size: int, failure_only: bool) -> int:
    """The reflection calls a batch usually needs: its minibatches, plus one where failures and
    successes each leave a partial one."""
    usual = math.ceil(batch_size / minibatch_size) + (0 if failure_only else 1)
    return min(usual, most_minibatches(batch_size, minibatch_size, failure_only))


@dataclass
class FirstStep:
    """The estimated prompt tokens of a run's first step: the target's requests for the
    step's items, the selection items and the evaluation items, and the reflector's prompts at
    their largest (`None` where the stage is off); with the initial skill for the expectation,
    with the largest skill and step buffer for the bound."""

    rollout: list[int]  # estimated prompt tokens per request
    gate: list[int]
    eval: list[int]
    reflect: int
    merge: int | None
    rank: int | None
    consolidate: int | None


@dataclass(frozen=True)
class Shape:
    """What the run's length and items make of the counts: steps, epochs, the items' requests
    (an item of a `tools` environment is up to `max_turns` requests)."""

    total_steps: int
    steps_per_epoch: int
    consolidation_items: int
    turns_per_item: int  # the most requests any training item can take
    gate_requests: int  # the selection items' requests, turns included
    eval_requests: int


def _mean(values: list[int]) -> int:
    return math.ceil(sum(values) / len(values)) if values else 0


def _max(values: list[int]) -> int:
    return max(values, default=0)


def estimate_stages(
    config: SkillsConfig, usual: FirstStep, worst: FirstStep, shape: Shape
) -> list[StageEstimate]:
    """Each stage's calls and tokens over the run, expected and at most (see the module's
    docstring for what each assumes). Long because each stage's row is one statement, in the order a step
    runs them."""
    train = config.train
    steps = shape.total_steps
    epochs = math.ceil(steps / shape.steps_per_epoch)
    consolidating = config.consolidation.enabled
    target_out, reflector_out = config.target.max_tokens, config.reflector.max_tokens
    target_tries = config.target.max_retries + 1
    reflector_tries = 2 * (config.reflector.max_retries + 1)  # a cut reply is asked again once
    gate_items = len(usual.gate)
    gate_usual = 1 + steps + (epochs if consolidating else 0)
    gate_most = 1 + 2 * steps + (2 * epochs if consolidating else 0)

    def target(stage: str, calls: int, most: int, ours: list[int], theirs: list[int]) -> None:
        if most:
            rows.append(
                StageEstimate(
                    stage,
                    "target",
                    calls,
                    most * target_tries,
                    _mean(ours),
                    _max(theirs),
                    target_out,
                )
            )

    def reflector(stage: str, calls: int, most: int, ours: int | None, theirs: int | None) -> None:
        if most and ours is not None and theirs is not None:
            rows.append(
                StageEstimate(
                    stage, "reflector", calls, most * reflector_tries, ours, theirs, reflector_out
                )
            )

    rows: list[StageEstimate] = []
    batch = train.batch_size
    target(
        "rollout", steps * batch, steps * batch * shape.turns_per_item, usual.rollout, worst.rollout
    )
    target("gate", gate_usual * gate_items, gate_most * shape.gate_requests, usual.gate, worst.gate)
    minibatches = (train.batch_size, train.minibatch_size, train.failure_only)
    reflector(
        "reflect",
        steps * usual_minibatches(*minibatches),
        steps * most_minibatches(*minibatches),
        usual.reflect,
        worst.reflect,
    )
    reflector("merge", steps, steps, usual.merge, worst.merge)
    reflector("rank", steps, steps, usual.rank, worst.rank)
    if consolidating:
        items = shape.consolidation_items
        target(
            "consolidate_rollout",
            epochs * 2 * items,
            epochs * 2 * items * shape.turns_per_item,
            usual.rollout,
            worst.rollout,
        )
        reflector("consolidate", epochs, epochs, usual.consolidate, worst.consolidate)
    # the held-out evaluation: initial and best skill (usually the final one), at most three
    target("eval", 2 * len(usual.eval), 3 * shape.eval_requests, usual.eval, worst.eval)
    return rows


def _usd(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


# ≈: expected from a server that behaves; ≤: at most, whatever the server does
ESTIMATE_HEADER = (
    "stage",
    "model",
    "calls ≈",
    "calls ≤",
    "prompt tokens ≈",
    "prompt tokens ≤",
    "completion tokens ≤",
    "USD ≈",
    "USD ≤",
)


def estimate_report(
    config: SkillsConfig, rows: list[StageEstimate]
) -> tuple[list[list[object]], list[str]]:
    """The dry run's table (`ESTIMATE_HEADER`, a total last) and the notes that go with it: what
    the numbers assume, and where the run stands against its `budget`."""
    models = {"target": config.target, "reflector": config.reflector}
    table: list[list[object]] = []
    totals = {
        worst: {"requests": 0.0, "prompt": 0.0, "completion": 0.0, "usd": 0.0}
        for worst in (False, True)
    }
    unbounded = unpriced = False
    for row in rows:
        price = models[row.role].price
        cells: list[object] = [row.stage, row.role, row.calls, row.max_calls]
        cells += [row.total_prompt(), row.total_prompt(worst=True)]
        cells.append(row.total_completion(worst=True))
        cells += [_usd(row.usd(price)), _usd(row.usd(price, worst=True))]
        table.append(cells)
        unbounded |= row.completion_tokens is None
        unpriced |= price is None
        for worst, total in totals.items():
            total["requests"] += row.max_calls if worst else row.calls
            total["prompt"] += row.total_prompt(worst)
            total["completion"] += row.total_completion(worst) or 0
            total["usd"] += row.usd(price, worst) or 0.0
    usual, most = totals[False], totals[True]
    table.append(
        [
            "total",
            "",
            int(usual["requests"]),
            int(most["requests"]),
            int(usual["prompt"]),
            int(most["prompt"]),
            None if unbounded else int(most["completion"]),
            None if unpriced or unbounded else _usd(usual["usd"]),
            None if unpriced or unbounded else _usd(most["usd"]),
        ]
    )
    notes = [
        "≈ expects a server that behaves: one attempt per call and the first step's prompts "
        "with the initial skill; cached answers cost nothing",
        f"≤ is the most, whatever the server does: every call retried max_retries times (target "
        f"{config.target.max_retries}, reflector {config.reflector.max_retries}; a reflector "
        "reply cut at max_tokens asked again once), every failed target request asked again, "
        f"the skill at skill.max_chars ({config.skill.max_chars:,} characters); prompt tokens "
        "are estimated at 3 bytes per token",
    ]
    for role, model in models.items():
        if model.max_tokens is None:
            notes.append(
                f"{config.key(role + '.max_tokens')} is not set: completions are unbounded"
            )
        if model.price is None:
            notes.append(f"no {config.key(role + '.price')}: no cost for the {role}'s calls")
    notes += _budget_notes(config, totals, unbounded)
    return table, notes


def _budget_notes(
    config: SkillsConfig, totals: dict[bool, dict[str, float]], unbounded: bool
) -> list[str]:
    """One note per `budget` cap set: whether the run's expected (`totals[False]`) and most
    (`totals[True]`) spending stay within it; token and USD caps are open-ended when a
    model's completions are unbounded."""
    notes = []
    for key, counter, unit in CAPS:
        cap = getattr(config.budget, key)
        if cap is None:
            continue
        spend = {
            worst: t["requests"]
            if counter == "requests"
            else t["usd"]
            if counter == "usd"
            else t["prompt"] + t["completion"]
            for worst, t in totals.items()
        }
        open_ended = counter != "requests" and unbounded
        if spend[True] <= cap and not open_ended:
            verdict = "the run stays within it"
        elif spend[False] <= cap and not open_ended:
            verdict = (
                "the run is expected to stay within it; at worst it stops before the request "
                "that would pass it"
            )
        elif spend[False] <= cap:
            verdict = "the run may reach it: it stops before the request that would pass it"
        else:
            verdict = (
                "the run is expected to reach it: it stops before the request that would pass it"
            )
        notes.append(f"budget.{key} {cap:,} {unit}: {verdict}")
    return notes
