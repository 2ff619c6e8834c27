"""Rollouts needed to reach a held-out accuracy: `frontier` curriculum against `uniform`.

The environments (`--env NAME:LEVELS:WEIGHT`, repeatable; by default `sort` with strings of 2 to
20 digits) have items of many difficulty levels. The supervised warm-start sees only levels up
to `--sft-max-level` (10): after it the short strings are mostly solved, the middle ones
sometimes, and strings longer than the warm-start ever showed are never solved (p = 0). Those
groups have no reward spread and carry no gradient. `frontier` draws items by learnability
p(1 − p), `uniform` draws every item alike; nothing else differs between the two runs of a seed.

Items must repeat for a per-item estimate of p to exist, so the GRPO training split is small
(`--train-per-level` items per level) and drawn from many times. The warm-start learns from a
larger split (`--sft-train-per-level` items per level), minus every held-out item. Held-out
accuracy is measured on the validation split (`--validation-size` items per environment,
disjoint from every training item), greedy, as the mean over environments of exact success.

Rollouts are counted where they are spent, in generation. With dynamic sampling (DAPO, on by
default) a step keeps drawing groups until `--prompts` of them have reward spread, at most
`--max-rounds` rounds: every group drawn counts (`sampling/rollouts_total` in the run's
metrics), kept or not, times `--generations`. Without it a step draws exactly `--prompts`
groups, so the count is steps × prompts × generations. Both strategies get the same budget,
`--max-rollouts` completions (`trainer.max_rollouts`), not the same number of steps: a strategy
whose steps cost fewer rollouts takes more steps within it.

For every seed both strategies start from the same warm-started policy; held-out accuracy is
measured every `--eval-every` steps, and the first evaluation at which it has risen `--gain`
above the warm-start's accuracy gives the rollouts generated up to and including that step. The
target is relative because the warm-start's accuracy differs by seed. One seed's crossing point
is noisy (its curve moves by a few points between evaluations), so the seeds are also averaged
along the rollouts axis: at every rollout count where some seed was evaluated, the mean over
seeds of each one's latest accuracy so far; the target is the mean warm-start accuracy +
`--gain`.

    PYTHONPATH=src python bench/sample_efficiency.py --jobs 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from honed.config import Config
from honed.envs.base import Environment
from honed.models.policy import Policy
from honed.rl.sft import run_sft
from honed.rl.trainer import GRPOTrainer, build_envs
from honed.runs.rundir import RunDir
from honed.types import Item, derive_seed

STRATEGIES = ("uniform", "frontier")


def env_spec(text: str) -> dict:
    """`sort:2-14:3` or `addition:2,3:1` -> an environment entry (name, levels, weight)."""
    try:
        name, levels, weight = text.split(":")
        if "-" in levels:
            lo, hi = (int(x) for x in levels.split("-"))
            level_list = list(range(lo, hi + 1))
        else:
            level_list = [int(x) for x in levels.split(",")]
        return {"name": name, "levels": level_list, "weight": float(weight)}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--env wants NAME:LEVELS:WEIGHT (levels as 2-14 or 2,3,5), got {text!r}"
        ) from None


def bench_config(
    seed: int, strategy: str, args: argparse.Namespace, sft_pool: bool = False
) -> Config:
    env_args = {"validation_size": args.validation_size}

    def train_size(env: dict) -> dict:  # 0: the environment's default split (4000 items)
        per_level = args.sft_train_per_level if sft_pool else args.train_per_level
        return {"train_size": per_level * len(env["levels"])} if per_level else {}

    return Config.model_validate(
        {
            "seed": seed,
            "torch_threads": args.threads,
            "envs": [
                {
                    "name": e["name"],
                    "weight": e["weight"],
                    "args": {"levels": e["levels"], **env_args, **train_size(e)},
                }
                for e in args.env
            ],
            "sft": {"steps": args.sft_steps, "batch_size": 64, "learning_rate": 2e-3},
            "trainer": {
                "max_steps": args.max_steps,
                "max_rollouts": args.max_rollouts,
                "prompts_per_step": args.prompts,
                "num_generations": args.generations,
                "learning_rate": args.lr,
                "warmup_steps": 5,
                "max_completion_length": args.max_completion_length,
                "temperature": args.temperature,
                "dynamic_sampling": args.dynamic_sampling,
                "max_sampling_rounds": args.max_rounds,
            },
            "curriculum": {"strategy": strategy},
            "eval": {"split": "validation", "num_items": None, "every": args.eval_every},
            "checkpoint": {"every": 0},
            "logging": {"progress": False, "samples_per_step": 0},
        }
    )


def run(seed: int, strategy: str, warm: Path, work: Path, args: argparse.Namespace) -> dict:
    config = bench_config(seed, strategy, args)
    run_dir = RunDir(work / f"{strategy}-{seed}")
    run_dir.checkpoints.mkdir(parents=True)
    shutil.copytree(warm, run_dir.warmstart)  # same starting policy for both strategies
    started = time.perf_counter()
    summary = GRPOTrainer(config, run_dir).train()
    rows = run_dir.read_jsonl(run_dir.metrics_path)
    # Every group generated, kept or not: the cumulative rollouts after each step.
    spent = {0: 0} | {
        r["step"]: int(r["sampling/rollouts_total"]) for r in rows if "sampling/rollouts_total" in r
    }
    total = summary["rollouts"]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    later = sorted((step, acc, spent[step]) for step, acc in evals.items() if step > 0)
    # (step, held-out accuracy, rollouts generated so far) at every evaluation
    curve = [(0, summary["initial_eval"]["accuracy"], 0), *later]
    reached = first_reaching(curve, args.gain)
    return {
        "seed": seed,
        "strategy": strategy,
        "warm_start_accuracy": curve[0][1],
        "final_accuracy": curve[-1][1],
        "curve": curve,
        "step_to_target": None if reached is None else reached[0],
        "rollouts_to_target": None if reached is None else reached[2],
        "rollouts_total": total,
        "seconds": round(time.perf_counter() - started, 1),
    }


class _Pool:
    """An environment's training items for the warm-start, with every held-out item removed."""

    def __init__(self, env: Environment, held_out: set[str], max_level: int) -> None:
        self.env = env
        self.train = [
            item
            for item in env.items("train")
            if item.key not in held_out and (not max_level or (item.level or 0) <= max_level)
        ]

    def items(self, split: str) -> list[Item]:
        return self.train if split == "train" else []

    def sft_examples(self, item: Item) -> list[tuple[str, str]]:
        return self.env.sft_examples(item)


