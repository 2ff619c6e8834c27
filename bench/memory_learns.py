"""Issue 38's tiny-policy demonstration, several seeds and designs at once, until a deadline.

Each (design, seed) pair is one chain of `honed` commands in its own process and run folder:
the warm-start (`honed sft`, unless a warm-start checkpoint is given), then GRPO (`honed
train`) until `--wrap-up` seconds before the deadline (`trainer.max_time_s`), when it writes
its last step's checkpoint and evaluates it; a process still running at the deadline is killed,
and its last checkpoint (written atomically every `checkpoint.every` steps) is whole. Each run
folder is then packed (metrics, configs, logs, the warm-start's weights and the last checkpoint
whole, optimizer state included, so that `honed train --run-dir` resumes it; no rollouts) into
`OUT/<design>_<seed>.tgz`, to be evaluated against the baselines with
`honed eval CHECKPOINT --split test --config examples/memory_learns.yaml -o seed=S`.

Why a deadline rather than a step count: a lent GPU comes with a fixed time, and the step time
of the tiny policy on it is not known before; the learning rate is constant, so a run stopped
at step N is the run that was asked for N steps.

    PYTHONPATH=src python bench/memory_learns.py --out OUT --deadline 480             # on a GPU
    PYTHONPATH=src python bench/memory_learns.py --device cpu --sft-steps 2 --deadline 60 ...

The designs (docs/memory.md, "A demonstration that learns"):

- `rule`: the warm-start imitates the rule (every non-chatter sentence, verbatim), so what to
  leave out is the reward's to teach; GRPO samples at temperature 1, where every group's
  accuracy spreads;
- `reference`: GRPO from a warm-start that imitates the reference plan, sampled at
  temperature 0.5.

A design's warm-start is trained here unless `--warmstarts DIR` holds one, as
`DIR/<design>/ws<seed>/` (or `DIR/ws<seed>/` for the reference design): a warm-start made on
CPUs beforehand (`honed sft` with the chain's overrides) leaves the GPU's time to GRPO.

Both weigh tool success r2 at 0 (`tool_success_weight`), so that the reward is what the
reader answers from memory, and refused writes past the budget are not a reason to write less.
Every GRPO step samples 16 instances x 16 rollouts, and the update goes through micro-batches of
32 sequences: six processes that each took the step's 256 sequences at once filled an 80 GB
GPU (bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from honed.runs.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "memory_learns.yaml"

DESIGNS: dict[str, dict[str, list[str]]] = {
    "rule": {
        "sft": ["sft.steps=1000"],
        "train": ["trainer.temperature=1.0", "trainer.learning_rate=5e-5"],
        "both": ["envs.0.args.sft_target=rule", "trainer.max_completion_length=176"],
    },
    "reference": {
        "sft": [],
        "train": ["trainer.temperature=0.5", "trainer.learning_rate=3e-5"],
        "both": [],
    },
}
COMMON = [
    "envs.0.args.tool_success_weight=0",
    "policy.dtype=float32",
    "trainer.prompts_per_step=16",
    "trainer.micro_batch_size=32",
    "trainer.max_steps=100000",
    "checkpoint.every=10",
    "checkpoint.keep_last=2",
    "eval.every=20",
]


def _overrides(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("-o", item)]


def warmstart(folder: Path | None, design: str, seed: int) -> Path | None:
    """The warm-start given for (design, seed): `FOLDER/<design>/ws<seed>/`, or for the
    reference design `FOLDER/ws<seed>/` (the layout of the first GPU runs); None: train one."""
    if folder is None:
        return None
    paths = [folder / design / f"ws{seed}"]
    if design == "reference":
        paths.append(folder / f"ws{seed}")
    return next((path for path in paths if path.is_dir()), None)


def chain(design: str, seed: int, args: argparse.Namespace) -> str:
    """The shell command of one (design, seed) pair: warm-start, then GRPO."""
    honed = f"{sys.executable} -m honed"
    run = args.runs / f"{design}_{seed}"
    spec = DESIGNS[design]
    base = [
        f"seed={seed}",
        f"policy.device={args.device}",
        f"torch_threads={args.threads}",
        *COMMON,
        *spec["both"],
        *args.override,
    ]
    given = warmstart(args.warmstarts, design, seed)
    steps: list[str] = []
    if given is not None:
        start = [f"policy.model={given}", "sft.steps=0"]
    else:
        sft = [*spec["sft"], *([f"sft.steps={args.sft_steps}"] if args.sft_steps else [])]
        steps.append(
            f"{honed} sft {CONFIG} --run-dir {run} --quiet "
            + " ".join(_overrides(base + sft))
            + f" > {run}.sft.log 2>&1"
        )
        start = []
    # GRPO ends itself `--wrap-up` seconds before the deadline (`trainer.max_time_s`, counted
    # from when it starts, after any warm-start), in time to write its last step and evaluate
    left = f"$(( {args.stop_at} - $(date +%s) ))"
    steps.append(
        f"{honed} train {CONFIG} --run-dir {run} --quiet "
        + " ".join(_overrides(base + start + spec["train"]))
        + f' -o trainer.max_time_s="$(( {left} > 1 ? {left} : 1 ))"'
        + f" > {run}.train.log 2>&1"
    )
    return " && ".join(steps)


def pack(run: Path, out: Path) -> Path:
    """The run's small files and logs, its warm-start's weights and its last checkpoint whole
    (optimizer state included), as one archive; a chain that failed before it made the run's
    folder packs its logs alone."""
    target = out / f"{run.name}.tgz"
    keep = list(run.parent.glob(f"{run.name}.*.log"))
    if run.is_dir():
        keep += [p for p in run.iterdir() if p.is_file()]
        folder = RunDir(run)
        if folder.warmstart.is_dir():
            keep += [p for p in folder.warmstart.iterdir() if p.name != "trainer_state.pt"]
        latest = folder.latest_checkpoint()
        if latest is not None:
            keep += list(latest[1].iterdir())
    with tarfile.open(target, "w:gz") as tar:
        for path in keep:
            tar.add(path, arcname=str(path.relative_to(run.parent)))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the archives go")
    parser.add_argument("--runs", type=Path, default=Path("/tmp/memory_learns"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--deadline", type=float, required=True, help="seconds from the start")
    parser.add_argument(
        "--wrap-up",
        type=float,
        default=60,
        help="seconds before the deadline that GRPO stops to save and evaluate",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process")
    parser.add_argument("--sft-steps", type=int, default=0, help="0: the design's own")
    parser.add_argument(
        "--warmstarts",
        type=Path,
        help="folder of <design>/ws<seed>/ warm-starts (ws<seed>/ alone: the reference design's)",
    )
    parser.add_argument("-o", "--override", action="append", default=[], help="KEY=VALUE")
    args = parser.parse_args()
    args.runs.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    args.stop_at = int(time.time() + args.deadline - args.wrap_up)
    procs = {}
    for design in args.designs:
        for seed in args.seeds:
            cmd = chain(design, seed, args)
            print(f"[{design} {seed}] {cmd}", flush=True)
            procs[f"{design}_{seed}"] = subprocess.Popen(
                cmd, shell=True, cwd=ROOT, start_new_session=True
            )
    while any(p.poll() is None for p in procs.values()):
        if time.monotonic() - start > args.deadline:
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, 9)
            break
        time.sleep(2)
    failed = []
    for name, p in procs.items():
        p.wait()
        archive = pack(args.runs / name, args.out)
        ended = {0: "finished", -9: "stopped at the deadline"}.get(p.returncode)
        if ended is None:
            failed.append(name)
            ended = f"failed (exit {p.returncode}; see {args.runs / name}.*.log)"
        print(f"[{name}] {ended}, {archive} ({archive.stat().st_size} bytes)")
    print(f"done in {time.monotonic() - start:.0f} s", flush=True)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
