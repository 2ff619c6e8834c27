"""GRPO steps on a GPU for Qwen2.5-shaped models: full fine-tuning in bf16 and LoRA, with and
without gradient checkpointing; steps/s, completion tokens/s and peak GPU memory; and TRL's
`GRPOTrainer` on the same work, as a ratio, when TRL is installed.

The models are built from the configs in `bench/configs/` (Qwen2.5-0.5B/1.5B-Instruct's
`config.json`) with random weights (nothing is downloaded), so the numbers measure the work,
not the answers. One step: sample `--prompts` × `--generations` completions of up to
`--tokens` tokens (no stop token is ever likely from random weights: they run to the limit)
from 64-token prompts, then one optimizer step of the GRPO loss over them (micro-batches of
`--micro-batch` sequences, DAPO token-level loss, β = 0, AdamW at lr 1e-6, gradient clipping
at 1). honed's step is `honed.models.generation` then `honed.rl.update.PolicyUpdate`, with
random ±1 advantages; TRL's is `GRPOTrainer`'s (transformers' `generate`, no vLLM), with
random ±1 rewards, the same prompts' distribution, model, dtype (bf16 weights on CUDA; TRL's
`bf16` flag on as well), LoRA (peft, r=16, alpha 32, all linear layers) and checkpointing.
Each TRL measurement runs in a child process, so that its peak memory is its own. Every step
after `--warmup` warm-up steps is timed.

    PYTHONPATH=src python bench/gpu.py                      # on a CUDA device
    PYTHONPATH=src python bench/gpu.py --device cpu --tiny  # the same code, tiny, on the CPU

Without a CUDA device (and without `--device cpu`) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
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
PROMPT_TOKENS = 64
LORA = {"r": 16, "alpha": 32}
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


def build_model(shape: str, tiny: bool, device: torch.device):
    """The shape's model with random weights, on `device` in the dtype honed picks there."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from honed.models.device import resolve_dtype

    data = json.loads((BENCH / "configs" / CONFIGS[shape]).read_text())
    if tiny:
        data.update(TINY)
    config = AutoConfig.for_model(**data)
    dtype = resolve_dtype("auto" if device.type == "cuda" else "float32", device)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)


def build_tokenizer(vocab: int):
    """A tokenizer whose tokens are the model's ids written `<id>`, separated by spaces (text
    is never read here; TRL needs text prompts and a tokenizer over the whole vocabulary); the
    last id ends a sequence, id 0 pads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({f"<{i}>": i for i in range(vocab)}, unk_token="<0>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece()  # joins tokens with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=f"<{vocab - 1}>", pad_token="<0>", unk_token="<0>"
    )


def prompt_ids(vocab: int, count: int, seed: int) -> list[list[int]]:
    """`count` prompts of `PROMPT_TOKENS` random ids (never the end-of-sequence id)."""
    g = torch.Generator().manual_seed(seed)
    shape = (count, PROMPT_TOKENS)
    return torch.randint(1, vocab - 1, shape, generator=g, device="cpu").tolist()


def build_policy(shape: str, tiny: bool, device: torch.device, lora: bool, checkpointing: bool):
    from honed.config import LoraSettings
    from honed.models.lora import add_adapters
    from honed.models.policy import Policy, enable_checkpointing

    model = build_model(shape, tiny, device)
    if checkpointing:
        enable_checkpointing(model)
    if lora:
        model = add_adapters(model, LoraSettings(**LORA), 0, shape)
    return Policy(model, build_tokenizer(model.config.vocab_size))


def one_step(policy, update, args, step: int) -> int:
    """Sample a step's completions, update once; the number of completion tokens."""
    from honed.models.generation import SamplingParams, generate
    from honed.rl.prepare import TrainSequence

    vocab = policy.model.config.vocab_size
    g = torch.Generator().manual_seed(step)
    prompts = prompt_ids(vocab, args.prompts, step)
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


