"""Peak memory of scoring at a large vocabulary: honed's chunked head against the naive
float32 log-softmax over the whole batch.

One scoring forward and backward pass (the update's: log-probs with gradient, entropy without)
of 8 sequences × 512 completion tokens (16-token prompts) at Qwen2.5's vocabulary of 151,936,
through a one-layer Llama of hidden size 64, so that the vocabulary is what costs memory. Each
side runs in a child process of its own, which reports its peak resident memory
(`ru_maxrss`) and its log-probs; the parent checks the log-probs agree within 1e-5 and prints
the peaks, what the pass itself added to each process, and their ratio. Its last line reads
`honed/naive peak memory: 0.NN` (target: at most 0.35).

    PYTHONPATH=src python bench/memory.py            # about 10 GB free memory for the naive side
    PYTHONPATH=src python bench/memory.py --rows 2   # smaller, for a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

VOCAB = 151_936


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def build(rows: int, completion: int, prompt: int):
    """The model (random weights from a fixed seed) and a batch of random tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from honed.models.batching import make_batch

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=prompt + completion + 8,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).train()
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, VOCAB, (rows, prompt), generator=g).tolist()
    completions = torch.randint(0, VOCAB, (rows, completion), generator=g).tolist()
    batch = make_batch(prompts, completions, [[1] * completion] * rows, pad_id=0)
    return model, batch


def child(side: str, rows: int, completion: int, prompt: int, out: Path) -> None:
    """One side's pass, in this process: peak memory before and after, and the log-probs."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from numerics import token_logprobs

    from honed.models.scoring import score

    torch.set_num_threads(1)
    model, batch = build(rows, completion, prompt)
    advantages = torch.linspace(-1, 1, rows)[:, None]
    before = peak_mib()
    if side == "honed":
        scores = score(model, batch, temperature=1.0, with_entropy=True)
        logp = scores.logprobs
    else:
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
        ).logits[:, -completion - 1 : -1]
        logp, _ = token_logprobs(logits, batch.completion_ids, 1.0, with_entropy=True)
        del logits
    (logp * advantages).sum().backward()
    after = peak_mib()
    torch.save(logp.detach(), out / f"{side}.pt")
    (out / f"{side}.json").write_text(json.dumps({"before": before, "peak": after}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--completion", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--child", choices=["honed", "naive"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows, args.completion, args.prompt, Path(args.out))
        return
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for side in ("honed", "naive"):
            sizes = ["--rows", str(args.rows), "--completion", str(args.completion)]
            sizes += ["--prompt", str(args.prompt)]
            subprocess.run(
                [sys.executable, __file__, "--child", side, "--out", tmp, *sizes], check=True
            )
            results[side] = json.loads((Path(tmp) / f"{side}.json").read_text())
            results[side]["logp"] = torch.load(Path(tmp) / f"{side}.pt")
    diff = float((results["honed"]["logp"] - results["naive"]["logp"]).abs().max())
    logits = args.rows * args.completion * VOCAB
    print(
        f"{args.rows} sequences x {args.completion} completion tokens, vocabulary {VOCAB:,} "
        f"({logits * 4 / 2**30:.2f} GiB of float32 logits)"
    )
    print(f"{'':8}{'peak RSS (MiB)':>16}{'added by the pass (MiB)':>26}")
    for side in ("honed", "naive"):
        r = results[side]
        print(f"{side:8}{r['peak']:>16,.0f}{r['peak'] - r['before']:>26,.0f}")
    print(f"largest log-prob difference: {diff:.2e}")
    if diff > 1e-5:
        sys.exit("the log-probs differ by more than 1e-5")
    added = (results["honed"]["peak"] - results["honed"]["before"]) / max(
        1.0, results["naive"]["peak"] - results["naive"]["before"]
    )
    print(f"honed/naive memory added by the pass: {added:.2f}")
    print(f"honed/naive peak memory: {results['honed']['peak'] / results['naive']['peak']:.2f}")


if __name__ == "__main__":
    main()
