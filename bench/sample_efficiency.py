"""Rollouts needed to reach a held-out accuracy: curriculum strategies against `uniform`.

The environments (`--env NAME:LEVELS:WEIGHT`, repeatable; by default `sort` with strings of 2 to
20 digits) have items of many difficulty levels. The supervised warm-start sees only levels up
to `--sft-max-level` (10): after it the short strings are mostly solved, the middle ones
sometimes, and strings longer than the warm-start ever showed are never solved (p = 0). Those
groups have no reward spread and carry no gradient. Each *arm* (`--arms`) is a curriculum
strategy (`frontier` draws items by learnability p(1 − p), `uniform` every item alike,
`competence_based` and `easy_first` by difficulty bins), with dynamic sampling as
`--dynamic-sampling` says, or off for an arm named `STRATEGY-nods`; nothing else differs
between the arms of a seed. Three arms decide what to generate instead, on `uniform` (issue
34): `skip` (`curriculum.skip`: items whose last groups had no reward spread are skipped
before rollout, GRESO's rule), `screen` (`trainer.screening`: `--screen-rollouts` rollouts
first, the rest of the group only where they disagree) and `skip+screen`; each also as
`-nods`.

Items must repeat for a per-item estimate of p to exist, so the GRPO training split is small
(`--train-per-level` items per level) and drawn from many times. The warm-start learns from a
larger split (`--sft-train-per-level` items per level), minus every held-out item. Held-out
accuracy is measured on the validation split (`--validation-size` items per environment,
disjoint from every training item), greedy, as the mean over environments of exact success.

Rollouts are counted where they are spent, in generation. With dynamic sampling (DAPO) a step
keeps drawing groups until `--prompts` of them have reward spread, at most `--max-rounds`
rounds: every completion generated counts (`rollouts/generated` in the run's metrics), kept or
not, screening rollouts included (a group screening stopped counts its `--screen-rollouts`).
Without dynamic sampling or screening a step draws exactly `--prompts` groups, so the count is
steps × prompts × generations. Tokens generated are recorded beside them (`tokens/generated`). Every arm gets the same budget, `--max-rollouts` completions
(`trainer.max_rollouts`), not the same number of steps: an arm whose steps cost fewer rollouts
takes more steps within it. Training time is measured too (this process's CPU time and the
wall time of the training steps, evaluations left out).

For every seed all arms start from the same warm-started policy; held-out accuracy is measured
every `--eval-every` steps. For each target (warm-start + gain, `--gains`; relative because the
warm-start's accuracy differs by seed) a run's rollouts to target are those generated up to and
including the first evaluation at or above it, or, if it never got there, *censored* at its
total: the report never turns such a bound into a ratio (bench/censoring.py).

    PYTHONPATH=src python bench/sample_efficiency.py --jobs 2 --threads 1 --seeds 10 11 12 13 14
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from censoring import crossing
from common import machine
from efficiency_report import report

from honed.config import Config
from honed.envs.base import Environment
from honed.models.policy import Policy
from honed.rl.sft import run_sft
from honed.rl.trainer import GRPOTrainer, build_envs
from honed.runs.rundir import RunDir
from honed.sampling.curriculum import STRATEGIES
from honed.types import Item, derive_seed

NO_DYNAMIC_SAMPLING = "-nods"
# arms that decide what to generate, on the `uniform` strategy: (skip, screen)
GENERATION_ARMS = {"skip": (True, False), "screen": (False, True), "skip+screen": (True, True)}
# what may differ between result files reported together (`--results A.json B.json`)
VARY_BETWEEN_FILES = {
    *("seeds", "jobs", "threads", "out", "plot", "work", "results", "machine", "date"),
    *("gains", "gain", "collect", "stopped_at"),
    *("arms", "strategies", "baseline"),  # files may hold other arms of a seed (merged below)
}
ARMS = tuple(
    arm + suffix for arm in (*STRATEGIES, *GENERATION_ARMS) for suffix in ("", NO_DYNAMIC_SAMPLING)
)


def arm_settings(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """What an arm sets: `frontier` its strategy, `uniform-nods` `uniform` with dynamic sampling
    off, `skip+screen` `uniform` with skipping and screening."""
    name, dynamic_sampling = arm, args.dynamic_sampling
    if arm.endswith(NO_DYNAMIC_SAMPLING):
        name, dynamic_sampling = arm.removesuffix(NO_DYNAMIC_SAMPLING), False
    skip, screen = GENERATION_ARMS.get(name, (False, False))
    return {
        "strategy": "uniform" if name in GENERATION_ARMS else name,
        "dynamic_sampling": dynamic_sampling,
        "skip": skip,
        "screening": args.screen_rollouts if screen else 0,
    }


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


def step_cap(settings: dict[str, Any], args: argparse.Namespace) -> int:
    """`--max-steps`, or for an arm that screens, enough steps for the rollout budget to end
    the run: a step there may generate only `--screen-rollouts` per group (all its groups
    stopped by the screen), so `--max-steps`, sized for full groups, would end it first."""
    if not settings["screening"]:
        return args.max_steps
    least = args.prompts * settings["screening"]
    return max(args.max_steps, -(-args.max_rollouts // least))


# What builds a run's config from (seed, arm, command line): `bench_config`, or another
# benchmark's on top of `bench_settings`. Every run of every arm, and the warm-start, take
# their config from it.
ConfigOf = Callable[[int, str, argparse.Namespace], Config]


def bench_config(seed: int, arm: str, args: argparse.Namespace) -> Config:
    return Config.model_validate(bench_settings(seed, arm, args))


def bench_settings(seed: int, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run's config as plain data, before validation: another benchmark replaces a part
    (its environments, its policy) and keeps the rest, so that what an arm sets and how a run is
    budgeted and evaluated stay the same in both."""
    env_args = {"validation_size": args.validation_size}
    settings = arm_settings(arm, args)

    def train_size(env: dict) -> dict:  # 0: the environment's default split (4000 items)
        per_level = args.train_per_level
        return {"train_size": per_level * len(env["levels"])} if per_level else {}

    return {
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
            "max_steps": step_cap(settings, args),
            "max_rollouts": args.max_rollouts,
            "prompts_per_step": args.prompts,
            "num_generations": args.generations,
            "learning_rate": args.lr,
            "warmup_steps": 5,
            "max_completion_length": args.max_completion_length,
            "temperature": args.temperature,
            "dynamic_sampling": settings["dynamic_sampling"],
            "max_sampling_rounds": args.max_rounds,
            "screening": {"rollouts": settings["screening"]},
        },
        "curriculum": {
            "strategy": settings["strategy"],
            "skip": {"enabled": settings["skip"]},
        },
        "eval": {"split": "validation", "num_items": None, "every": args.eval_every},
        "checkpoint": {"every": 0},
        "logging": {"progress": False, "samples_per_step": 0},
    }


