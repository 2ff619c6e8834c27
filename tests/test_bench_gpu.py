"""`bench/gpu.py` and `bench/memalpha_gpu.py` cannot rot: they run end to end on the CPU with a
tiny model of the same family (the very code a GPU runs), and without a GPU say so and exit 0."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from honed.models.sources import MODELS

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, script: str = "gpu.py") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
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
        assert "[TRL] step 1 done at" in out.stderr  # the child's marks reach our stderr


def test_gpu_bench_stops_a_trl_measurement_at_its_time_limit():
    """A TRL child past `--trl-timeout` is stopped and named; honed's row of that mode is kept
    (printed as measured), and the exit code says a mode failed."""
    for spec in ("trl", "peft", "datasets"):
        pytest.importorskip(
            spec, reason="TRL's side needs the bench extra: pip install -e .[bench]"
        )
    out = _run(
        *("--device", "cpu", "--tiny", "--steps", "1", "--warmup", "0", "--prompts", "2"),
        *("--generations", "2", "--tokens", "4", "--models", "Qwen2.5-0.5B", "--modes", "full"),
        *("--trl-timeout", "0.2"),
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert "[honed] Qwen2.5-0.5B full:" in out.stdout
    assert "did not finish within --trl-timeout 0.2 s" in out.stdout


def test_gpu_bench_without_a_gpu_says_so():
    if torch.cuda.is_available():
        return
    out = _run()
    assert out.returncode == 0 and "no CUDA device" in out.stdout


@pytest.mark.skipif(
    MODELS["smollm2-135m-instruct"].path() is None and not os.environ.get("HONED_REQUIRE_SMOLLM2"),
    reason=f"SmolLM2's tokenizer is used; to run: {MODELS['smollm2-135m-instruct'].install}",
)
def test_memalpha_gpu_bench_runs_the_recipe_on_the_cpu_with_a_tiny_model(tmp_path):
    """The Mem-α recipe's short run at a shrunk Qwen3 shape: two GRPO steps through `honed
    train`, their times and peak memory from the run's metrics, the final checkpoint written."""
    pytest.importorskip("pyarrow", reason="the Mem-α fixtures are parquet: pip install pyarrow")
    summary_file = tmp_path / "summary.json"
    out = _run(
        *("--device", "cpu", "--tiny", "--steps", "2", "--prompts", "2", "--generations", "2"),
        *("--tokens", "8", "--work", str(tmp_path / "work"), "--json", str(summary_file)),
        script="memalpha_gpu.py",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(summary_file.read_text())
    assert summary["steps"] == 2 and summary["rollouts_per_step"] == 4
    assert 1e6 < summary["parameters"] < 1e7  # the tiny shape with SmolLM2's 49,152 tokens
    for key in ("median_step_s", "median_rollout_s", "median_update_s", "peak_memory_gb"):
        assert summary[key] > 0, key
    assert summary["checkpoint_gb"] > 0  # weights and optimizer state of the final step
    lines = (tmp_path / "work" / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines if "perf/step_time" in line]
    assert [r["step"] for r in steps] == [1, 2]


def test_memalpha_gpu_bench_without_a_gpu_says_so():
    if torch.cuda.is_available():
        return
    out = _run(script="memalpha_gpu.py")
    assert out.returncode == 0 and "no CUDA device" in out.stdout


def test_memory_learns_bench_runs_both_designs_on_the_cpu(tmp_path):
    """Both designs of issue 38's demonstration, one seed each, through the very chains a GPU
    runs (warm-start, then GRPO), cut to two steps of everything: each archive holds the run's
    metrics and its last checkpoint whole (optimizer state included, so it resumes), and the
    rule design's warm-start imitated the rule under the reward without tool success."""
    out = _run(
        *("--device", "cpu", "--threads", "1", "--sft-steps", "2", "--seeds", "0"),
        *("--deadline", "500", "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")),
        *("-o", "trainer.max_steps=2", "-o", "trainer.prompts_per_step=2"),
        *("-o", "trainer.num_generations=2", "-o", "eval.num_items=2", "-o", "checkpoint.every=1"),
        *("-o", "envs.0.args.train_size=16", "-o", "sft.batch_size=2"),
        script="memory_learns.py",
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.count("finished") == 2
    for design in ("rule", "reference"):
        with tarfile.open(tmp_path / "out" / f"{design}_0.tgz") as tar:
            names = set(tar.getnames())
            config = yaml.safe_load(tar.extractfile(f"{design}_0/config.yaml"))
            metrics = tar.extractfile(f"{design}_0/metrics.jsonl").read().decode()
            summary = json.load(tar.extractfile(f"{design}_0/summary.json"))
        assert summary["ended_by"] == "max_steps"  # long before `trainer.max_time_s`
        assert {
            f"{design}_0/checkpoints/step_2/{f}" for f in ("model.safetensors", "trainer_state.pt")
        } <= names
        assert f"{design}_0/checkpoints/warmstart/model.safetensors" in names
        assert not any("/rollouts/" in name for name in names)
        steps = [
            json.loads(line)["step"] for line in metrics.splitlines() if "perf/step_time" in line
        ]
        assert steps == [1, 2]
        args = config["envs"][0]["args"]
        assert args["tool_success_weight"] == 0
        assert config["trainer"]["prompts_per_step"] == 2  # -o comes after the designs' own
        rule = design == "rule"
        assert args.get("sft_target", "reference") == ("rule" if rule else "reference")
        assert config["trainer"]["temperature"] == (1.0 if rule else 0.5)


def test_memory_learns_takes_each_designs_warm_start_from_its_folder(tmp_path):
    """Warm-starts made beforehand travel as `DIR/<design>/ws<seed>/` (the reference design's
    also as `DIR/ws<seed>/`, the first runs' layout); a design with none given trains its own,
    and one given skips `honed sft` and starts GRPO from it."""
    spec = importlib.util.spec_from_file_location(
        "memory_learns", ROOT / "bench" / "memory_learns.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for path in ("ws0", "ws1", "rule/ws1", "reference/ws1"):
        (tmp_path / path).mkdir(parents=True)
    assert bench.warmstart(tmp_path, "reference", 0) == tmp_path / "ws0"
    assert bench.warmstart(tmp_path, "reference", 1) == tmp_path / "reference" / "ws1"
    assert bench.warmstart(tmp_path, "rule", 0) is None  # ws0 is the reference design's
    assert bench.warmstart(tmp_path, "rule", 1) == tmp_path / "rule" / "ws1"
    assert bench.warmstart(None, "rule", 1) is None
    args = SimpleNamespace(
        runs=tmp_path / "runs",
        device="cpu",
        threads=1,
        override=[],
        sft_steps=0,
        warmstarts=tmp_path,
        stop_at=int(time.time()) + 100,
    )
    given, trained = bench.chain("rule", 1, args), bench.chain("rule", 0, args)
    assert " sft " not in given and f"policy.model={tmp_path / 'rule' / 'ws1'}" in given
    assert "trainer.temperature=1.0" in given and "envs.0.args.sft_target=rule" in given
    assert " sft " in trained and "policy.model=" not in trained
    # GRPO's time limit is what is left until `stop_at` when it starts, as the shell computes it
    limit = given.split("trainer.max_time_s=")[1].rsplit(" > ", 1)[0]  # before the log
    seconds = subprocess.run(["sh", "-c", f"echo {limit}"], capture_output=True, text=True)
    assert 95 <= int(seconds.stdout) <= 100
