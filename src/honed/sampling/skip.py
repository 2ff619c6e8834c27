"""Skipping before rollout: not generating the items that will most likely teach nothing.

A GRPO group whose rewards all agree has zero advantage, and dynamic sampling throws such
groups away only after paying for their completions. GRESO (Zheng et al. 2025, arXiv
2506.02177) observed that an item without spread in one epoch mostly stays so in the next, and
skips such items *before* generating them. This module does the same, on top of any curriculum
strategy and environment mixture (`honed.sampling.sampler.Sampler` composes them):

- **History.** Every group observed updates its item's streak: +k when its last k groups were
  all solved (every rollout a success), −k when they were all failed (no spread, not all
  solved), 0 after a group with spread. Items never drawn have no streak. The history is kept
  by item key, or by the environment's `difficulty_key(item)` (`curriculum.skip.key:
  difficulty`) for generated tasks whose items rarely repeat.
- **Decision.** A candidate the curriculum draws is generated with probability
  max(p^|k|, p_min) (p = p_easy for a solved streak, p_hard for a failed one; 1 without a
  streak), else skipped and another candidate drawn in its place, at most `max_draws` per place
  in the batch (the last one is generated whatever its streak, so a batch is never short).
  A skipped item costs no rollout at all.
- **Adaptation.** After each round of groups the trainer observes, p_easy moves down by
  `p_step` if the round's share of all-solved groups was at or above a third of
  `target_zero_share`, else up; p_hard likewise against the other two thirds (GRESO's split: a
  failed item is likelier to become learnable as the policy improves, so it is probed more).
  Both stay in [p_min, 1].
- **False skips.** A candidate with a streak that was generated anyway (a *probe*, let through
  with probability q) and whose group then had spread would have been a false skip. Each probe
  stands for (1 − q)/q candidates like it that were skipped, so the false-skip rate among
  skipped items is estimated as Σ over probes with spread of (1 − q)/q over Σ over all probes
  of (1 − q)/q (inverse-probability weighting: probes with a long streak, rarely let through,
  count for the many skipped like them).

Every decision draws from the filter's own generator, whose state, with the history, p_easy,
p_hard, the counters and the chances of the candidates not yet observed, is in `state_dict()`:
a resumed run skips exactly what an uninterrupted one would.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from typing import Any, Literal

from honed.config import SkipConfig
from honed.types import Group, Item

Outcome = Literal["solved", "failed", "spread"]

# The part of `target_zero_share` that is meant for all-solved groups (GRESO's third); the rest
# is for all-failed ones.
SOLVED_SHARE_OF_TARGET = 1.0 / 3.0
# A group whose rewards' standard deviation is below this has no spread: the trainer's default
# `zero_std_tolerance` (the sampler does not see the trainer's settings; it judges raw rewards).
SPREAD_TOLERANCE = 1e-6

# Cumulative counters, each also reported per step (the change since the previous `metrics`).
COUNTERS = ("candidates", "skipped", "exhausted", "observed", "zero_spread")


def outcome_of(group: Group) -> Outcome:
    """`spread` when the group's rewards differ, else `solved` when every rollout succeeded and
    `failed` otherwise (all wrong, or the same partial credit for all)."""
    rewards = [t.reward for t in group.trajectories]
    if len(rewards) > 1:
        mean = math.fsum(rewards) / len(rewards)
        variance = math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)
        if math.sqrt(variance) >= SPREAD_TOLERANCE:
            return "spread"
    return "solved" if all(t.success >= 1.0 for t in group.trajectories) else "failed"


class SkipFilter:
    """The skip decision for the candidates of every environment, and its outcome history.

    `key_of(env, item_key)` names the history an item's outcomes go to (its own key, or its
    difficulty key). Settings are read from `config` at each use, so a resumed run applies the
    config in force; `load_state_dict` restores only state.
    """

    def __init__(
        self, config: SkipConfig, key_of: Callable[[str, str], str], seed: int = 0
    ) -> None:
        self.config = config
        self.key_of = key_of
        self.p_easy = self.p_hard = self._clip(config.p_start)
        self._rng = random.Random(seed)
        self._streaks: dict[str, dict[str, int]] = {}
        # chances of the candidates handed out and not yet observed, by (env, item key), oldest
        # first: a group is matched with the chance its item had when it was drawn
        self._pending: dict[tuple[str, str], list[float]] = {}
        self._totals = dict.fromkeys(COUNTERS, 0)
        self._reported = dict.fromkeys(COUNTERS, 0)
        self._probes = self._false_skips = 0
        self._probe_weight = self._false_weight = 0.0

    # ------------------------------------------------------------------ the decision

    def chance(self, env: str, item_key: str) -> float:
        """The probability that a candidate is generated: max(p^|k|, p_min) for a streak k of
        groups without spread, 1 without a streak."""
        streak = self._streaks.get(env, {}).get(self.key_of(env, item_key), 0)
        if streak == 0:
            return 1.0
        p = self.p_easy if streak > 0 else self.p_hard
        return max(p ** abs(streak), self.config.p_min)

    def choose(self, env: str, draw: Callable[[], Item]) -> Item:
        """One item of environment `env` for the batch: candidates from `draw()` (the
        curriculum's) until one is let through, at most `max_draws`; the last is taken anyway."""
        limit = self.config.max_draws
        for attempt in range(1, limit + 1):
            item = draw()
            self._totals["candidates"] += 1
            chance = self.chance(env, item.key)
            if chance >= 1.0 or self._rng.random() < chance:
                break
            if attempt == limit:  # generated whatever its streak: not a random probe
                self._totals["exhausted"] += 1
                chance = 1.0
                break
            self._totals["skipped"] += 1
        self._pending.setdefault((env, item.key), []).append(chance)
        return item

    # ------------------------------------------------------------------ the feedback

    def observe(self, groups: Iterable[Group]) -> None:
        """Fold a round of groups into the history, count the probes and false skips among
        them, then move p_easy and p_hard toward their targets by one `p_step`."""
        kinds = {"solved": 0, "failed": 0, "spread": 0}
        for group in groups:
            outcome = outcome_of(group)
            kinds[outcome] += 1
            chance = self._matched_chance(group.env, group.item_key)
            if chance < 1.0:
                weight = (1.0 - chance) / chance
                self._probes += 1
                self._probe_weight += weight
                if outcome == "spread":
                    self._false_skips += 1
                    self._false_weight += weight
            self._record(group.env, self.key_of(group.env, group.item_key), outcome)
        n = sum(kinds.values())
        if not n:
            return
        self._totals["observed"] += n
        self._totals["zero_spread"] += kinds["solved"] + kinds["failed"]
        target = self.config.target_zero_share
        self.p_easy = self._moved(
            self.p_easy, kinds["solved"] / n >= target * SOLVED_SHARE_OF_TARGET
        )
        self.p_hard = self._moved(
            self.p_hard, kinds["failed"] / n >= target * (1.0 - SOLVED_SHARE_OF_TARGET)
        )

    def _matched_chance(self, env: str, item_key: str) -> float:
        """The chance the oldest pending draw of this item had (1 for a group this filter did
        not hand out, e.g. one drawn before skipping was turned on)."""
        pending = self._pending.get((env, item_key))
        if not pending:
            return 1.0
        chance = pending.pop(0)
        if not pending:
            del self._pending[(env, item_key)]
        return chance

    def _record(self, env: str, key: str, outcome: Outcome) -> None:
        streaks = self._streaks.setdefault(env, {})
        before = streaks.get(key, 0)
        if outcome == "spread":
            streaks.pop(key, None)
        elif outcome == "solved":
            streaks[key] = before + 1 if before > 0 else 1
        else:
            streaks[key] = before - 1 if before < 0 else -1

    def _moved(self, p: float, down: bool) -> float:
        return self._clip(p - self.config.p_step if down else p + self.config.p_step)

    def _clip(self, p: float) -> float:
        return min(max(p, self.config.p_min), 1.0)

    # ------------------------------------------------------------------ metrics, checkpoints

    def streak(self, env: str, key: str) -> int:
        """The history's streak for a key (`key_of`'s): +k solved, −k failed, 0 none."""
        return self._streaks.get(env, {}).get(key, 0)

    def metrics(self) -> dict[str, float]:
        """`sampling/...`: per step (since the previous call) the candidates drawn, those
        skipped, the places where every candidate was skipped and the share of observed groups
        without spread; over the run the skips, probes, false skips and their estimated rate;
        and p_easy, p_hard."""
        step = {k: self._totals[k] - self._reported[k] for k in COUNTERS}
        self._reported = dict(self._totals)
        return {
            "sampling/candidates": float(step["candidates"]),
            "sampling/skipped": float(step["skipped"]),
            "sampling/skip_exhausted": float(step["exhausted"]),
            "sampling/zero_spread_share": step["zero_spread"] / step["observed"]
            if step["observed"]
            else 0.0,
            "sampling/skipped_total": float(self._totals["skipped"]),
            "sampling/probes": float(self._probes),
            "sampling/false_skips": float(self._false_skips),
            "sampling/false_skip_rate": self.false_skip_rate(),
            "sampling/skip_p_easy": self.p_easy,
            "sampling/skip_p_hard": self.p_hard,
        }

    def false_skip_rate(self) -> float:
        """The estimated share of skipped candidates whose group would have had spread (0
        before any probe came back)."""
        return self._false_weight / self._probe_weight if self._probe_weight else 0.0

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self._rng.getstate()
        return {
            "key": self.config.key,
            "p_easy": self.p_easy,
            "p_hard": self.p_hard,
            "streaks": {env: dict(s) for env, s in self._streaks.items()},
            "pending": [[env, key, list(c)] for (env, key), c in self._pending.items()],
            "totals": dict(self._totals),
            "reported": dict(self._reported),
            "probes": [self._probes, self._false_skips, self._probe_weight, self._false_weight],
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's history, p and generator. A history kept by another `key`
        than the config's cannot be read by it and is dropped (every item eligible again)."""
        self.p_easy, self.p_hard = self._clip(state["p_easy"]), self._clip(state["p_hard"])
        same_key = state["key"] == self.config.key
        self._streaks = {env: dict(s) for env, s in state["streaks"].items()} if same_key else {}
        self._pending = {(env, key): list(c) for env, key, c in state["pending"]}
        self._totals = dict(state["totals"])
        self._reported = dict(state["reported"])
        self._probes, self._false_skips, self._probe_weight, self._false_weight = state["probes"]
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