class TimedTrainer(GRPOTrainer):
    """The trainer, with the time its training steps took added to every step's metrics:
    `bench/train_cpu_s` (this process's CPU time, which other processes on the machine do not
    change much) and `bench/train_wall_s`, both cumulative, held-out evaluations left out."""

    train_cpu_s = 0.0
    train_wall_s = 0.0
    # `--stop-at-targets`: the gain over the warm-start after which the run stops (None: at its
    # budget); the run up to there is the same as without it, so are its crossings of every
    # target up to this one
    stop_gain: float | None = None

    def done(self) -> bool:
        if self.stop_gain is not None and self.final_eval is not None:
            accuracy = (self.initial_eval["accuracy"], self.final_eval["accuracy"])
            curve = [[0, accuracy[0], 0], [self.step, accuracy[1], 0]]
            if not crossing(curve, self.stop_gain, 0).censored:
                return True
        return super().done()

    def train_step(self) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        metrics = super().train_step()
        self.train_cpu_s += time.process_time() - cpu
        self.train_wall_s += time.perf_counter() - wall
        metrics["bench/train_cpu_s"] = self.train_cpu_s
        metrics["bench/train_wall_s"] = self.train_wall_s
        return metrics


def levels_of(row: dict[str, Any]) -> dict[str, float]:
    """`{"sort/3": 0.81, ...}`: the per-level held-out accuracies of an evaluation row."""
    out = {}
    for key, value in row.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "eval" and parts[2].startswith("level_"):
            out[f"{parts[1]}/{parts[2].removeprefix('level_')}"] = round(value, 4)
    return out


def run(
    seed: int,
    arm: str,
    warm: Path | None,
    work: Path,
    args: argparse.Namespace,
    config_of: ConfigOf = bench_config,
) -> dict:
    """One arm of a seed from `warm`, the seed's warm-start (None: from the policy the config
    builds, the same for every arm of the seed)."""
    config = config_of(seed, arm, args)
    run_dir = RunDir(work / f"{arm}-{seed}")
    run_dir.create()
    if warm is not None:
        # the same starting policy for every arm, written as honed writes a checkpoint (listed
        # in the run's manifest, so that honed takes the folder as its own)
        run_dir.write_checkpoint(
            run_dir.warmstart, lambda to: shutil.copytree(warm, to, dirs_exist_ok=True)
        )
    started, cpu_started = time.perf_counter(), time.process_time()
    trainer = TimedTrainer(config, run_dir)
    trainer.stop_gain = max(args.gains) if args.stop_at_targets else None
    summary = trainer.train()
    return result_of(seed, arm, run_dir, summary) | {
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),
    }