def measure_trl(shape: str, mode: str, args) -> Result:
    """TRL's `GRPOTrainer` on the same work, in a child process (`--trl-child`)."""
    spec = {"shape": shape, "mode": mode, **vars(args)}
    env = dict(os.environ)
    if args.device.startswith("cuda:"):  # the child's only GPU, as accelerate's cuda:0
        env["CUDA_VISIBLE_DEVICES"] = args.device.split(":")[1]
    # The child's stderr (its step marks, warnings, a traceback) goes straight to ours, so that a
    # measurement stopped by a time limit still shows how far it got.
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--trl-child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            timeout=args.trl_timeout,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"TRL ({shape}, {mode}) did not finish within --trl-timeout {args.trl_timeout:g} s "
            "(its step marks are above)"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"TRL ({shape}, {mode}) failed with exit code {done.returncode} (its stderr is above)"
        )
    return Result(**json.loads(lines[-1]))


def _hashable_month_day_nano() -> None:
    """Let `datasets` hash objects that reach pyarrow's `MonthDayNano` class.

    pyarrow 25–26 declare that class's module as `builtins`, so pickling it by reference fails
    (`Can't pickle <class 'MonthDayNano'>`); `datasets` pickles with dill to fingerprint
    transforms, and under Python 3.12 TRL's dataset preparation reaches the class. Pickling it as
    an attribute of `pyarrow.lib` is what its reference should have been.
    """
    import pyarrow.lib
    from datasets.utils import _dill

    def reducer_override(self, obj):
        if obj is pyarrow.lib.MonthDayNano:
            return getattr, (pyarrow.lib, "MonthDayNano")
        return NotImplemented

    _dill.Pickler.reducer_override = reducer_override


