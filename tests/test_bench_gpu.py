"""`bench/gpu.py` cannot rot: it runs end to end on the CPU with a tiny model of the same family
(the very code a GPU runs), and without a GPU it says so and exits 0."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    """One mode (LoRA with gradient checkpointing: the one with every option on), honed and,
    when TRL is installed (the bench extra), TRL's GRPOTrainer in its child process, and
    their ratio. The other modes differ from it only by options the rest of the suite tests."""
    mode = "LoRA r=16 + checkpointing"
    out = _run(
        *("--device", "cpu", "--tiny", "--steps", "1", "--warmup", "0", "--prompts", "2"),
        *("--generations", "2", "--tokens", "6", "--models", "Qwen2.5-0.5B", "--modes", mode),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("Qwen2.5-0.5B")]
    with_trl = all(importlib.util.find_spec(p) for p in ("trl", "peft", "datasets"))
    # honed's row, then TRL's and the ratios', or a line saying TRL was not measured
    assert len(rows) == (3 if with_trl else 1), out.stdout
    assert with_trl or "TRL: not measured (not installed)" in out.stdout
    for row in rows[:2]:
        steps, tokens, peak = map(float, row[-3:])
        assert steps > 0 and tokens > 0 and peak > 0
    if with_trl:
        ratio = rows[2]
        honed_steps, trl_steps = (float(r[-3]) for r in rows[:2])
        assert float(ratio[-2]) == pytest.approx(honed_steps / trl_steps, rel=0.01, abs=0.01)


def test_gpu_bench_without_a_gpu_says_so():
    if torch.cuda.is_available():
        return
    out = _run()
    assert out.returncode == 0 and "no CUDA device" in out.stdout