def result_of(seed: int, arm: str, run_dir: RunDir, summary: dict) -> dict:
    """One finished run's result, read from its run directory (what `--collect` rebuilds)."""
    rows = run_dir.read_jsonl(run_dir.metrics_path)
    steps = {r["step"]: r for r in rows if "sampling/rollouts_total" in r}
    evals = {r["step"]: r for r in rows if "eval/accuracy" in r}
    # [step, held-out accuracy, rollouts generated so far (every completion, kept or not),
    # training CPU s, training wall s, tokens generated so far] at every evaluation; the first
    # is the warm-start
    curve = [[0, summary["initial_eval"]["accuracy"], 0, 0.0, 0.0, 0]]
    for step in sorted(s for s in evals if s > 0):
        spent = steps[step]
        curve.append(
            [
                step,
                evals[step]["eval/accuracy"],
                int(spent["sampling/rollouts_total"]),
                round(spent["bench/train_cpu_s"], 2),
                round(spent["bench/train_wall_s"], 2),
                int(spent["tokens/generated"]),
            ]
        )
    first = steps.get(1, {})
    last = steps[max(steps)] if steps else {}
    few_shot = summary.get("initial_eval_few_shot") or {}
    return {
        **groups_spent(list(steps.values())),
        "seed": seed,
        "arm": arm,
        "warm_start_accuracy": curve[0][1],
        "final_accuracy": curve[-1][1],
        "curve": curve,
        "rollouts_total": summary["rollouts"],
        "tokens_total": summary["tokens_generated"],
        "rollouts_kept": int(last.get("rollouts/kept", 0)),
        "steps": summary["steps"],
        # skipping before rollout: candidates skipped over the run, and the estimated share of
        # them that would have had spread (absent without `curriculum.skip`)
        "skip": {
            "skipped": last.get("sampling/skipped_total"),
            "false_skip_rate": last.get("sampling/false_skip_rate"),
        },
        # the first step's groups: how many were drawn, and the share with no reward spread
        # (without dynamic sampling: the share of a batch that carries no signal at the start)
        "first_step": {
            "groups_drawn": first.get("sampling/groups_drawn"),
            "zero_spread": first.get("frac_reward_zero_std"),
        },
        "levels": {
            "warm_start": levels_of(evals.get(0, {})),
            "final": levels_of(evals[max(evals)]) if evals else {},
        },
        "train_cpu_seconds": round(steps[max(steps)]["bench/train_cpu_s"], 1) if steps else 0.0,
        "train_wall_seconds": round(steps[max(steps)]["bench/train_wall_s"], 1) if steps else 0.0,
        # where the run also evaluated its starting policy with `eval.few_shot` solved train
        # examples before each prompt: that and the same policy without them, overall and per
        # environment (the prompting baseline training has to beat)
        **(
            {
                "start": {
                    "zero_shot": accuracies(summary["initial_eval"]),
                    "few_shot": accuracies(few_shot),
                }
            }
            if few_shot
            else {}
        ),
    }


def accuracies(evaluation: dict[str, float]) -> dict[str, float]:
    """`{"mean": 0.31, "gcd_10": 0.5, ...}`: an evaluation's accuracy, over and per environment."""
    per_env = {
        key.removesuffix("/accuracy"): round(value, 4)
        for key, value in evaluation.items()
        if key.endswith("/accuracy") and key.count("/") == 1
    }
    return {"mean": round(evaluation["accuracy"], 4), **per_env}


def collect(work: Path, args: argparse.Namespace) -> list[dict]:
    """The results of the finished runs a `--work` directory holds (`ARM-SEED` folders with a
    summary.json), for the seeds and arms asked for: an interrupted benchmark's completed runs
    are reported without running them again. Their whole-run times were not recorded."""
    results = []
    for seed in args.seeds:
        for arm in args.arms:
            run_dir = RunDir(work / f"{arm}-{seed}")
            if run_dir.summary_path.is_file():
                summary = json.loads(run_dir.summary_path.read_text())
                results.append(result_of(seed, arm, run_dir, summary))
    return results


