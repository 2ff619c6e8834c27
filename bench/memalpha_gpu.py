"""A short Mem-α GRPO run at Qwen3-4B's shapes on one GPU: `examples/memalpha_qwen3_4b.yaml`
as it is (full fine-tuning in bf16, gradient checkpointing, AdamW, the k3 KL term to a
reference model, DAPO aggregation), cut to a few steps on the Mem-α-format data fixtures of
`tests/fixtures/memory/`; per step its time (rollout, update), completion tokens per second and
peak GPU memory, from the run's own `metrics.jsonl`.

What differs from the paper's run, and why:

- **random weights** at Qwen3-4B's shapes (`bench/configs/qwen3-4b.json`, its `config.json`):
  nothing is downloaded. Every completion runs to `--tokens` (no end token is likely), so
  the step time is that of full-length completions;
- **SmolLM2's tokenizer and chat template** (the only real tokenizer without a hub), so the
  vocabulary is SmolLM2's 49,152 tokens instead of Qwen3's 151,936: the tied embedding is
  126 M parameters instead of 389 M (3.76 B in all instead of 4.02 B);
- **the offline reader and judge** (`reader: retrieval`, `judge: rule`): the paper's are
  Qwen3-32B servers on other GPUs, which cost this GPU nothing;
- one process, so FSDP has nothing to shard (`trainer.parallel: fsdp` with one process is the
  single-process learner); the paper's 8 GPUs each hold an eighth of the optimizer state.

    PYTHONPATH=src python bench/memalpha_gpu.py --tokenizer .gpu/smollm2-tokenizer  # on a GPU
    PYTHONPATH=src python bench/memalpha_gpu.py --device cpu --tiny                 # the same code

`--tokenizer` names a saved tokenizer folder (default: SmolLM2's, which needs `make smollm2`).
Without a CUDA device (and without `--device cpu`) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "examples" / "memalpha_qwen3_4b.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "memory"
# --tiny: Qwen3-4B's config shrunk so that a CPU runs a step in seconds (same family and code)
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def load_tokenizer(path: str | None):
    from transformers import AutoTokenizer

    from honed.models.sources import resolve_model

    return AutoTokenizer.from_pretrained(path or resolve_model("smollm2-135m-instruct"))


def write_model(folder: Path, tokenizer, tiny: bool, device: torch.device) -> dict:
    """Qwen3-4B's architecture with random weights and the tokenizer's vocabulary, saved as a
    Hugging Face folder (what `policy.model` names); its parameter count and the seconds taken."""
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads((ROOT / "bench" / "configs" / "qwen3-4b.json").read_text())
    data.update(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if tiny:
        data.update(TINY)
    started = time.perf_counter()
    config = AutoConfig.for_model(**data)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    parameters = sum(p.numel() for p in model.parameters())
    if folder.exists():
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"parameters": parameters, "write_s": time.perf_counter() - started}


def overrides(args, model: Path) -> list[str]:
    paths = (
        f"{{train: {FIXTURES / 'memalpha' / 'train.parquet'}, "
        f"validation: {FIXTURES / 'memalpha' / 'test.parquet'}, "
        f"test: {FIXTURES / 'memalpha_memoryagentbench' / 'test.parquet'}}}"
    )
    settings = {
        "policy.model": str(model),
        "policy.device": args.device,
        "envs.0.args.path": paths,
        "envs.0.args.reader": "retrieval",
        "envs.0.args.judge": "rule",
        "envs.0.args.chat": "null",
        "trainer.max_steps": args.steps,
        "trainer.prompts_per_step": args.prompts,
        "trainer.num_generations": args.generations,
        "trainer.max_completion_length": args.tokens,
        "trainer.micro_batch_size": args.micro_batch,
        "eval.num_items": 1,
        "checkpoint.every": 0,
    }
    if args.device == "cpu":
        settings["policy.dtype"] = "float32"
    return [part for key, value in settings.items() for part in ("-o", f"{key}={value}")]


def step_rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "perf/step_time" in r]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny model of the same family")
    parser.add_argument("--tokenizer", help="a saved tokenizer folder (default: SmolLM2's)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=3, help="instances per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens at most")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--work", default="runs/memalpha_gpu", help="model and run folder")
    parser.add_argument("--json", help="also write the summary to this file")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (--device cpu --tiny runs the same code)")
        return 0
    from honed.cli import main as honed

    device = torch.device(args.device)
    work = Path(args.work)
    tokenizer = load_tokenizer(args.tokenizer)
    built = write_model(work / "model", tokenizer, args.tiny, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; model: {built['parameters'] / 1e9:.2f} B parameters", flush=True)
    run = work / "run"
    if run.exists():
        shutil.rmtree(run)
    started = time.perf_counter()
    code = honed(["train", str(RECIPE), "--run-dir", str(run), *overrides(args, work / "model")])
    wall = time.perf_counter() - started
    if code != 0:
        print(f"honed train exited {code}")
        return code
    rows = step_rows(run)
    print(
        f"{'step':>4}{'step s':>9}{'rollout s':>11}{'update s':>10}{'tokens/s':>10}{'peak GB':>9}"
    )
    for r in rows:
        print(
            f"{r['step']:>4}{r['perf/step_time']:>9.1f}{r['perf/rollout_time']:>11.1f}"
            f"{r['perf/update_time']:>10.1f}{r['perf/tokens_per_second']:>10.0f}"
            f"{r['perf/peak_memory_gb']:>9.2f}"
        )
    timed = rows[1:] or rows  # the first step pays for warm-up (kernels, allocator)
    checkpoint = sum(f.stat().st_size for f in (run / "checkpoints").rglob("*") if f.is_file())
    summary = {
        "device": name,
        "parameters": built["parameters"],
        "model_write_s": built["write_s"],
        "rollouts_per_step": args.prompts * args.generations,
        "max_completion_tokens": args.tokens,
        "micro_batch_size": args.micro_batch,
        "steps": len(rows),
        "median_step_s": statistics.median(r["perf/step_time"] for r in timed),
        "median_rollout_s": statistics.median(r["perf/rollout_time"] for r in timed),
        "median_update_s": statistics.median(r["perf/update_time"] for r in timed),
        "peak_memory_gb": max(r["perf/peak_memory_gb"] for r in rows),
        "run_wall_s": wall,
        "checkpoint_gb": checkpoint / 1e9,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
