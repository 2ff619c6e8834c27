"""GRPO steps on a GPU for Qwen2.5-shaped models: full fine-tuning in bf16 and LoRA, with and
without gradient checkpointing; steps/s, completion tokens/s and peak GPU memory.

The models are built from the configs in `bench/configs/` with random weights (nothing is
downloaded), so the numbers measure the work, not the answers. One step is honed's own: sample
`--prompts` × `--generations` completions of up to `--tokens` tokens from 64-token prompts
(`honed.models.generation`), then one optimizer step of the GRPO loss over them
(`honed.rl.update.PolicyUpdate`, micro-batches of `--micro-batch` sequences, DAPO, AdamW),
with random ±1 advantages. Every step after `--warmup` warm-up steps is timed.

    PYTHONPATH=src python bench/gpu.py                      # on a CUDA device
    PYTHONPATH=src python bench/gpu.py --device cpu --tiny  # the same code, tiny, on the CPU

Without a CUDA device (and without `--device cpu`) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
CONFIGS = {"Qwen2.5-0.5B": "qwen2.5-0.5b.json", "Qwen2.5-1.5B": "qwen2.5-1.5b.json"}
# --tiny: the 0.5B config shrunk so that a CPU runs a step in seconds (same family and code)
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
MODES = [  # (name, LoRA, gradient checkpointing)
    ("full", False, False),
    ("full + checkpointing", False, True),
    ("LoRA r=16", True, False),
    ("LoRA r=16 + checkpointing", True, True),
]


@dataclass
class Result:
    model: str
    mode: str
    steps_per_s: float
    tokens_per_s: float
    peak_gb: float


def build_policy(shape: str, tiny: bool, device: torch.device, lora: bool, checkpointing: bool):
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from honed.config import LoraSettings
    from honed.models.device import resolve_dtype
    from honed.models.lora import add_adapters
    from honed.models.policy import Policy, enable_checkpointing
    from honed.models.tiny import build_char_tokenizer

    data = json.loads((BENCH / "configs" / CONFIGS[shape]).read_text())
    if tiny:
        data.update(TINY)
    config = AutoConfig.for_model(**data)
    dtype = resolve_dtype("auto" if device.type == "cuda" else "float32", device)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    if checkpointing:
        enable_checkpointing(model)
    if lora:
        model = add_adapters(model, LoraSettings(r=16, alpha=32), 0, shape)
    tokenizer: PreTrainedTokenizerFast = build_char_tokenizer()  # ids only: text is not read
    return Policy(model, tokenizer)


def one_step(policy, update, args, step: int) -> int:
    """Sample a step's completions, update once; the number of completion tokens."""
    from honed.models.generation import SamplingParams, generate
    from honed.rl.update import TrainSequence

    vocab = policy.model.config.vocab_size
    g = torch.Generator().manual_seed(step)
    prompts = torch.randint(0, vocab, (args.prompts, 64), generator=g, device="cpu").tolist()
    rows = [p for p in prompts for _ in range(args.generations)]
    params = SamplingParams(1.0, 1.0, args.tokens)
    seeds = list(range(step * len(rows), (step + 1) * len(rows)))
    model = policy.model
    model.eval()
    samples = generate(model, rows, seeds, params, [vocab - 1], 0, lambda ids: "")
    signs = torch.randint(0, 2, (len(samples),), generator=g, device="cpu").tolist()
    sequences = [
        TrainSequence(
            s.prompt_ids, s.completion_ids, [1] * len(s.completion_ids), s.logprobs, 2.0 * a - 1
        )
        for s, a in zip(samples, signs, strict=True)
    ]
    update.step(sequences)
    return sum(len(s.completion_ids) for s in samples)


def measure(shape: str, mode: str, lora: bool, checkpointing: bool, args) -> Result:
    from honed.config import TrainerConfig
    from honed.models.device import peak_memory_gb, reset_peak_memory
    from honed.rl.schedule import build_lr_scheduler, build_optimizer
    from honed.rl.update import PolicyUpdate

    device = torch.device(args.device)
    policy = build_policy(shape, args.tiny, device, lora, checkpointing)
    settings = TrainerConfig(
        max_completion_length=args.tokens, micro_batch_size=args.micro_batch, learning_rate=1e-6
    )
    optimizer = build_optimizer(policy.model.parameters(), settings.learning_rate, 0.0)
    scheduler = build_lr_scheduler(optimizer, "constant", 0, 1000)
    update = PolicyUpdate(policy, optimizer, scheduler, settings)
    for step in range(args.warmup):
        one_step(policy, update, args, step)
    reset_peak_memory(device)
    tokens, started = 0, time.perf_counter()
    for step in range(args.warmup, args.warmup + args.steps):
        tokens += one_step(policy, update, args, step)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    result = Result(shape, mode, args.steps / seconds, tokens / seconds, peak_memory_gb(device))
    del policy, update, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny model of the same family")
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens at most")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (bench/gpu.py --device cpu --tiny runs it)")
        return 0
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(
        f"device: {name}; {args.prompts}x{args.generations} completions of <= {args.tokens} tokens"
    )
    results = [
        measure(shape, mode, lora, ckpt, args)
        for shape in args.models
        for mode, lora, ckpt in MODES
    ]
    print(f"{'model':<14}{'mode':<28}{'steps/s':>9}{'tokens/s':>11}{'peak GB':>9}")
    for r in results:
        print(
            f"{r.model:<14}{r.mode:<28}{r.steps_per_s:>9.3f}{r.tokens_per_s:>11.0f}{r.peak_gb:>9.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