def groups_spent(step_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many groups a run generated and how many of them had reward spread (the ones GRPO
    learns from: a step's trained groups; with dynamic sampling it stops drawing at the number
    it wants, so no group with spread is left untrained), and how often the rollouts of the
    batches it trained on succeeded."""
    drawn = sum(int(r["sampling/groups_drawn"]) for r in step_rows)
    spread = sum(int(r["groups/trained"]) for r in step_rows)
    # the success rate of the rollouts each step trained on (its batch), averaged over steps
    success = statistics.fmean(r["success/mean"] for r in step_rows) if step_rows else None
    return {"groups": {"drawn": drawn, "with_spread": spread, "batch_success": success}}


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


def warm_start(
    seed: int, work: Path, args: argparse.Namespace, config_of: ConfigOf = bench_config
) -> tuple[Path | None, dict]:
    """One supervised warm-start per seed, shared by every arm; none with `--sft-steps 0` (every
    arm then starts from the policy the config builds: a pretrained model, or the tiny one
    initialised from the seed).

    Its examples come from the environments' training split at `--sft-train-per-level` items per
    level (the GRPO training split is small so that items repeat; a warm-start on it alone would
    memorise it), minus every validation and test item of the GRPO environments.
    """
    if not args.sft_steps:
        return None, {"sft_examples": 0, "held_out_removed": 0}
    config = config_of(seed, "uniform", args)
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
    # the same environments with the warm-start's larger training split
    pool_args = argparse.Namespace(**vars(args) | {"train_per_level": args.sft_train_per_level})
    sft_config = config_of(seed, "uniform", pool_args)
    pools = {
        name: _Pool(env, held_out, args.sft_max_level)
        for name, env in build_envs(sft_config).items()
    }
    removed = sum(
        1 for pool in pools.values() for item in pool.env.items("train") if item.key in held_out
    )
    policy = Policy.from_config(config.policy, config.seed)
    stats = run_sft(policy, pools, config.sft, derive_seed(config.seed, "sft"))
    trainer.run.write_checkpoint(trainer.run.warmstart, policy.save)
    return trainer.run.warmstart, {
        "sft_examples": int(stats["sft/examples"]),
        "held_out_removed": removed,
    }


def run_seed(
    seed: int, work: Path, args: argparse.Namespace, config_of: ConfigOf = bench_config
) -> list[dict]:
    """One seed: its warm-start, then each arm from it."""
    torch.set_num_threads(args.threads)
    warm, warm_info = warm_start(seed, work, args, config_of)
    print(json.dumps({"seed": seed, "warm_start": warm_info}), flush=True)
    results = []
    for arm in args.arms:
        results.append(run(seed, arm, warm, work, args, config_of))
        brief = {k: v for k, v in results[-1].items() if k not in ("curve", "levels")}
        print(json.dumps(brief), flush=True)
    return results


def build_parser(doc: str, defaults: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The command line; `defaults` replaces some defaults (another benchmark's setting)."""
    parser = argparse.ArgumentParser(
        description=doc.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12, 13, 14])
    parser.add_argument(
        "--arms",
        "--strategies",
        nargs="+",
        default=["uniform", "frontier"],
        choices=ARMS,
        help="curriculum strategies; STRATEGY-nods: that strategy with dynamic sampling off",
    )
    parser.add_argument("--baseline", default="uniform", help="the arm ratios are taken against")
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
        "--screen-rollouts",
        type=int,
        default=4,
        help="rollouts each item gets first in the arms that screen (not tuned)",
    )
    parser.add_argument(
        "--max-rollouts", type=int, default=400_000, help="each run's budget in completions"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=600,
        help="a cap (the rollout budget ends a run first); also the length of the schedules "
        "of easy_first and competence_based",
    )
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument(
        "--gains",
        type=float,
        nargs="+",
        default=[0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08],
        help="targets: held-out accuracy this far above the warm-start's",
    )
    parser.add_argument("--gain", type=float, help="one target only (the older option)")
    parser.add_argument(
        "--stop-at-targets",
        action="store_true",
        help="end each run at the evaluation where it reached the highest of --gains instead of "
        "at its budget (rollouts, tokens and time to each target are unchanged; the final "
        "accuracy is then the accuracy there, and higher targets cannot be reported)",
    )
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
        "--results",
        type=Path,
        nargs="+",
        help="report JSON files written by --out again instead of running (several: runs of "
        "the same setting on other seeds, reported together)",
    )
    parser.add_argument("--plot", type=Path, help="draw accuracy against rollouts to this PNG")
    parser.add_argument("--work", type=Path, help="keep the run directories here")
    parser.add_argument(
        "--collect",
        type=Path,
        help="report the finished runs of --seeds and --arms kept in this --work directory "
        "instead of running them (with --out: save them as a result file)",
    )
    # `--env` appends: a default list would be appended to, so it is applied after parsing
    parser.set_defaults(**{k: v for k, v in (defaults or {}).items() if k != "env"})
    return parser


