"""Rollouts needed to reach a held-out accuracy: `frontier` curriculum against `uniform`.

The environment mix has items of several difficulty levels: sorting strings of 4–10 digits
(after a short warm-start the short ones are mostly solved, the long ones rarely) and 2-digit
addition (rarely solved by the tiny policy). Under `uniform`, many GRPO
groups are all-correct or all-wrong and carry no gradient; `frontier` draws items by
learnability p(1 − p).

For every seed both strategies start from the same warm-started policy; held-out accuracy (the
mean over environments of exact success on the validation split, greedy decoding) is measured
every `--eval-every` steps, and the first step at which it has risen `--gain` above the
warm-start's accuracy gives the rollouts used (steps × prompts_per_step × num_generations). The
target is relative because both strategies share the warm-start, whose accuracy differs by seed.

    python bench/sample_efficiency.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from honed.config import Config
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

STRATEGIES = ("uniform", "frontier")


def bench_config(seed: int, strategy: str, args: argparse.Namespace) -> Config:
    return Config.model_validate(
        {
            "seed": seed,
            "torch_threads": args.threads,
            "envs": [
                {"name": "sort", "weight": 3.0, "args": {"levels": [4, 5, 6, 7, 8, 9, 10]}},
                {"name": "addition", "weight": 1.0, "args": {"levels": [2]}},
            ],
            "sft": {"steps": args.sft_steps, "batch_size": 64, "learning_rate": 2e-3},
            "trainer": {
                "max_steps": args.max_steps,
                "prompts_per_step": args.prompts,
                "num_generations": 8,
                "learning_rate": 3e-4,
                "warmup_steps": 5,
                "max_completion_length": 12,
            },
            "curriculum": {"strategy": strategy},
            "eval": {"split": "validation", "num_items": 200, "every": args.eval_every},
            "checkpoint": {"every": 0},
            "logging": {"progress": False, "samples_per_step": 0},
        }
    )


def run(seed: int, strategy: str, warm: Path, work: Path, args) -> dict:
    config = bench_config(seed, strategy, args)
    run_dir = RunDir(work / f"{strategy}-{seed}")
    run_dir.checkpoints.mkdir(parents=True)
    shutil.copytree(warm, run_dir.warmstart)  # same starting policy for both strategies
    started = time.perf_counter()
    summary = GRPOTrainer(config, run_dir).train()
    curve = [(0, summary["initial_eval"]["accuracy"])] + [
        (r["step"], r["eval/accuracy"])
        for r in run_dir.read_jsonl(run_dir.metrics_path)
        if "eval/accuracy" in r and r["step"] > 0
    ]
    per_step = args.prompts * 8
    target = curve[0][1] + args.gain
    reached = next((step for step, acc in curve if acc >= target), None)
    return {
        "seed": seed,
        "strategy": strategy,
        "curve": curve,
        "rollouts_to_target": None if reached is None else reached * per_step,
        "seconds": round(time.perf_counter() - started, 1),
    }


def warm_start(seed: int, work: Path, args) -> Path:
    config = bench_config(seed, "uniform", args)
    trainer = GRPOTrainer(config, RunDir(work / f"warm-{seed}"))
    trainer.run.create()
    trainer._warm_start()
    return trainer.run.warmstart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--gain", type=float, default=0.05, help="accuracy above the warm-start")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--sft-steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, help="also write the results as JSON")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in args.seeds:
            warm = warm_start(seed, work, args)
            for strategy in STRATEGIES:
                res = run(seed, strategy, warm, work, args)
                results.append(res)
                print(json.dumps(res), flush=True)

    print(
        f"\nrollouts to raise held-out accuracy {args.gain} above the warm-start "
        f"({args.prompts} prompts x 8 generations per step, at most {args.max_steps} steps)\n"
    )
    print(f"| seed | {' | '.join(STRATEGIES)} | frontier / uniform |")
    print(f"|---|{'---|' * len(STRATEGIES)}---|")
    ratios = []
    for seed in args.seeds:
        row = {r["strategy"]: r["rollouts_to_target"] for r in results if r["seed"] == seed}
        cells = [str(row[s]) if row[s] is not None else "not reached" for s in STRATEGIES]
        ratio = ""
        if row["uniform"] and row["frontier"]:
            ratios.append(row["frontier"] / row["uniform"])
            ratio = f"{ratios[-1]:.2f}"
        print(f"| {seed} | {' | '.join(cells)} | {ratio} |")
    if ratios:
        print(f"\nmedian ratio frontier/uniform: {statistics.median(ratios):.2f}")
    final = {s: [r["curve"][-1][1] for r in results if r["strategy"] == s] for s in STRATEGIES}
    print("final accuracy:", {s: [round(a, 3) for a in v] for s, v in final.items()})
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
