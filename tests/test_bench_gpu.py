"""`bench/gpu.py` cannot rot: it runs end to end on the CPU with a tiny model of the same family
(the very code a GPU runs), and without a GPU it says so and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_gpu_bench_runs_on_the_cpu_with_a_tiny_model():
    out = _run(
        "--device",
        "cpu",
        "--tiny",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--prompts",
        "2",
        "--generations",
        "2",
        "--tokens",
        "6",
        "--models",
        "Qwen2.5-0.5B",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("Qwen2.5-0.5B")]
    assert len(rows) == 4  # full and LoRA, each with and without checkpointing
    for row in rows:
        steps, tokens, peak = map(float, row[-3:])
        assert steps > 0 and tokens > 0 and peak > 0


def test_gpu_bench_without_a_gpu_says_so():
    if torch.cuda.is_available():
        return
    out = _run()
    assert out.returncode == 0 and "no CUDA device" in out.stdout