def first_reaching(curve: list[tuple[int, float, int]], gain: float) -> tuple | None:
    """The first evaluation after GRPO began at or above the warm-start's accuracy + `gain`."""
    target = curve[0][1] + gain - 1e-9  # accuracies are means of 0/1: compare without rounding
    return next((point for point in curve[1:] if point[1] >= target), None)


def ratio_cell(results: dict[str, dict], gain: float) -> tuple[str, float | None]:
    """frontier / uniform rollouts to the target; a bound when only one strategy reached it."""
    hit = {s: first_reaching(results[s]["curve"], gain) for s in STRATEGIES}
    total = {s: results[s]["rollouts_total"] for s in STRATEGIES}
    if hit["uniform"] and hit["frontier"]:
        value = hit["frontier"][2] / hit["uniform"][2]
        return f"{value:.2f}", value
    if hit["frontier"]:  # uniform needs more than everything it generated
        return f"< {hit['frontier'][2] / total['uniform']:.2f}", None
    if hit["uniform"]:
        return f"> {total['frontier'] / hit['uniform'][2]:.2f}", None
    return "–", None


def seed_mean(runs: list[dict]) -> dict:
    """One strategy's runs averaged over seeds along the rollouts axis.

    Runs with a rollout budget stop at different steps, so curves are aligned by rollouts: at
    every rollout count where some run was evaluated (up to the smallest total, where every
    run is still defined), each run contributes its latest accuracy so far, never a value it
    has not measured yet. Points are (None, mean accuracy, rollouts); the first is the mean
    warm-start accuracy at 0 rollouts, which the target is relative to.
    """
    end = min(r["rollouts_total"] for r in runs)
    grid = sorted({point[2] for r in runs for point in r["curve"] if point[2] <= end})
    curve = []
    for spent in grid:
        latest = [[p[1] for p in r["curve"] if p[2] <= spent][-1] for r in runs]
        curve.append((None if spent else 0, statistics.fmean(latest), spent))
    return {"curve": curve, "rollouts_total": end}


