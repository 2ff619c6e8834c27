"""honed's GRPO step against the bare compute of the same step: the framework's overhead.

The bare step is what any GRPO implementation must compute, written as plainly as possible on
the same model object:

1. sampling: the step's 64 prompts (left-padded) are prefilled, then every row decodes with the
   model's KV cache (`DynamicCache`) and `torch.multinomial` for as many tokens as honed's
   longest completion of that step, so the bare loop samples at least as many tokens as honed;
2. one forward and backward over the same padded batch of (prompt, completion) sequences that
   honed trained on, with the plain policy-gradient loss Σ A·log π / tokens;
3. one AdamW step (gradient clipping included).

Everything else honed does in a step is overhead by this measure: drawing items, encoding
prompts, per-row seeded sampling and stopping, decoding text, the reward function, advantages,
batching, the clipped loss and its metrics, the log line. The two are run alternately in one
process (same model, same threads), after warm-up; the ratio of their medians is the overhead.

Run from the repository root:

    PYTHONPATH=src python bench/overhead.py --model tiny --model large
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import Settings, build_model_dir, honed_trainer, load_average, machine
from transformers import DynamicCache

from honed.models.batching import left_pad, make_batch
from honed.rl.prepare import prepare


def bare_generate(model, prompts: list[list[int]], steps: int, pad_id: int) -> torch.Tensor:
    """Sample `steps` tokens for every prompt with the KV cache: no stopping, no bookkeeping."""
    ids, mask = left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        logits_to_keep=1,
    )
    pos = positions[:, -1:]
    tokens = []
    for _ in range(steps):
        tok = torch.multinomial(torch.softmax(out.logits[:, -1].float(), dim=-1), 1)
        tokens.append(tok)
        mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
        pos = pos + 1
        out = model(input_ids=tok, attention_mask=mask, position_ids=pos, past_key_values=cache)
    return torch.cat(tokens, dim=1)


def bare_update(model, optimizer, batch, advantages: torch.Tensor) -> None:
    """One forward and backward of Σ A·log π over the completion tokens, then AdamW."""
    width = batch.completion_width
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=width + 1,
    ).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp = logp.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    mask = batch.completion_mask.float()
    loss = -(logp * advantages[:, None] * mask).sum() / mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def measure(shape: str, args: argparse.Namespace, work: Path) -> dict:
    model_dir = work / f"model-{shape}"
    params = build_model_dir(shape, model_dir)
    s = Settings(
        model_dir=str(model_dir),
        run_dir=str(work / f"run-{shape}"),
        threads=args.threads,
        max_completion_length=args.max_completion_length,
    )
    torch.set_num_threads(args.threads)
    trainer = honed_trainer(s)
    policy = trainer.policy
    seen: dict[str, list] = {}
    collect = trainer.collect

    def recording_collect():
        groups, penalties, metrics = collect()
        seen["groups"] = groups
        return groups, penalties, metrics

    trainer.collect = recording_collect  # the bare step redoes the work of honed's last step
    # The bare loop has its own optimizer over the same weights (its state must not leak into
    # honed's); both keep training the same model, as two interleaved runs would.
    bare_opt = torch.optim.AdamW(policy.model.parameters(), lr=s.learning_rate, betas=(0.9, 0.99))
    honed_times: list[float] = []
    bare_times: list[float] = []
    split = {"generate": [], "update": []}
    tokens = {"honed": 0, "bare": 0}
    load_before = load_average()
    for i in range(args.warmup + args.steps):
        keep = i >= args.warmup
        start = time.perf_counter()
        metrics = trainer.train_step()
        trainer.life.log(trainer.step, metrics)
        honed_time = time.perf_counter() - start

        # The same work, bare: the last step's groups give the prompts, lengths and sequences.
        groups = [rolled.group for rolled in seen["groups"]]
        segments = [t.segments[0] for g in groups for t in g.trajectories]
        steps = max(len(seg.completion_ids) for seg in segments)
        sequences = prepare(groups, trainer.config.trainer).sequences
        batch = make_batch(
            [q.prompt_ids for q in sequences],
            [q.completion_ids for q in sequences],
            [q.mask for q in sequences],
            policy.pad_id,
        )
        advantages = torch.tensor([q.advantage for q in sequences])
        start = time.perf_counter()
        policy.model.eval()
        with torch.inference_mode():
            bare_generate(policy.model, [seg.prompt_ids for seg in segments], steps, policy.pad_id)
        middle = time.perf_counter()
        policy.model.train()
        bare_update(policy.model, bare_opt, batch, advantages)
        end = time.perf_counter()
        if keep:
            honed_times.append(honed_time)
            bare_times.append(end - start)
            split["generate"].append(middle - start)
            split["update"].append(end - middle)
            tokens["honed"] += sum(len(seg.completion_ids) for seg in segments)
            tokens["bare"] += steps * len(segments)
    honed, bare = statistics.median(honed_times), statistics.median(bare_times)
    return {
        "model": shape,
        "params": params,
        "honed": honed,
        "bare": bare,
        "bare_generate": statistics.median(split["generate"]),
        "bare_update": statistics.median(split["update"]),
        "tokens_honed": tokens["honed"] / args.steps,
        "tokens_bare": tokens["bare"] / args.steps,
        "load": f"{load_before} → {load_average()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=["tiny", "large"])
    parser.add_argument("--steps", type=int, default=20, help="measured steps (each runs both)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=32)
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {load_average()}")
    print(
        f"{args.steps} steps of each, alternating, after {args.warmup} warm-up; "
        f"{args.threads} torch threads; 8 prompts × 8 generations; "
        f"max_completion_length {args.max_completion_length}"
    )
    print(
        "| model | honed step (s) | bare step (s) | bare sampling (s) | bare fwd+bwd+AdamW (s) "
        "| tokens/step honed (bare) | overhead ratio | load (before → after) |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory(prefix="honed-overhead-") as tmp:
        for shape in args.model or ["tiny"]:
            r = measure(shape, args, Path(tmp))
            print(
                f"| {shape} ({r['params'] / 1e6:.1f} M) | {r['honed']:.3f} | {r['bare']:.3f} | "
                f"{r['bare_generate']:.3f} | {r['bare_update']:.3f} | "
                f"{r['tokens_honed']:.0f} ({r['tokens_bare']:.0f}) | "
                f"{r['honed'] / r['bare']:.2f} | {r['load']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
