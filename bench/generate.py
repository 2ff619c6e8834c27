"""honed's rollout sampling against transformers' `generate` on a real model, and where a GRPO
step's time goes.

Part 1, sampling. SmolLM2-135M-Instruct (`make smollm2`), the quickstart's prompts (two-digit
additions asked in words, rendered by the chat template): P distinct prompts, each sampled G
times, temperature 1, top-p 1, at most N new tokens, stopping at the end-of-turn token. Both
sides get the same left-padded batch of P x G rows in one call:

- honed: `PolicySampler.generate` (KV cache, each group's prompt prefilled once, per-row seeds,
  rows leave the batch when they stop, and the log-prob of every sampled token returned);
- transformers: `model.generate(do_sample=True, temperature=1, top_k=0, top_p=1)` with the same
  stop tokens; it returns no log-probs (a trainer needs them; asking for them costs extra), so
  the comparison, if anything, favours transformers.

Tokens are the completion tokens each row generated up to and including its stop token (padding
after a stop is not counted); tokens/s is their sum over the batch's wall time. The two run
alternately after a warm-up, and the medians are compared.

Part 2, a GRPO step of the quickstart config split into sampling (the environment's rollouts),
scoring (the learner's forward over the step's sequences, with grad: it also gives π_old) and
update (backward and optimizer step: the rest of the update).

    PYTHONPATH=src python bench/generate.py            # defaults: P=8, G=8, N=16 and N=64
    PYTHONPATH=src python bench/generate.py --new-tokens 32 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import load_average, machine

import honed.rl.update as update_module
from honed.config import load_config
from honed.envs.tasks import ArithmeticEnv
from honed.models.batching import left_pad
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.models.sources import MODELS, resolve_model
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


def honed_tokens(sampler: PolicySampler, prompts: list[str], seeds: list[int]) -> int:
    return sum(len(s.completion_ids) for s in sampler.generate(prompts, seeds))


def hf_tokens(policy: Policy, rows: list[list[int]], new_tokens: int, seed: int) -> int:
    ids, mask = left_pad(rows, policy.pad_id)
    torch.manual_seed(seed)
    out = policy.model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        eos_token_id=policy.stop_ids,
        pad_token_id=policy.pad_id,
    )
    generated = out[:, ids.shape[1] :]
    stops = torch.isin(generated, torch.tensor(policy.stop_ids))
    lengths = torch.where(stops.any(1), stops.int().argmax(1) + 1, generated.shape[1])
    return int(lengths.sum())


def sampling(policy: Policy, prompts: int, group: int, new_tokens: int, repeats: int) -> dict:
    env = ArithmeticEnv("add", levels=[2])
    texts = [env.prompt(item) for item in env.items("train")[:prompts]]
    batch = [t for t in texts for _ in range(group)]
    rows = [policy.encode(t) for t in batch]
    sampler = PolicySampler(policy, SamplingParams(1.0, 1.0, new_tokens))
    policy.model.eval()
    honed_tokens(sampler, batch, list(range(len(batch))))  # warm-up
    hf_tokens(policy, rows, new_tokens, 0)
    rates: dict[str, list[float]] = {"honed": [], "transformers": []}
    for r in range(repeats):
        seeds = [r * len(batch) + i for i in range(len(batch))]
        started = time.perf_counter()
        n = honed_tokens(sampler, batch, seeds)
        rates["honed"].append(n / (time.perf_counter() - started))
        started = time.perf_counter()
        n = hf_tokens(policy, rows, new_tokens, r)
        rates["transformers"].append(n / (time.perf_counter() - started))
    ours, theirs = statistics.median(rates["honed"]), statistics.median(rates["transformers"])
    return {"new_tokens": new_tokens, "honed": ours, "transformers": theirs, "ratio": ours / theirs}


def step_split(steps: int) -> dict[str, float]:
    """Median seconds per phase over `steps` GRPO steps of the quickstart config."""
    forward_time = [0.0]
    timed = update_module.score

    def score(*args, **kwargs):
        started = time.perf_counter()
        out = timed(*args, **kwargs)
        forward_time[0] += time.perf_counter() - started
        return out

    update_module.score = score
    config = load_config(
        ROOT / "examples" / "quickstart.yaml",
        [f"trainer.max_steps={steps}", "eval.num_items=1", "eval.few_shot=0", "checkpoint.every=0"],
    )
    phases: dict[str, list[float]] = {"sampling": [], "scoring": [], "update": [], "step": []}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = GRPOTrainer(config, RunDir(tmp))
        trainer.setup(resume=False)
        try:
            for _ in range(steps):
                forward_time[0] = 0.0
                m = trainer.train_step()
                phases["sampling"].append(m["perf/rollout_time"])
                phases["scoring"].append(forward_time[0])
                phases["update"].append(m["perf/update_time"] - forward_time[0])
                phases["step"].append(m["perf/step_time"])
        finally:
            trainer.rollouts.close()
            update_module.score = timed
    return {k: statistics.median(v) for k, v in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, action="append")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps for the split")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if MODELS["smollm2-135m-instruct"].path() is None:
        raise SystemExit(f"SmolLM2 is not installed: {MODELS['smollm2-135m-instruct'].install}")
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)
    print(
        f"machine: {machine()}; load average {load_average()}; torch threads {torch.get_num_threads()}"
    )
    print(f"\nsampling, {args.prompts} prompts x {args.group} completions, temperature 1")
    print("| new tokens (max) | honed tokens/s | transformers tokens/s | honed / transformers |")
    print("|---|---|---|---|")
    for n in args.new_tokens or [16, 64]:
        r = sampling(policy, args.prompts, args.group, n, args.repeats)
        print(f"| {n} | {r['honed']:.0f} | {r['transformers']:.0f} | {r['ratio']:.2f} |")
    del policy
    split = step_split(args.steps)
    print(f"\nGRPO step of examples/quickstart.yaml, median of {args.steps} steps (seconds)")
    print("| sampling | scoring (forward) | update (backward + optimizer) | step |")
    print("|---|---|---|---|")
    print(
        f"| {split['sampling']:.2f} | {split['scoring']:.2f} | {split['update']:.2f} "
        f"| {split['step']:.2f} |"
    )
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