def load_results(paths: list[Path]) -> tuple[dict, list[dict]]:
    """The setting and the runs of one or more result files of the same setting (other seeds)."""
    setting: dict = {}
    results: list[dict] = []
    for path in paths:
        saved = json.loads(path.read_text())
        these = saved["setting"]
        these["arms"] = these.get("arms") or these["strategies"]
        if these.get("stop_at_targets"):  # the lowest target at which some file's runs stopped
            stop = max(these["gains"])
            these["stopped_at"] = min(stop, setting.get("stopped_at", stop))
        differ = {
            key
            for key in these.keys() & setting.keys()
            if these[key] != setting[key] and key not in VARY_BETWEEN_FILES
        }
        if differ:
            raise SystemExit(f"{path}: another setting than the files before it ({sorted(differ)})")
        seeds = setting.get("seeds", []) + [
            s for s in these["seeds"] if s not in setting.get("seeds", [])
        ]
        arms = setting.get("arms", []) + [
            a for a in these["arms"] if a not in setting.get("arms", [])
        ]
        # the first file's baseline stays (a file of the remaining arms of a seed has another)
        setting = these | {
            "seeds": seeds,
            "arms": arms,
            "baseline": setting.get("baseline") or these.get("baseline", "uniform"),
        }
        results += saved["results"]
    runs = [(r["seed"], r.get("arm") or r["strategy"]) for r in results]
    if len(set(runs)) < len(runs):
        raise SystemExit("the result files hold the same seed and arm more than once")
    return setting, results


def main(argv: list[str] | None = None, doc: str = __doc__, defaults: dict | None = None) -> None:
    execute(build_parser(doc, defaults).parse_args(argv), defaults)


def execute(
    args: argparse.Namespace,
    defaults: dict | None = None,
    config_of: ConfigOf = bench_config,
    report_of: Callable[[argparse.Namespace, list[dict]], None] = report,
) -> None:
    """Run the arms (or `--collect` or report `--results`) as the parsed command line says, and
    report them: another benchmark passes its own command line, its runs' config (`config_of`)
    and a report of its own that calls `report` (`report_of`)."""
    if not args.env:
        args.env = (defaults or {}).get("env") or [env_spec("sort:2-20:1")]
    if args.gain is not None:
        args.gains = [args.gain]
    if args.results:  # report saved runs again (other targets, a plot) without running them
        setting, results = load_results(args.results)
        stopped_at = setting.get("stopped_at")
        if stopped_at is not None and max(args.gains) > stopped_at + 1e-9:
            raise SystemExit(
                f"these runs stopped at warm-start + {stopped_at:g} (--stop-at-targets): "
                f"no target above it can be reported (--gains {max(args.gains):g})"
            )
        args = argparse.Namespace(
            **(
                {"baseline": "uniform"}
                | setting
                | {"gains": args.gains, "plot": args.plot, "results": args.results}
            )
        )
        report_of(args, results)
        return
    if args.baseline not in args.arms:
        raise SystemExit(f"--baseline {args.baseline} is not one of --arms {args.arms}")
    started = time.perf_counter()
    if args.collect:
        results = collect(args.collect, args)
    else:
        results = run_all(args, config_of)
    if args.out:
        setting = vars(args) | {"env": args.env, "machine": machine(), "date": time.ctime()}
        args.out.write_text(
            json.dumps({"setting": setting, "results": results}, indent=1, default=str)
        )
    report_of(args, results)
    print(f"elapsed: {time.perf_counter() - started:.0f} s")


def run_all(args: argparse.Namespace, config_of: ConfigOf = bench_config) -> list[dict]:
    """Every seed and arm, `--jobs` seeds at a time."""
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        if args.jobs > 1:  # seeds are independent: one process per seed, `--jobs` at a time
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
                n = len(args.seeds)
                runs = pool.map(run_seed, args.seeds, [work] * n, [args] * n, [config_of] * n)
                return [res for seed_results in runs for res in seed_results]
        return [res for seed in args.seeds for res in run_seed(seed, work, args, config_of)]


if __name__ == "__main__":
    main()
