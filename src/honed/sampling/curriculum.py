"""Curriculum over the items of one environment: which difficulty bin to practise, and which item.

Every item carries an exponential moving average (EMA) of its score; higher means easier. Items
are split into `n_bins` quantile bins, bin 0 the easiest, and a strategy turns training progress
(and, for some strategies, the bins' contents) into a distribution over bins. `sample_item` draws
a bin from it and then an item inside that bin, or an item never scored yet.

Bins are exact quantiles whenever they are read: with N scored items and K bins, every bin
holds ⌊N/K⌋ or ⌈N/K⌉ items, ties or not (tied items are split between the bins they straddle,
deterministically), and every item of bin i scores at least as high as every item of bin i + 1.
A bin's score range is [c_{i+1}, c_i], c_i being the highest score in bin i at the last rebin.

Cost at N scored items and K bins (why it scales to millions of items):

- `update` is O(log K) and never rebins: it changes one EMA and, when the new value leaves its
  bin's score range, moves the item to the nearest bin whose range holds it (swap-and-pop on the
  bins' member arrays). Items therefore always sit in a bin that matches their score; only the
  bins' *sizes* drift.
- Reading the bins (`get_item_bin`, `metrics_dict`, `sample_item`, and `bin_probabilities` /
  `sample_bin` under `frontier`, which weighs bins by their items) first settles them: after
  updates, an O(K) check of the sizes, and, only when a size left [⌊N/K⌋, ⌈N/K⌉], a rebin (new cut
  points and members: one NumPy partition, O(N)). Queries without updates in between cost
  nothing extra, so a trainer that draws a batch and then scores it rebins at most once a step.
- `sample_item` is O(1) expected: the bin distribution (O(K)) is computed once per step and
  reused until the next update, then a bin is found by bisection and an item by index.

Strategies (`bin_probabilities` gives the exact distribution, before empty bins are skipped).
`progress` is `current_step / max(1, total_steps)`, clipped to [0, 1]:

- `uniform`: every bin alike, hence (with balanced bins) every tracked item alike.
- `easy_first`: bin i has weight (1 − progress)·exp(−2i / max(1, K − 1)) + progress·(1/K), then
  normalised: favours easy bins at the start, uniform at the end.
- `competence_based`, two ways (keyword `competence`):

  * `gaussian` (the default, Atropos's formula): weight exp(−d²/2), d being the distance in bins
    from bin progress·(K − 1), so the favoured bin moves from the easiest to the hardest over
    training whatever the policy achieves; `competence_threshold` is not read.
  * `platanios`: Platanios et al. 2019 (arXiv 1904.03746). The policy may practise the easiest
    fraction c of the items (difficulty *percentiles*), uniformly; with equal bins that gives bin
    i the weight clip(c·K − i, 0, 1). The competence c is the larger of the paper's square-root
    schedule c = min(1, sqrt(progress·(1 − c0²) + c0²)), c0 = `INITIAL_COMPETENCE`, and the
    measured competence: the fraction of tracked items whose EMA is at least
    `competence_threshold` (the items already mastered, which are the easiest ones), plus one
    bin's width so that the next level is practised. A policy that learns fast is thereby not
    held back by the schedule.

- `frontier`: weight ∝ learnability p(1 − p) per item, where p is the item's estimated success
  rate. This assumes scores in [0, 1] (a success rate, or a mean of pass/fail rollouts): p is
  the EMA clipped to [0, 1]. Items that every rollout solves (p = 1) or fails (p = 0) give a GRPO
  group zero advantage, so they get only the floor weight `FRONTIER_FLOOR` (a little
  exploration: a failed item may become solvable). A bin is drawn by its summed weight and an
  item inside it by rejection against the bin's largest possible weight: at temperature 1 that
  is exact per-item p(1 − p) sampling, in O(1) expected tries (at most 0.25 / `FRONTIER_FLOOR`).

`temperature` T reshapes the bin distribution p as the softmax of log(max(p, 1e-10)) / T (that is,
p^(1/T) renormalised): below 1 it sharpens, above 1 it flattens. A bin that `platanios` or
`frontier` gives no weight at all stays at zero.

Items never scored: `register_items` declares the candidate keys. A share of the draws goes to
them, chosen uniformly: `unseen_share` when given, otherwise the share they would get as
average items (each unseen item counts like one tracked item; under `frontier`, like an item
with p = 0.5, the most learnable, so that new items are explored before known ones are
exploited). Their difficulty is unknown, so `get_item_bin` reports the middle bin, K // 2.

Code written for Atropos's `CurriculumScheduler` (atroposlib/envs/curriculum.py) runs against
this class unchanged: the same constructor, method and keyword names, `CurriculumStrategy`, the
same probabilities, and draws from the module-level `random` unless a `seed` is given, so
`random.seed(...)` reproduces them; `load_state_dict` reads Atropos's checkpoints. Where this
class differs on purpose (balanced bins, split ties, `frontier`, the `platanios` competence)
docs/migrating.md says why.
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, Protocol, get_args

import numpy as np

from honed.config import CompetenceName, StrategyName

# Atropos's enum of strategy names, plus honed's `frontier`, built from the config's one list
# (`honed.config.StrategyName`): `CurriculumStrategy.UNIFORM == "uniform"`, and every
# scheduler's `strategy` converts to it (Atropos's own `load_state_dict` converts the saved
# strategy this way).
CurriculumStrategy = Enum(
    "CurriculumStrategy",
    [(name.upper(), name) for name in get_args(StrategyName)],
    type=str,
    module=__name__,
)

STRATEGIES: tuple[str, ...] = get_args(StrategyName)
COMPETENCE: tuple[str, ...] = get_args(CompetenceName)
# The settings: a checkpoint records them beside the state, and a resumed run's config may
# override them (see `Sampler.load_state_dict`).
SETTINGS = (
    "strategy",
    "competence",
    "n_bins",
    "temperature",
    "ema_alpha",
    "competence_threshold",
    "unseen_share",
)
MIN_TEMPERATURE = 0.01
# Tempering takes the log of each probability; Atropos floors it here, so a bin whose weight
# underflows is still reachable.
PROBABILITY_FLOOR = 1e-10
# Platanios et al. use an initial competence of 0.01.
INITIAL_COMPETENCE = 0.01
FRONTIER_FLOOR = 0.01
_UNSEEN_FRONTIER_WEIGHT = 0.25  # p(1 - p) at the uninformed prior p = 0.5

# Bin index of an item that was registered but never scored (it sits in the unseen list).
_UNSEEN = -1
# Bin index of a key met for the first time in `update` (in no list yet).
_FRESH = -2
_INF = math.inf


class _Draws(Protocol):
    """What the scheduler draws with: a `random.Random`, or the `random` module itself."""

    def random(self) -> float: ...

    def randint(self, a: int, b: int) -> int: ...

    def choices(self, population: Sequence[int], weights: Sequence[float]) -> list[int]: ...


class CurriculumScheduler:
    """Per-item difficulty tracking, quantile bins, and bin/item sampling for one environment.

    `seed`: None draws from the module-level `random` (as Atropos does, so `random.seed` governs
    the draws); an integer gives the scheduler its own generator, whose state is in
    `state_dict()`, so that a resumed run draws exactly what an uninterrupted one would.
    """

    def __init__(
        self,
        strategy: str = "uniform",
        n_bins: int = 5,
        temperature: float = 1.0,
        ema_alpha: float = 0.3,
        competence_threshold: float = 0.5,
        *,
        competence: str = "gaussian",
        unseen_share: float | None = None,
        seed: int | None = None,
    ) -> None:
        self._strategy = _strategy_value(strategy)
        self._competence = _competence_value(competence)
        self._n_bins = _n_bins_value(n_bins)
        self._temperature = _temperature_value(temperature)
        self._ema_alpha = _ema_alpha_value(ema_alpha)
        self._competence_threshold = _finite("competence_threshold", competence_threshold)
        self._unseen_share = _unseen_share_value(unseen_share)
        self._rng: _Draws = random if seed is None else random.Random(seed)

        # Items by integer id, in typed arrays: O(1) per update from Python, and a rebin reads
        # and writes them as NumPy buffers instead of converting a million Python objects.
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        self._ema = array("d")  # NaN until the first score
        self._bin = array("q")  # bin index, or _UNSEEN / _FRESH
        self._pos = array("q")  # index in its bin's member array (or in the unseen array)
        self._members = [array("q") for _ in range(self._n_bins)]
        self._unseen = array("q")
        self._n_seen = 0
        self._bin_weight = [0.0] * self._n_bins  # frontier: summed learnability per bin
        self._n_mastered = 0  # platanios: tracked items with EMA >= competence_threshold
        self._total_updates = 0
        self._settled_at = 0  # the value of _total_updates when the bins were last balanced
        self._plan_key: tuple[int, int, int] | None = None  # see _plan
        self._plan_cache: tuple[float, list[int], list[float]] = (0.0, [], [1.0])
        self._derive()
        self._set_cuts([-_INF] * (self._n_bins - 1))

    # ------------------------------------------------------------------ settings
    #
    # Settings are properties: assigning one validates it as the constructor does and takes
    # effect at the next draw. Assigning the current value changes nothing (a resumed run
    # re-applies its config this way without disturbing the restored state).

    @property
    def strategy(self) -> str:
        return self._strategy

    @strategy.setter
    def strategy(self, value: str) -> None:
        value = _strategy_value(value)
        if value != self._strategy:
            self._strategy = value
            self._rederive()

    @property
    def competence(self) -> str:
        """How `competence_based` picks bins: `gaussian` (Atropos's) or `platanios`."""
        return self._competence

    @competence.setter
    def competence(self, value: str) -> None:
        value = _competence_value(value)
        if value != self._competence:
            self._competence = value
            self._rederive()

    @property
    def n_bins(self) -> int:
        return self._n_bins

    @n_bins.setter
    def n_bins(self, value: int) -> None:
        value = _n_bins_value(value)
        if value != self._n_bins:
            seen = np.concatenate([np.frombuffer(m, dtype=np.int64) for m in self._members])
            self._n_bins = value
            self._members = [array("q", seen.tobytes())] + [array("q") for _ in range(value - 1)]
            self._derive()
            self._set_cuts([-_INF] * (value - 1))
            self.rebin()

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = _temperature_value(value)
        self._plan_key = None

    @property
    def ema_alpha(self) -> float:
        return self._ema_alpha

    @ema_alpha.setter
    def ema_alpha(self, value: float) -> None:
        self._ema_alpha = _ema_alpha_value(value)

    @property
    def competence_threshold(self) -> float:
        return self._competence_threshold

    @competence_threshold.setter
    def competence_threshold(self, value: float) -> None:
        value = _finite("competence_threshold", value)
        if value != self._competence_threshold:
            self._competence_threshold = value
            self._rederive()

    @property
    def unseen_share(self) -> float | None:
        return self._unseen_share

    @unseen_share.setter
    def unseen_share(self, value: float | None) -> None:
        self._unseen_share = _unseen_share_value(value)
        self._plan_key = None

    def settings(self) -> dict[str, Any]:
        """The settings by name (`SETTINGS`), as a checkpoint records them."""
        return {name: getattr(self, name) for name in SETTINGS}

    # ------------------------------------------------------------------ items and scores

    @property
    def n_items_tracked(self) -> int:
        """Items with at least one score (registered items never scored are not counted)."""
        return self._n_seen

    def item_keys(self) -> list[str]:
        """Every key the scheduler knows, scored or only registered, in the order first seen."""
        return list(self._keys)

    def register_items(self, keys: Iterable[str]) -> int:
        """Declare candidate items; returns how many were new. Known keys are left as they are."""
        added = 0
        for key in keys:
            if key not in self._ids:
                i = self._new_id(key)
                self._bin[i] = _UNSEEN
                self._pos[i] = len(self._unseen)
                self._unseen.append(i)
                added += 1
        self._plan_key = None
        return added

    def update(self, item_key: str, score: float) -> None:
        """Fold one score into the item's EMA (the first score is taken as is)."""
        # The hot path of the scheduler (see the module docstring for its cost): kept flat, with
        # the per-strategy bookkeeping done only by the strategy that reads it.
        score = float(score)
        if not math.isfinite(score):
            raise ValueError(f"curriculum: score for item {item_key!r} is not finite ({score!r})")
        i = self._ids.get(item_key)
        if i is None:
            i = self._new_id(item_key)
        ema = self._ema
        old_bin = self._bin[i]
        if old_bin >= 0:
            old = ema[i]
            alpha = self._ema_alpha
            new = alpha * score + (1.0 - alpha) * old  # Atropos's arithmetic: the same floats
            here = old_bin
            if self._weighs_bins:
                self._bin_weight[old_bin] -= _learnability(old)
            elif self._counts_mastered and old >= self._competence_threshold:
                self._n_mastered -= 1
        else:  # first score: taken as is
            new = score
            if old_bin == _UNSEEN:
                self._detach(self._unseen, i)
            self._n_seen += 1
            here = self._mid
        ema[i] = new

        if not self._lo[here] <= new <= self._hi[here]:
            # Nearest bin whose score range [c_{b+1}, c_b] holds the new value (cuts descend).
            lo = bisect_left(self._neg_cuts, -new)
            here = lo if here < lo else bisect_right(self._neg_cuts, -new)
        if here != old_bin:
            if old_bin >= 0:
                self._detach(self._members[old_bin], i)
            members = self._members[here]
            self._bin[i] = here
            self._pos[i] = len(members)
            members.append(i)
        if self._weighs_bins:
            self._bin_weight[here] += _learnability(new)
        elif self._counts_mastered and new >= self._competence_threshold:
            self._n_mastered += 1
        self._total_updates += 1

    def update_batch(self, item_key: str, scores: Sequence[float]) -> None:
        """One update with the group's mean score; an empty group changes nothing."""
        if len(scores) == 0:
            return
        self.update(item_key, sum(scores) / len(scores))

    def get_item_difficulty(self, item_key: str) -> float | None:
        """The item's EMA score (higher = easier), or None if it was never scored."""
        i = self._ids.get(item_key)
        if i is None or self._bin[i] < 0:
            return None
        return self._ema[i]

    def get_item_bin(self, item_key: str) -> int:
        """The item's bin (0 = easiest); the middle bin, n_bins // 2, if it was never scored."""
        i = self._ids.get(item_key)
        if i is None or self._bin[i] < 0:
            return self._mid
        self._settle()
        return self._bin[i]

    # ------------------------------------------------------------------ drawing

    def bin_probabilities(self, current_step: int = 0, total_steps: int = 1000) -> list[float]:
        """The strategy's distribution over bins at this step, temperature applied."""
        if self._weighs_bins:
            self._settle()
        probs = self._strategy_probabilities(current_step, total_steps)
        if self._temperature == 1.0:
            return probs
        # Strategies that exclude bins (zero weight) keep them excluded; the others floor each
        # probability before the log, as Atropos does.
        excludes = self._weighs_bins or self._counts_mastered
        t = self._temperature
        logs = [
            -_INF if excludes and p <= 0.0 else math.log(max(p, PROBABILITY_FLOOR)) / t
            for p in probs
        ]
        top = max(logs)
        tempered = [math.exp(lp - top) for lp in logs]
        total = sum(tempered)
        return [p / total for p in tempered]

    def sample_bin(self, current_step: int = 0, total_steps: int = 1000) -> int:
        """A bin index drawn from `bin_probabilities` (empty bins included)."""
        if self._strategy == "uniform":
            return self._rng.randint(0, self._n_bins - 1)
        probs = self.bin_probabilities(current_step, total_steps)
        return self._rng.choices(range(self._n_bins), weights=probs)[0]

    def sample_item(self, current_step: int = 0, total_steps: int = 1000) -> str:
        """A key: an unseen item (see the module docstring for how often), else bin then item.

        Empty bins are skipped; when every bin the strategy favours is empty, the non-empty bin
        nearest to its most favoured one is used.
        """
        p_unseen, bins, cumulative = self._plan(current_step, total_steps)
        rng = self._rng
        if p_unseen > 0.0 and (p_unseen >= 1.0 or rng.random() < p_unseen):
            unseen = self._unseen
            return self._keys[unseen[int(rng.random() * len(unseen))]]
        j = bisect_right(cumulative, rng.random() * cumulative[-1])
        b = bins[min(j, len(bins) - 1)]
        ids = self._members[b]
        n = len(ids)
        if not self._weighs_bins:
            return self._keys[ids[int(rng.random() * n)]]
        ema = self._ema
        ceiling = self._max_weight[b]
        while True:
            i = ids[int(rng.random() * n)]
            if rng.random() * ceiling < _learnability(ema[i]):
                return self._keys[i]

    def _plan(self, current_step: int, total_steps: int) -> tuple[float, list[int], list[float]]:
        """The unseen share and the non-empty bins' cumulative weights, cached until a change.

        A batch draws many items at one step between two updates, so this O(K) work is shared.
        Every setting's setter drops the cache.
        """
        key = (current_step, total_steps, self._total_updates)
        if self._plan_key == key:
            return self._plan_cache
        n_unseen = len(self._unseen)
        if self._n_seen + n_unseen == 0:
            raise ValueError("curriculum has no items to sample: call register_items(keys) first")
        self._settle()
        p_unseen = 0.0
        if n_unseen:
            p_unseen = 1.0 if self._n_seen == 0 else self._unseen_probability()
        members = self._members
        weights = self.bin_probabilities(current_step, total_steps)
        bins: list[int] = []
        cumulative: list[float] = []
        total = 0.0
        for b, w in enumerate(weights):
            if w > 0.0 and members[b]:
                total += w
                bins.append(b)
                cumulative.append(total)
        if not bins and self._n_seen:
            favoured = max(range(self._n_bins), key=weights.__getitem__)
            nearest = min(
                (b for b in range(self._n_bins) if members[b]), key=lambda b: abs(b - favoured)
            )
            bins, cumulative = [nearest], [1.0]
        elif not bins:  # only unseen items: the bins are never reached
            cumulative = [1.0]
        self._plan_key = key
        self._plan_cache = (p_unseen, bins, cumulative)
        return self._plan_cache

    def _strategy_probabilities(self, current_step: int, total_steps: int) -> list[float]:
        """The strategy's normalised distribution over bins, before temperature.

        The arithmetic of `easy_first` and the `gaussian` competence follows Atropos's operation
        for operation, so that its users get the same floats and hence the same draws.
        """
        k = self._n_bins
        progress = min(1.0, max(0.0, current_step / max(1, total_steps)))
        if self._strategy == "uniform":
            return [1.0 / k] * k
        if self._strategy == "easy_first":
            weights = [
                (1.0 - progress) * math.exp(-2.0 * b / max(1, k - 1)) + progress * (1.0 / k)
                for b in range(k)
            ]
        elif self._strategy == "competence_based" and self._competence == "gaussian":
            centre = progress * (k - 1)
            weights = [math.exp(-0.5 * abs(b - centre) ** 2) for b in range(k)]
        elif self._strategy == "competence_based":
            x = self._competence_level(progress) * k  # bins' worth allowed
            weights = [1.0 if x >= b + 1 else (x - b if x > b else 0.0) for b in range(k)]
        else:  # frontier; an empty bin's running sum may be a rounding error away from zero
            weights = [
                w if m else 0.0 for w, m in zip(self._bin_weight, self._members, strict=True)
            ]
        total = sum(weights)
        if total <= 0.0:
            return [1.0 / k] * k
        return [w / total for w in weights]

    def _competence_level(self, progress: float) -> float:
        """The share of items (easiest first) that the `platanios` competence draws from now."""
        c0 = INITIAL_COMPETENCE
        scheduled = min(1.0, math.sqrt(progress * (1.0 - c0 * c0) + c0 * c0))
        if self._n_seen == 0:
            return scheduled
        measured = min(1.0, self._n_mastered / self._n_seen + 1.0 / self._n_bins)
        return max(scheduled, measured)

    def _unseen_probability(self) -> float:
        if self._unseen_share is not None:
            return self._unseen_share
        n_unseen = len(self._unseen)
        if self._weighs_bins:
            prior = _UNSEEN_FRONTIER_WEIGHT * n_unseen
            return prior / (prior + sum(self._bin_weight))
        return n_unseen / (n_unseen + self._n_seen)

    # ------------------------------------------------------------------ bins

    def rebin(self) -> None:
        """Recompute the quantile cut points and every bin's members: O(N) (a partition).

        Reading the bins calls this when updates have unbalanced them; calling it directly is
        never needed.
        """
        k = self._n_bins
        seen = np.concatenate([np.frombuffer(m, dtype=np.int64) for m in self._members])
        n = seen.size
        scores = np.frombuffer(self._ema, dtype=np.float64)[seen]
        starts = [(b * n + k // 2) // k for b in range(k + 1)]
        # Easiest first, partitioned at each bin's first rank so that the score there is the
        # bin's largest; ties are split between bins deterministically, though by no rule.
        kth = sorted({s for s in starts[1:k] if s < n})
        order = np.argpartition(-scores, kth) if kth else np.arange(n)
        self._set_cuts([float(scores[order[s]]) if s < n else -_INF for s in starts[1:k]])

        ids = seen[order]
        sizes = np.diff(starts)
        # Written in place through NumPy views of the arrays (released before any append).
        bin_of = np.frombuffer(self._bin, dtype=np.int64)
        pos_of = np.frombuffer(self._pos, dtype=np.int64)
        bin_of[ids] = np.repeat(np.arange(k), sizes)
        pos_of[ids] = np.arange(n) - np.repeat(np.asarray(starts[:k]), sizes)
        del bin_of, pos_of
        self._members = [array("q", ids[a:b].tobytes()) for a, b in itertools.pairwise(starts)]

        self._recount(scores[order], starts)
        self._plan_key = None
        self._settled_at = self._total_updates

    def _settle(self) -> None:
        """Balance the bins if updates since the last check may have unbalanced them.

        Items always sit in a bin whose score range holds them (`update` sees to that), so bins
        whose sizes are all ⌊N/K⌋ or ⌈N/K⌉ are already exact quantiles and need no rebin.
        """
        if self._settled_at == self._total_updates:
            return
        low = self._n_seen // self._n_bins
        if all(low <= len(m) <= low + 1 for m in self._members):
            self._settled_at = self._total_updates
        else:
            self.rebin()

    def _recount(self, scores: np.ndarray, starts: list[int]) -> None:
        """Exact per-bin learnability and mastered count, from scores laid out bin by bin."""
        if self._weighs_bins:
            p = np.clip(scores, 0.0, 1.0)
            learnability = np.maximum(p - p * p, FRONTIER_FLOOR)
            self._bin_weight = [
                float(learnability[a:b].sum()) for a, b in itertools.pairwise(starts)
            ]
        else:
            self._bin_weight = [0.0] * self._n_bins
        self._n_mastered = int(np.count_nonzero(scores >= self._competence_threshold))

    def _rederive(self) -> None:
        """After a change of strategy, competence or threshold: flags and running counts."""
        self._derive()
        seen = np.concatenate([np.frombuffer(m, dtype=np.int64) for m in self._members])
        sizes = [len(m) for m in self._members]
        starts = [0, *itertools.accumulate(sizes)]
        self._recount(np.frombuffer(self._ema, dtype=np.float64)[seen], starts)

    def _derive(self) -> None:
        """Values that follow from the settings; the plan is dropped."""
        self._mid = self._n_bins // 2
        # Kept up to date by `update` only under the strategy that reads them.
        self._weighs_bins = self._strategy == "frontier"
        self._counts_mastered = (
            self._strategy == "competence_based" and self._competence == "platanios"
        )
        self._plan_key = None

    def _set_cuts(self, cuts: list[float]) -> None:
        """Cut points c_1 >= ... >= c_{K-1}; bin b holds scores in [c_{b+1}, c_b]."""
        self._cuts = cuts
        self._neg_cuts = [-c for c in cuts]
        self._hi = [_INF, *cuts]
        self._lo = [*cuts, -_INF]
        # The largest p(1 - p) an item of each bin can have: the rejection ceiling of `frontier`.
        self._max_weight = []
        for lo, hi in zip(self._lo, self._hi, strict=True):
            a, b = min(max(lo, 0.0), 1.0), min(max(hi, 0.0), 1.0)
            peak = 0.25 if a <= 0.5 <= b else max(a - a * a, b - b * b)
            self._max_weight.append(max(peak, FRONTIER_FLOOR))

    def _new_id(self, key: str) -> int:
        i = len(self._keys)
        self._ids[key] = i
        self._keys.append(key)
        self._ema.append(math.nan)
        self._bin.append(_FRESH)
        self._pos.append(-1)
        return i

    def _detach(self, ids: array, i: int) -> None:
        """Remove id `i` from `ids` in O(1) by moving the last id into its slot."""
        last = ids.pop()
        if last != i:
            p = self._pos[i]
            ids[p] = last
            self._pos[last] = p

    # ------------------------------------------------------------------ metrics, checkpoints

    def metrics_dict(self) -> dict[str, float]:
        """Atropos's keys (`curriculum/...`), plus every bin's count even before any score.

        An empty scheduler also reports `curriculum/strategy` as 0, as Atropos does.
        """
        self._settle()
        ema = np.frombuffer(self._ema, dtype=np.float64)
        scores = ema[~np.isnan(ema)]
        out = {
            "curriculum/items_tracked": float(self._n_seen),
            "curriculum/mean_difficulty": float(scores.mean()) if scores.size else 0.0,
            "curriculum/min_difficulty": float(scores.min()) if scores.size else 0.0,
            "curriculum/max_difficulty": float(scores.max()) if scores.size else 0.0,
            "curriculum/total_updates": float(self._total_updates),
        }
        if not scores.size:
            out["curriculum/strategy"] = 0.0
        for b, members in enumerate(self._members):
            out[f"curriculum/bin_{b}_count"] = float(len(members))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Settings and everything that decides future draws, as plain lists (JSON-friendly).

        `rng` is None when the scheduler draws from the module-level `random`, whose state
        belongs to the program, not to the scheduler.
        """
        rng = None
        if isinstance(self._rng, random.Random):
            version, internal, gauss = self._rng.getstate()
            rng = [version, list(internal), gauss]
        return {
            **self.settings(),
            "keys": list(self._keys),
            "ema": [None if x != x else x for x in self._ema],
            "members": [m.tolist() for m in self._members],
            "unseen": self._unseen.tolist(),
            "cuts": [None if c == -_INF else c for c in self._cuts],
            "bin_weight": list(self._bin_weight),
            "total_updates": self._total_updates,
            "rng": rng,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint: its settings and scores, like Atropos, and its generator.

        Reads this class's `state_dict()` and Atropos's (`item_scores` as {key: [ema, count]}).
        From an Atropos checkpoint the items' counts add up to `total_updates`, and its saved
        bin boundaries are recomputed as balanced quantiles. A checkpoint without a generator
        state (Atropos's, or a scheduler drawing from `random`) leaves the generator as it is.
        """
        if "item_scores" in state:
            self._load_atropos(state)
        else:
            self._load_honed(state)

    def _load_atropos(self, state: dict[str, Any]) -> None:
        scores = state["item_scores"]
        keys = list(scores)
        ema = np.array([float(scores[key][0]) for key in keys], dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(ema))
        if bad.size:
            key = keys[bad[0]]
            raise ValueError(f"curriculum checkpoint: item {key!r} has score {scores[key][0]!r}")
        self._set_settings(
            strategy=state["strategy"],
            competence="gaussian",
            n_bins=state["n_bins"],
            temperature=state["temperature"],
            ema_alpha=state["ema_alpha"],
            competence_threshold=state["competence_threshold"],
            unseen_share=self._unseen_share,
        )
        n, k = len(keys), self._n_bins
        self._keys = keys
        self._ids = {key: i for i, key in enumerate(keys)}
        self._ema = array("d", ema.tobytes())
        self._bin = array("q", np.zeros(n, dtype=np.int64).tobytes())
        self._pos = array("q", np.arange(n, dtype=np.int64).tobytes())
        self._members = [array("q", self._pos.tobytes())] + [array("q") for _ in range(k - 1)]
        self._unseen = array("q")
        self._n_seen = n
        self._total_updates = sum(int(scores[key][1]) for key in keys)
        self._derive()
        self._set_cuts([-_INF] * (k - 1))
        self.rebin()

    def _load_honed(self, state: dict[str, Any]) -> None:
        n_bins = state["n_bins"]
        if len(state["members"]) != n_bins:
            raise ValueError(
                f"curriculum checkpoint has n_bins={n_bins} but {len(state['members'])} bins"
            )
        # Checkpoints written before settings were saved hold only strategy and n_bins; their
        # `competence_based` was the Platanios competence.
        self._set_settings(
            strategy=state["strategy"],
            competence=state.get("competence", "platanios"),
            n_bins=n_bins,
            temperature=state.get("temperature", self._temperature),
            ema_alpha=state.get("ema_alpha", self._ema_alpha),
            competence_threshold=state.get("competence_threshold", self._competence_threshold),
            unseen_share=state.get("unseen_share", self._unseen_share),
        )
        n = len(state["keys"])
        ema = np.array([math.nan if x is None else x for x in state["ema"]], dtype=np.float64)
        members = [np.asarray(m, dtype=np.int64) for m in state["members"]]
        unseen = np.asarray(state["unseen"], dtype=np.int64)
        bin_of = np.full(n, _FRESH, dtype=np.int64)
        pos_of = np.full(n, -1, dtype=np.int64)
        for b, ids in [*enumerate(members), (_UNSEEN, unseen)]:
            bin_of[ids] = b
            pos_of[ids] = np.arange(ids.size)

        self._keys = list(state["keys"])
        self._ids = {key: i for i, key in enumerate(self._keys)}
        self._ema = array("d", ema.tobytes())
        self._bin = array("q", bin_of.tobytes())
        self._pos = array("q", pos_of.tobytes())
        self._members = [array("q", m.tobytes()) for m in members]
        self._unseen = array("q", unseen.tobytes())
        self._n_seen = sum(m.size for m in members)
        self._set_cuts([-_INF if c is None else float(c) for c in state["cuts"]])
        self._derive()
        laid_out = np.concatenate(members)
        self._recount(ema[laid_out], [0, *itertools.accumulate(m.size for m in members)])
        if self._weighs_bins:  # the running sums, bit for bit
            self._bin_weight = [float(w) for w in state["bin_weight"]]
        self._total_updates = int(state["total_updates"])
        self._settled_at = -1  # the sizes are checked at the next read
        if state["rng"] is not None:
            version, internal, gauss = state["rng"]
            if not isinstance(self._rng, random.Random):
                self._rng = random.Random()
            self._rng.setstate((version, tuple(internal), gauss))

    def _set_settings(
        self,
        *,
        strategy: str,
        competence: str,
        n_bins: int,
        temperature: float,
        ema_alpha: float,
        competence_threshold: float,
        unseen_share: float | None,
    ) -> None:
        """Validated settings from a checkpoint, without touching the items (being replaced)."""
        self._strategy = _strategy_value(strategy)
        self._competence = _competence_value(competence)
        self._n_bins = _n_bins_value(n_bins)
        self._temperature = _temperature_value(temperature)
        self._ema_alpha = _ema_alpha_value(ema_alpha)
        self._competence_threshold = _finite("competence_threshold", competence_threshold)
        self._unseen_share = _unseen_share_value(unseen_share)


def _strategy_value(strategy: str) -> str:
    try:
        return CurriculumStrategy(strategy).value
    except ValueError:
        raise ValueError(
            f"unknown curriculum strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        ) from None


def _competence_value(competence: str) -> str:
    if competence not in COMPETENCE:
        raise ValueError(
            f"unknown curriculum competence {competence!r}; valid: {', '.join(COMPETENCE)}"
        )
    return competence


def _n_bins_value(n_bins: int) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"curriculum n_bins must be an integer >= 1, got {n_bins!r}")
    return n_bins


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"curriculum {name} must be a finite number, got {value!r}")
    return value


def _temperature_value(temperature: float) -> float:
    return max(_finite("temperature", temperature), MIN_TEMPERATURE)


def _ema_alpha_value(ema_alpha: float) -> float:
    return min(max(_finite("ema_alpha", ema_alpha), 0.0), 1.0)


def _unseen_share_value(unseen_share: float | None) -> float | None:
    if unseen_share is not None and not 0.0 <= unseen_share <= 1.0:
        raise ValueError(f"curriculum unseen_share must be in [0, 1] or None, got {unseen_share!r}")
    return unseen_share


def _learnability(score: float) -> float:
    """p(1 - p) with p the score clipped to [0, 1], floored at FRONTIER_FLOOR."""
    p = 0.0 if score < 0.0 else (1.0 if score > 1.0 else score)
    w = p - p * p
    return w if w > FRONTIER_FLOOR else FRONTIER_FLOOR
