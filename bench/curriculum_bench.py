"""Throughput of `CurriculumScheduler` with a million tracked items.

What is timed, per strategy (`competence_based` both ways; targets from issues 3 and 15:
≥ 200,000 updates/s, ≥ 100,000 bin + item draws/s, and bins that are exact quantiles whenever
they are read):

- first scores: one `update` per registered item (every item enters a bin);
- updates: random items, each scored like a GRPO group of 8 pass/fail rollouts of an item with
  its own success rate (updates never rebin: column "rebins" counts any that did);
- draws: `sample_item` in batches of `--batch` at one training step each, as a trainer draws;
  the first draw settles the bins after the updates above (one rebin, inside the timing);
- draws, new step each: every draw at a new step, so the per-step bin distribution is never
  reused (the worst case);
- training steps: `--batch` draws and then `--batch` updates of the drawn items, per step, as
  the GRPO loop alternates them: every step's first draw settles the bins the previous step's
  updates unbalanced (column "step rebins" counts the rebins this took).

Rates are wall-clock; CPU-time rates (this process only) are in brackets, since on a shared
machine other processes take the CPU away. Run from the repository root:

    PYTHONPATH=src python bench/curriculum_bench.py
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np

from honed.sampling.curriculum import COMPETENCE, STRATEGIES, CurriculumScheduler


def timed(n: int, work: Callable[[], None]) -> tuple[float, float]:
    """(wall-clock rate, CPU-time rate) of `work`, which performs n operations."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)


def bench(
    strategy: str, competence: str, keys: list[str], args: argparse.Namespace
) -> dict[str, str]:
    rng = np.random.default_rng(args.seed)
    n = len(keys)
    success = rng.random(n)
    first = (rng.binomial(8, success) / 8).tolist()
    picks = rng.integers(0, n, args.updates)
    later_keys = [keys[i] for i in picks]
    later = (rng.binomial(8, success[picks]) / 8).tolist()

    cur = CurriculumScheduler(strategy, competence=competence, seed=args.seed)
    cur.register_items(keys)
    rebins = 0
    rebin = cur.rebin

    def counting_rebin() -> None:
        nonlocal rebins
        rebins += 1
        rebin()

    cur.rebin = counting_rebin  # type: ignore[method-assign]
    update = cur.update

    def first_scores() -> None:
        for key, score in zip(keys, first, strict=True):
            update(key, score)

    def updates() -> None:
        for key, score in zip(later_keys, later, strict=True):
            update(key, score)

    sample = cur.sample_item
    steps = args.draws // args.batch

    def batched_draws() -> None:
        for step in range(steps):
            for _ in range(args.batch):
                sample(step, steps)

    def new_step_draws() -> None:
        for step in range(args.draws):
            sample(step, args.draws)

    step_scores = rng.random((args.steps, args.batch)).tolist()

    def training_steps() -> None:
        for step, scores in enumerate(step_scores):
            drawn = [sample(step, args.steps) for _ in range(args.batch)]
            for key, score in zip(drawn, scores, strict=True):
                update(key, score)

    row = {"strategy": strategy if strategy != "competence_based" else f"{strategy} ({competence})"}
    row["first scores/s"] = "{:,.0f} [{:,.0f}]".format(*timed(n, first_scores))
    rebins = 0
    row["updates/s"] = "{:,.0f} [{:,.0f}]".format(*timed(args.updates, updates))
    row["rebins"] = str(rebins)
    row["draws/s"] = "{:,.0f} [{:,.0f}]".format(*timed(steps * args.batch, batched_draws))
    row["draws/s, new step each"] = "{:,.0f} [{:,.0f}]".format(*timed(args.draws, new_step_draws))
    rebins = 0
    row["training steps/s"] = "{:,.1f} [{:,.1f}]".format(*timed(args.steps, training_steps))
    row["step rebins"] = str(rebins)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=64, help="draws per training step")
    parser.add_argument("--steps", type=int, default=50, help="training steps (draw + update)")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"{args.items:,} items, {args.updates:,} updates, {args.draws:,} draws, "
        f"{args.steps:,} training steps of {args.batch}; "
        f"Python {platform.python_version()}, NumPy {np.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    keys = [f"item-{i}" for i in range(args.items)]
    variants = [
        (strategy, competence)
        for strategy in args.strategies
        for competence in (COMPETENCE if strategy == "competence_based" else ("gaussian",))
    ]
    rows = [bench(strategy, competence, keys, args) for strategy, competence in variants]
    columns = list(rows[0])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(r[c].ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