def plot_curves(
    by_seed: dict[int, dict[str, dict]], means: dict[str, dict], gain: float, out: Path
) -> None:
    """Held-out accuracy against rollouts generated: every seed thin, the seed mean thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"uniform": "#6a51a3", "frontier": "#d94801"}
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for strategy, colour in colours.items():
        for row in by_seed.values():
            _, accuracy, spent = zip(*row[strategy]["curve"], strict=True)
            ax.plot(spent, accuracy, color=colour, linewidth=0.8, alpha=0.35)
        _, accuracy, spent = zip(*means[strategy]["curve"], strict=True)
        ax.step(spent, accuracy, where="post", color=colour, linewidth=2.2, label=strategy)
    target = means["uniform"]["curve"][0][1] + gain
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"warm-start + {gain:g}")
    ax.set_xlabel("rollouts generated (completions, kept or filtered)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"frontier against uniform: {len(by_seed)} seeds (thin) and their mean (thick)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def warm_start(seed: int, work: Path, args: argparse.Namespace) -> tuple[Path, dict]:
    """One supervised warm-start per seed, shared by both strategies.

    Its examples come from the environments' training split at `--sft-train-per-level` items per
    level (the GRPO training split is small so that items repeat; a warm-start on it alone would
    memorise it), minus every validation and test item of the GRPO environments.
    """
    config = bench_config(seed, "uniform", args)
    trainer = GRPOTrainer(config, RunDir(work / f"warm-{seed}"))
    trainer.run.create()
    if not args.sft_train_per_level:  # the GRPO run's own training split
        trainer.warm_start()
        return trainer.run.warmstart, {"sft_examples": None, "held_out_removed": 0}
    held_out = {
        item.key
        for env in trainer.envs.values()
        for split in ("validation", "test")
        for item in env.items(split)
    }
    sft_config = bench_config(seed, "uniform", args, sft_pool=True)
    pools = {
        name: _Pool(env, held_out, args.sft_max_level)
        for name, env in build_envs(sft_config).items()
    }
    removed = sum(
        1 for pool in pools.values() for item in pool.env.items("train") if item.key in held_out
    )
    policy = Policy.from_config(config.policy, config.seed)
    stats = run_sft(policy, pools, config.sft, derive_seed(config.seed, "sft"))
    policy.save(trainer.run.warmstart)
    return trainer.run.warmstart, {
        "sft_examples": int(stats["sft/examples"]),
        "held_out_removed": removed,
    }


def run_seed(seed: int, work: Path, args: argparse.Namespace) -> list[dict]:
    """One seed: its warm-start, then each strategy from it."""
    warm, warm_info = warm_start(seed, work, args)
    print(json.dumps({"seed": seed, "warm_start": warm_info}), flush=True)
    results = []
    for strategy in args.strategies:
        results.append(run(seed, strategy, warm, work, args))
        print(json.dumps(results[-1]), flush=True)
    return results


def describe(args: argparse.Namespace) -> str:
    envs = ", ".join(
        f"{e['name']} levels {e['levels'][0]}-{e['levels'][-1]} (weight {e['weight']:g})"
        for e in args.env
    )
    sampling = (
        f"dynamic sampling up to {args.max_rounds} rounds"
        if args.dynamic_sampling
        else "fixed batch"
    )
    train = f"{args.train_per_level} per level" if args.train_per_level else "4000 per environment"
    warm = (
        f"{args.sft_train_per_level} per level" if args.sft_train_per_level else "the train split"
    )
    levels = f"levels <= {args.sft_max_level}" if args.sft_max_level else "all levels"
    return (
        f"{envs}; warm-start {args.sft_steps} steps on {warm}, {levels}; "
        f"GRPO train items {train}, validation {args.validation_size} per environment; "
        f"{args.prompts} prompts x {args.generations} per step at temperature "
        f"{args.temperature}, {sampling}; {args.max_rollouts:,} rollouts (at most {args.max_steps} steps), lr {args.lr}, "
        f"eval every {args.eval_every}; target warm-start + {args.gain}"
    )


def crossing_cell(result: dict, gain: float) -> str:
    """Rollouts (step) at which this run's curve first reached warm-start + `gain`, computed
    from the curve (so `--results FILE --gain G` reports G's crossings), or the censored bound
    when it never did within its budget."""
    point = first_reaching(result["curve"], gain)
    if point is None:
        return f"> {result['rollouts_total']:,} (censored)"
    return f"{point[2]:,} ({point[0]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument(
        "--env",
        type=env_spec,
        action="append",
        help="NAME:LEVELS:WEIGHT, repeatable (default: sort:2-20:1)",
    )
    parser.add_argument(
        "--train-per-level", type=int, default=100, help="0: the environments' default (4000)"
    )
    parser.add_argument("--validation-size", type=int, default=1000, help="per environment")
    parser.add_argument("--prompts", type=int, default=64, help="groups per update")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--dynamic-sampling", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument(
        "--max-rollouts", type=int, default=200_000, help="each run's budget in completions"
    )
    parser.add_argument(
        "--max-steps", type=int, default=400, help="a cap; the rollout budget ends a run first"
    )
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--gain", type=float, default=0.05, help="accuracy above the warm-start")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--temperature", type=float, default=0.7, help="rollout sampling")
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument(
        "--sft-train-per-level",
        type=int,
        default=1000,
        help="warm-start examples per level (0: the GRPO training split itself)",
    )
    parser.add_argument(
        "--sft-max-level", type=int, default=10, help="warm-start on levels up to this (0: all)"
    )
    parser.add_argument("--max-completion-length", type=int, default=22)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--jobs", type=int, default=1, help="seeds run at once, each in its own process"
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON")
    parser.add_argument(
        "--results", type=Path, help="report a JSON written by --out again instead of running"
    )
    parser.add_argument("--plot", type=Path, help="draw accuracy against rollouts to this PNG")
    parser.add_argument("--work", type=Path, help="keep the run directories here")
    args = parser.parse_args()
    if not args.env:
        args.env = [env_spec("sort:2-20:1")]

    if args.results:  # report a saved run again (another --gain, a plot) without running it
        saved = json.loads(args.results.read_text())
        keep = {"gain": args.gain, "plot": args.plot}
        args = argparse.Namespace(**(saved["setting"] | keep))
        report(args, saved["results"])
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        if args.jobs > 1:  # seeds are independent: one process per seed, `--jobs` at a time
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
                runs = pool.map(
                    run_seed, args.seeds, [work] * len(args.seeds), [args] * len(args.seeds)
                )
                results = [res for seed_results in runs for res in seed_results]
        else:
            results = [res for seed in args.seeds for res in run_seed(seed, work, args)]

    if args.out:
        setting = vars(args) | {"env": args.env}
        args.out.write_text(
            json.dumps({"setting": setting, "results": results}, indent=2, default=str)
        )
    report(args, results)
    print(f"elapsed: {time.perf_counter() - started:.0f} s")


def report(args: argparse.Namespace, results: list[dict]) -> None:
    """The per-seed table, the seed mean, other targets, and the plot if asked for."""
    print(f"\nsetting: {describe(args)}")
    if len(args.strategies) < len(STRATEGIES):
        return
    by_seed = {
        seed: {r["strategy"]: r for r in results if r["seed"] == seed} for seed in args.seeds
    }
    print(f"rollouts to raise held-out accuracy {args.gain} above the warm-start\n")
    header = ["seed", "warm-start accuracy"]
    header += [f"{s}: rollouts to target (step)" for s in STRATEGIES]
    header += ["frontier / uniform", "final accuracy uniform / frontier", "rollouts in all u / f"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ratios = []
    for seed, row in by_seed.items():
        cell, value = ratio_cell(row, args.gain)
        if value is not None:
            ratios.append(value)
        cells = [str(seed), f"{row['uniform']['warm_start_accuracy']:.3f}"]
        cells += [crossing_cell(row[s], args.gain) for s in STRATEGIES]
        cells += [cell, " / ".join(f"{row[s]['final_accuracy']:.3f}" for s in STRATEGIES)]
        cells += [" / ".join(f"{row[s]['rollouts_total']:,}" for s in STRATEGIES)]
        print("| " + " | ".join(cells) + " |")
    if ratios:
        print(
            f"\nmedian ratio frontier / uniform: {statistics.median(ratios):.2f} "
            f"(over the {len(ratios)} of {len(by_seed)} seeds where both reached the target)"
        )
    means = {s: seed_mean([row[s] for row in by_seed.values()]) for s in STRATEGIES}
    hit = {s: first_reaching(means[s]["curve"], args.gain) for s in STRATEGIES}
    print(
        f"\nmean over the {len(by_seed)} seeds (latest accuracy of each, along the rollouts axis):"
    )
    print(f"  warm-start accuracy {means['uniform']['curve'][0][1]:.3f}")
    for s in STRATEGIES:
        reached = "not reached" if hit[s] is None else f"{hit[s][2]:,}"
        print(f"  {s}: rollouts to target {reached}")
    print(f"  frontier / uniform: {ratio_cell(means, args.gain)[0]}")
    print("\nthe same ratios for other targets (warm-start + gain): per seed | seed mean")
    for gain in (0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08):
        cells = [ratio_cell(row, gain)[0] for row in by_seed.values()]
        print(f"  +{gain:.2f}: " + ", ".join(cells) + f" | {ratio_cell(means, gain)[0]}")
    if args.plot:
        plot_curves(by_seed, means, args.gain, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
