"""Curriculum over the items of one environment: which difficulty bin to practise, and which item.

Every item carries an exponential moving average (EMA) of its reward; higher means easier. Items
are split into `n_bins` quantile bins, bin 0 the easiest, and a strategy turns training progress
(and, for some strategies, the bins' contents) into a distribution over bins. `sample_item` draws
a bin from it and then an item inside that bin, or an item never scored yet.

Cost at N tracked items and K bins (why it scales to millions of items):

- `update` is O(log K): it changes one EMA and, when the new value leaves its bin's score
  range, moves the item to the nearest bin whose range holds it (swap-and-pop on the bins'
  member arrays). Items therefore always sit in a bin that matches their score; only the bins'
  *sizes* drift between rebins.
- A rebin (new quantile cut points, every bin's members) is one NumPy partition, O(N), and runs
  after `REBIN_FRACTION · N` updates: amortised O(1) per update.
- `sample_item` is O(1) expected: the bin distribution (O(K)) is computed once per step and
  reused until the next update, then a bin is found by bisection and an item by index.

Bins are cut at interior quantiles of the scores ranked from easiest to hardest: with N items
and K bins, bin i holds ranks [round(i·N/K), round((i+1)·N/K)), so every bin holds ⌊N/K⌋ or
⌈N/K⌉ items right after a rebin, ties or not (tied items are split between the bins they
straddle, deterministically). A bin's score range is [c_{i+1}, c_i], c_i being the score at
the first rank of bin i.

Strategies (`bin_probabilities` gives the exact distribution, before empty bins are skipped):

- `uniform`: every bin alike, hence (with balanced bins) every tracked item alike.
- `easy_first`: weight ∝ exp(-2i/(K-1)) at the start of training, mixed linearly into the
  uniform distribution as `current_step / total_steps` goes from 0 to 1.
- `competence_based`: Platanios et al. 2019 (arXiv 1904.03746). The model may practise the
  easiest fraction c of the items (difficulty *percentiles*), uniformly; with equal bins that
  gives bin i the weight clip(c·K − i, 0, 1). The competence c is the larger of

  * the paper's square-root schedule c(t) = min(1, sqrt(t·(1 − c0²) + c0²)), t = step/total,
    c0 = `INITIAL_COMPETENCE`, which reaches all the data by the end of training, and
  * the measured competence: the fraction of tracked items whose EMA reward is at least
    `competence_threshold` (the items already mastered, which are the easiest ones), plus one
    bin's width so that the next level is practised. A policy that learns fast is thereby not
    held back by the schedule.

- `frontier`: weight ∝ learnability p(1 − p) per item, where p is the item's estimated success
  rate. This assumes rewards in [0, 1] (a success rate, or a mean of pass/fail rollouts): p is
  the EMA clipped to [0, 1]. Items that every rollout solves (p = 1) or fails (p = 0) give a GRPO
  group zero advantage, so they get only the floor weight `FRONTIER_FLOOR` (a little
  exploration: a failed item may become solvable). A bin is drawn by its summed weight and an
  item inside it by rejection against the bin's largest possible weight: at temperature 1 that
  is exact per-item p(1 − p) sampling, in O(1) expected tries (at most 0.25 / `FRONTIER_FLOOR`).

`temperature` T reshapes the bin distribution as p^(1/T): below 1 it sharpens, above 1 it
flattens.

Items never scored: `register_items` declares the candidate keys. A share of the draws goes to
them, chosen uniformly: `unseen_share` when given, otherwise the share they would get as
average items (each unseen item counts like one tracked item; under `frontier`, like an item
with p = 0.5, the most learnable, so that new items are explored before known ones are
exploited). Their difficulty is unknown, so `get_item_bin` reports the middle bin for them.
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

STRATEGIES = ("uniform", "easy_first", "competence_based", "frontier")
MIN_TEMPERATURE = 0.01
# Rebin after this fraction of N updates: rare at a million items (well under a microsecond per
# update, amortised) and frequent while N is small, when the bins change most.
REBIN_FRACTION = 0.25
# Platanios et al. use an initial competence of 0.01.
INITIAL_COMPETENCE = 0.01
FRONTIER_FLOOR = 0.01
_UNSEEN_FRONTIER_WEIGHT = 0.25  # p(1 - p) at the uninformed prior p = 0.5

# Bin index of an item that was registered but never scored (it sits in the unseen list).
_UNSEEN = -1
# Bin index of a key met for the first time in `update` (in no list yet).
_FRESH = -2
_INF = math.inf


class CurriculumScheduler:
    """Per-item difficulty tracking, quantile bins, and bin/item sampling for one environment."""

    def __init__(
        self,
        strategy: str = "uniform",
        n_bins: int = 5,
        temperature: float = 1.0,
        ema_alpha: float = 0.3,
        competence_threshold: float = 0.5,
        *,
        unseen_share: float | None = None,
        seed: int = 0,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(
                f"unknown curriculum strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
            )
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError(f"curriculum n_bins must be an integer >= 1, got {n_bins!r}")
        for name, value in (
            ("temperature", temperature),
            ("ema_alpha", ema_alpha),
            ("competence_threshold", competence_threshold),
        ):
            if not math.isfinite(value):
                raise ValueError(f"curriculum {name} must be a finite number, got {value!r}")
        if unseen_share is not None and not 0.0 <= unseen_share <= 1.0:
            raise ValueError(
                f"curriculum unseen_share must be in [0, 1] or None, got {unseen_share!r}"
            )
        self._strategy = strategy
        self.n_bins = n_bins
        self.temperature = max(float(temperature), MIN_TEMPERATURE)
        self.ema_alpha = min(max(float(ema_alpha), 0.0), 1.0)
        self.competence_threshold = float(competence_threshold)
        self.unseen_share = unseen_share
        self._mid = n_bins // 2
        easy = [math.exp(-2.0 * b / (n_bins - 1)) for b in range(n_bins)] if n_bins > 1 else [1.0]
        self._easy = [e / sum(easy) for e in easy]  # easy_first at step 0
        self._rng = random.Random(seed)

        # Items by integer id, in typed arrays: O(1) per update from Python, and a rebin reads
        # and writes them as NumPy buffers instead of converting a million Python objects.
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        self._ema = array("d")  # NaN until the first score
        self._bin = array("q")  # bin index, or _UNSEEN / _FRESH
        self._pos = array("q")  # index in its bin's member array (or in the unseen array)
        self._members = [array("q") for _ in range(n_bins)]
        self._unseen = array("q")
        self._n_seen = 0
        # Kept up to date between rebins only under the strategy that reads them.
        self._frontier = strategy == "frontier"
        self._competence = strategy == "competence_based"
        self._bin_weight = [0.0] * n_bins  # frontier: summed learnability per bin
        self._n_mastered = 0  # competence_based: tracked items with EMA >= competence_threshold
        self._total_updates = 0
        self._next_rebin = 1  # the value of _total_updates that triggers the next rebin
        self._plan_key: tuple | None = None  # see _plan
        self._plan_cache: tuple[float, list[int], list[float]] = (0.0, [], [1.0])
        self._set_cuts([-_INF] * (n_bins - 1))

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def n_items_tracked(self) -> int:
        """Items with at least one score (registered items never scored are not counted)."""
        return self._n_seen

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
            new = old + self.ema_alpha * (score - old)
            here = old_bin
            if self._frontier:
                self._bin_weight[old_bin] -= _learnability(old)
            elif self._competence and old >= self.competence_threshold:
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
        if self._frontier:
            self._bin_weight[here] += _learnability(new)
        elif self._competence and new >= self.competence_threshold:
            self._n_mastered += 1

        self._total_updates += 1
        if self._total_updates >= self._next_rebin:
            self.rebin()

    def update_batch(self, item_key: str, scores: Sequence[float]) -> None:
        """One update with the group's mean reward; an empty group changes nothing."""
        if len(scores) == 0:
            return
        self.update(item_key, math.fsum(scores) / len(scores))

    def get_item_difficulty(self, key: str) -> float | None:
        i = self._ids.get(key)
        if i is None or self._bin[i] < 0:
            return None
        return self._ema[i]

    def get_item_bin(self, key: str) -> int:
        i = self._ids.get(key)
        if i is None or self._bin[i] < 0:
            return self._mid
        return self._bin[i]

    def bin_probabilities(self, current_step: int = 0, total_steps: int = 1000) -> list[float]:
        """The strategy's distribution over bins at this step, temperature applied."""
        weights = self._tempered(self._strategy_weights(current_step, total_steps))
        total = sum(weights)
        if total <= 0.0:
            return [1.0 / self.n_bins] * self.n_bins
        return [w / total for w in weights]

    def sample_bin(self, current_step: int = 0, total_steps: int = 1000) -> int:
        return self._draw(self.bin_probabilities(current_step, total_steps))

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
        if not self._frontier:
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
        """
        key = (current_step, total_steps, self._total_updates, self.temperature, self.unseen_share)
        if self._plan_key == key:
            return self._plan_cache
        n_unseen = len(self._unseen)
        if self._n_seen + n_unseen == 0:
            raise ValueError("curriculum has no items to sample: call register_items(keys) first")
        p_unseen = 0.0
        if n_unseen:
            p_unseen = 1.0 if self._n_seen == 0 else self._unseen_probability()
        members = self._members
        weights = self._tempered(self._strategy_weights(current_step, total_steps))
        bins: list[int] = []
        cumulative: list[float] = []
        total = 0.0
        for b, w in enumerate(weights):
            if w > 0.0 and members[b]:
                total += w
                bins.append(b)
                cumulative.append(total)
        if not bins and self._n_seen:
            favoured = max(range(self.n_bins), key=weights.__getitem__)
            nearest = min(
                (b for b in range(self.n_bins) if members[b]), key=lambda b: abs(b - favoured)
            )
            bins, cumulative = [nearest], [1.0]
        elif not bins:  # only unseen items: the bins are never reached
            cumulative = [1.0]
        self._plan_key = key
        self._plan_cache = (p_unseen, bins, cumulative)
        return self._plan_cache

    def rebin(self) -> None:
        """Recompute the quantile cut points and every bin's members: O(N) (a partition)."""
        k = self.n_bins
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
        bin_of = np.frombuffer(self._bin, dtype=np.int64).copy()
        pos_of = np.frombuffer(self._pos, dtype=np.int64).copy()
        bin_of[ids] = np.repeat(np.arange(k), sizes)
        pos_of[ids] = np.arange(n) - np.repeat(np.asarray(starts[:k]), sizes)
        self._bin = array("q", bin_of.tobytes())
        self._pos = array("q", pos_of.tobytes())
        self._members = [array("q", ids[starts[b] : starts[b + 1]].tobytes()) for b in range(k)]

        self._recount(scores[order], starts)
        self._plan_key = None
        self._next_rebin = self._total_updates + max(1, math.ceil(REBIN_FRACTION * n))

    def _recount(self, scores: np.ndarray, starts: list[int]) -> None:
        """Exact per-bin learnability and mastered count, from scores laid out bin by bin."""
        if self._frontier:
            p = np.clip(scores, 0.0, 1.0)
            learnability = np.maximum(p - p * p, FRONTIER_FLOOR)
            self._bin_weight = [
                float(learnability[a:b].sum()) for a, b in itertools.pairwise(starts)
            ]
        self._n_mastered = int(np.count_nonzero(scores >= self.competence_threshold))

    def metrics_dict(self) -> dict[str, float]:
        scores = np.array(self._ema, dtype=np.float64)
        scores = scores[~np.isnan(scores)]
        out = {
            "curriculum/items_tracked": float(self._n_seen),
            "curriculum/mean_difficulty": float(scores.mean()) if scores.size else 0.0,
            "curriculum/min_difficulty": float(scores.min()) if scores.size else 0.0,
            "curriculum/max_difficulty": float(scores.max()) if scores.size else 0.0,
            "curriculum/total_updates": float(self._total_updates),
        }
        for b, members in enumerate(self._members):
            out[f"curriculum/bin_{b}_count"] = float(len(members))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides future draws, as plain lists (JSON- and pickle-friendly)."""
        version, internal, gauss = self._rng.getstate()
        return {
            "strategy": self._strategy,
            "n_bins": self.n_bins,
            "keys": list(self._keys),
            "ema": [None if x != x else x for x in self._ema],
            "members": [m.tolist() for m in self._members],
            "unseen": self._unseen.tolist(),
            "cuts": [None if c == -_INF else c for c in self._cuts],
            "bin_weight": list(self._bin_weight),
            "total_updates": self._total_updates,
            "next_rebin": self._next_rebin,
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["n_bins"] != self.n_bins:
            raise ValueError(
                f"curriculum checkpoint has n_bins={state['n_bins']} but this scheduler has "
                f"n_bins={self.n_bins}; set n_bins to the checkpoint's value to resume"
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
        laid_out = np.concatenate(members)
        self._recount(ema[laid_out], np.cumsum([0, *(m.size for m in members)]).tolist())
        if state["strategy"] == self._strategy:  # the running sums, bit for bit
            self._bin_weight = [float(w) for w in state["bin_weight"]]
        self._total_updates = int(state["total_updates"])
        self._next_rebin = int(state["next_rebin"])
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self._plan_key = None

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

    def _strategy_weights(self, current_step: int, total_steps: int) -> list[float]:
        k = self.n_bins
        if self._strategy == "uniform" or k == 1:
            return [1.0] * k
        if self._strategy == "easy_first":
            t = _progress(current_step, total_steps)
            return [(1.0 - t) * e + t / k for e in self._easy]
        if self._strategy == "competence_based":
            x = self._competence_level(current_step, total_steps) * k  # bins' worth allowed
            return [1.0 if x >= b + 1 else (x - b if x > b else 0.0) for b in range(k)]
        return list(self._bin_weight)

    def _competence_level(self, current_step: int, total_steps: int) -> float:
        """The share of items (easiest first) that `competence_based` draws from now."""
        t = _progress(current_step, total_steps)
        c0 = INITIAL_COMPETENCE
        scheduled = min(1.0, math.sqrt(t * (1.0 - c0 * c0) + c0 * c0))
        if self._n_seen == 0:
            return scheduled
        measured = min(1.0, self._n_mastered / self._n_seen + 1.0 / self.n_bins)
        return max(scheduled, measured)

    def _tempered(self, weights: list[float]) -> list[float]:
        if self.temperature == 1.0:
            return weights
        top = max(weights)
        if top <= 0.0:
            return weights
        inv = 1.0 / self.temperature
        return [(w / top) ** inv if w > 0.0 else 0.0 for w in weights]

    def _draw(self, weights: list[float]) -> int:
        u = self._rng.random() * sum(weights)
        last = 0
        for b, w in enumerate(weights):
            if w > 0.0:
                last = b
                u -= w
                if u < 0.0:
                    return b
        return last  # rounding left u at or just above zero: the last positive weight

    def _unseen_probability(self) -> float:
        if self.unseen_share is not None:
            return self.unseen_share
        n_unseen = len(self._unseen)
        if self._strategy == "frontier":
            prior = _UNSEEN_FRONTIER_WEIGHT * n_unseen
            return prior / (prior + sum(self._bin_weight))
        return n_unseen / (n_unseen + self._n_seen)


def _progress(current_step: int, total_steps: int) -> float:
    if total_steps <= 0:
        return 1.0
    return min(max(current_step / total_steps, 0.0), 1.0)


def _learnability(score: float) -> float:
    """p(1 - p) with p the score clipped to [0, 1], floored at FRONTIER_FLOOR."""
    p = 0.0 if score < 0.0 else (1.0 if score > 1.0 else score)
    w = p - p * p
    return w if w > FRONTIER_FLOOR else FRONTIER_FLOOR
