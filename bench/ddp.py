"""One learner process against two (`honed train --nproc 2`, gloo on the CPU), same global batch:
the final weights agree within float tolerance, and the step time of each.

Every process runs one torch thread: on a 2-core machine two processes use both cores where one
uses one, and they exchange groups and gradients through gloo; the ratio shows what the
data-parallel learner costs or saves here, not what it gives on N GPUs, where each process has a
device of its own.

With `--parallel fsdp` the two processes shard the weights, gradients and AdamW state (FSDP2)
instead of each holding them whole: the same update, with more communication per step (every
layer's weights gathered for each forward, its gradients reduce-scattered, and the weights
gathered whole before each rollout).

    PYTHONPATH=src python bench/ddp.py [--steps 6] [--model tiny|large] [--parallel ddp|fsdp]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from common import DATA, MODELS, REWARD  # noqa: E402


def config(tmp: Path, name: str, steps: int, model: str, threads: int, parallel: str) -> Path:
    data = {
        "seed": 0,
        "run_dir": str(tmp / name),
        "torch_threads": threads,
        "policy": {"model": "tiny", "tiny": MODELS[model], "device": "cpu"},
        "envs": [{"name": "sub", "type": "dataset", "args": {"path": str(DATA), "reward": REWARD}}],
        "trainer": {
            "max_steps": steps,
            "prompts_per_step": 8,
            "num_generations": 8,
            "max_completion_length": 32,
            "learning_rate": 1e-4,
            "parallel": parallel,
        },
        "eval": {"num_items": 8},
        "checkpoint": {"every": steps, "keep_last": 1},
        "logging": {"progress": False},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(path: Path, nproc: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "honed", "train", str(path), "--quiet", "--nproc", str(nproc)]
    subprocess.run(cmd, check=True, env=env)


def step_times(run: Path) -> list[float]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["perf/step_time"] for r in rows if "perf/step_time" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--model", choices=list(MODELS), default="tiny")
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    args = parser.parse_args()
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train(config(tmp, "one", args.steps, args.model, 1, args.parallel), 1)
        train(config(tmp, "two", args.steps, args.model, 1, args.parallel), 2)
        weights = {
            name: load_file(
                str(tmp / name / "checkpoints" / f"step_{args.steps}" / "model.safetensors")
            )
            for name in ("one", "two")
        }
        times = {name: step_times(tmp / name) for name in ("one", "two")}
    worst = max(
        float((weights["two"][k].double() - v.double()).norm() / v.double().norm())
        for k, v in weights["one"].items()
    )
    median = {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in times.items()}  # after the first
    print(f"model {args.model}, {args.parallel}, {args.steps} steps of 8 prompts x 8 completions")
    print(f"largest relative weight difference, 2 processes against 1: {worst:.2e}")
    print(f"median step: 1 process {median['one']:.3f} s, 2 processes {median['two']:.3f} s")
    print(f"2-process / 1-process step time: {median['two'] / median['one']:.2f}")
    if worst > 1e-5:
        sys.exit("the weights differ by more than 1e-5 (relative)")


if __name__ == "__main__":
    main()