def trl_child(spec: dict) -> None:
    """One TRL measurement (see the module docstring); prints its `Result` as JSON."""
    import tempfile

    _hashable_month_day_nano()

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from honed.models.device import peak_memory_gb, reset_peak_memory

    lora, checkpointing = next((lo, ck) for name, lo, ck in MODES if name == spec["mode"])
    device = torch.device("cuda" if spec["device"].startswith("cuda") else "cpu")
    model = build_model(spec["shape"], spec["tiny"], device)
    vocab = model.config.vocab_size
    steps, warmup = spec["steps"], spec["warmup"]
    prompts = prompt_ids(vocab, spec["prompts"] * (steps + warmup), seed=0)
    data = Dataset.from_list([{"prompt": " ".join(f"<{i}>" for i in p)} for p in prompts])
    rows = spec["prompts"] * spec["generations"]
    micro = min(spec["micro_batch"], rows)
    rng = torch.Generator().manual_seed(0)
    counted = {"tokens": 0}

    def reward(completions, completion_ids, **kwargs):
        counted["tokens"] += sum(len(c) for c in completion_ids)
        return (torch.randint(0, 2, (len(completions),), generator=rng) * 2.0 - 1.0).tolist()

    class Clock(TrainerCallback):
        """Times the steps after the warm-up; the peak memory of those steps."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.tokens = 0
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if device.type == "cuda":
                torch.cuda.synchronize()
            if state.global_step == warmup:
                reset_peak_memory(device)
                counted["tokens"] = 0
            if state.global_step >= warmup:
                self.marks.append(time.perf_counter())
            self.tokens = counted["tokens"]
            elapsed = time.perf_counter() - self.started
            print(f"[TRL] step {state.global_step} done at {elapsed:.1f} s", file=sys.stderr)

    bf16 = model.dtype == torch.bfloat16
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            use_cpu=device.type == "cpu",
            bf16=bf16,
            gradient_checkpointing=checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=rows // micro,
            num_generations=spec["generations"],
            max_completion_length=spec["tokens"],
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            loss_type="dapo",
            epsilon=0.2,
            learning_rate=1e-6,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=1.0,
            max_steps=steps + warmup if warmup else steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        )
        clock = Clock()
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=data,
            processing_class=build_tokenizer(vocab),
            peft_config=LoraConfig(
                r=LORA["r"], lora_alpha=LORA["alpha"], target_modules="all-linear"
            )
            if lora
            else None,
            callbacks=[clock],
        )
        started = time.perf_counter()
        trainer.train()
    marks = clock.marks if warmup else [started, *clock.marks]
    seconds = marks[-1] - marks[0]
    timed = len(marks) - 1
    result = Result(
        spec["shape"], spec["mode"], timed / seconds, clock.tokens / seconds, peak_memory_gb(device)
    )
    print(json.dumps(asdict(result)))


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
    parser.add_argument(
        "--modes", nargs="+", default=[m[0] for m in MODES], choices=[m[0] for m in MODES]
    )
    parser.add_argument(
        "--trl",
        choices=["auto", "off"],
        default="auto",
        help="auto (default): also TRL's GRPOTrainer when TRL is installed",
    )
    parser.add_argument("--jsonl", help="also append each measurement to this JSON-lines file")
    parser.add_argument(
        "--trl-timeout",
        type=float,
        help="seconds a TRL measurement may take (default: no limit); past it, the next mode",
    )
    parser.add_argument("--trl-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_child:
        trl_child(json.loads(args.trl_child))
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to measure (bench/gpu.py --device cpu --tiny runs it)")
        return 0
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(
        f"device: {name}; {args.prompts}x{args.generations} completions of <= {args.tokens} tokens",
        flush=True,
    )
    work = [(shape, m) for shape in args.models for m in MODES if m[0] in args.modes]
    with_trl = args.trl == "auto" and all(
        importlib.util.find_spec(p) for p in ("trl", "peft", "datasets")
    )
    # Each mode is measured with honed, then with TRL, and printed (and appended to --jsonl) as
    # soon as it is known: a run cut short by a time limit keeps the pairs it finished.
    ours_rows: list[Result] = []
    trl_rows: list[Result] = []
    failed = 0
    for shape, (mode, lora, ckpt) in work:
        try:
            ours = measure(shape, mode, lora, ckpt, args)
            record("honed", ours, args.jsonl)
            trl = measure_trl(shape, mode, args) if with_trl else None
            if trl is not None:
                record("TRL", trl, args.jsonl)
        except RuntimeError as error:  # torch.OutOfMemoryError is one
            failed += 1
            print(f"[failed] {shape} {mode}: {error}", flush=True)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        ours_rows.append(ours)
        if trl is not None:
            trl_rows.append(trl)
    table("honed", ours_rows)
    if not with_trl:
        print("TRL: not measured (" + ("--trl off" if args.trl == "off" else "not installed") + ")")
        return 1 if failed else 0
    table("TRL GRPOTrainer (transformers generate)", trl_rows)
    print(f"{'model':<14}{'mode':<28}{'honed/TRL steps/s':>18}{'TRL/honed peak':>16}")
    for ours, trl in zip(ours_rows, trl_rows, strict=True):
        print(
            f"{ours.model:<14}{ours.mode:<28}{ours.steps_per_s / trl.steps_per_s:>18.2f}"
            f"{trl.peak_gb / ours.peak_gb:>16.2f}"
        )
    return 1 if failed else 0


def record(framework: str, result: Result, jsonl: str | None) -> None:
    """Print one measurement at once and append it to `jsonl` when given."""
    r = result
    print(
        f"[{framework}] {r.model} {r.mode}: {r.steps_per_s:.3f} steps/s, "
        f"{r.tokens_per_s:.0f} tokens/s, {r.peak_gb:.2f} GB peak",
        flush=True,
    )
    if jsonl:
        with open(jsonl, "a") as f:
            f.write(json.dumps({"framework": framework, **asdict(r)}) + "\n")


def table(title: str, results: list[Result]) -> None:
    print(title)
    print(f"{'model':<14}{'mode':<28}{'steps/s':>9}{'tokens/s':>11}{'peak GB':>9}")
    for r in results:
        print(
            f"{r.model:<14}{r.mode:<28}{r.steps_per_s:>9.3f}{r.tokens_per_s:>11.0f}{r.peak_gb:>9.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
