"""Sampling a batch whose prompts share a long prefix, with the prefix prefilled once against
every row prefilling all of it: time per batch and the samples of both (which must agree).

The prompts are those of a tool-using episode's first turn on SmolLM2-135M-Instruct (`make
smollm2`): honed's description of the tools example's two tools in the system message (the
template renders no tools), then one question of examples/tools/test.jsonl per row, so every
row repeats the same system message, as every turn of a multi-turn rollout does.

    PYTHONPATH=src python bench/shared_prefix.py [--rows 32] [--tokens 24] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from common import machine
from transformers.utils import get_json_schema

from honed.envs.multiturn.template import ChatFormat
from honed.models import generation
from honed.models.policy import Policy, SamplingParams
from honed.models.sources import resolve_model

ROOT = Path(__file__).resolve().parents[1]


def prompts(policy: Policy, rows: int) -> list[list[int]]:
    sys.path.insert(0, str(ROOT / "examples" / "tools"))
    import tools

    chat = ChatFormat(
        policy.tokenizer,
        policy.end_of_turn_id,
        [get_json_schema(tools.lookup), get_json_schema(tools.calc)],
    )
    lines = (ROOT / "examples" / "tools" / "test.jsonl").read_text().splitlines()[:rows]
    return [
        chat.prompt_ids([{"role": "user", "content": json.loads(line)["prompt"]}]) for line in lines
    ]


def timed(policy: Policy, batch: list[list[int]], tokens: int, share: bool) -> tuple:
    params = SamplingParams(temperature=1.0, max_tokens=tokens, share_prefix=share)
    started = time.perf_counter()
    samples = policy.generate(batch, list(range(len(batch))), params)
    return time.perf_counter() - started, [s.completion_ids for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)
    batch = prompts(policy, args.rows)
    shared = generation.shared_prefix(batch)
    timed(policy, batch[:2], args.tokens, True)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, list] = {}
    for _ in range(args.rounds):
        for share in (False, True):
            seconds, outputs[share] = timed(policy, batch, args.tokens, share)
            times[share].append(seconds)
    same = sum(a == b for a, b in zip(outputs[True], outputs[False], strict=True))
    whole, once = statistics.median(times[False]), statistics.median(times[True])
    print(f"{machine()}, {args.threads} torch threads")
    print(
        f"{args.rows} prompts of {min(map(len, batch))}-{max(map(len, batch))} tokens, "
        f"{shared} of them shared; {args.tokens} sampled tokens per row; medians of {args.rounds}"
    )
    print("| prefill | s per batch |\n|---|---|")
    print(f"| every row the whole prompt | {whole:.2f} |")
    print(f"| the shared prefix once | {once:.2f} |")
    print(f"ratio (whole / once): {whole / once:.2f}; the same samples in {same} of {len(batch)}")
    print("(at temperature 1 a row may draw another tail token: `trainer.share_prefix`)")


if __name__ == "__main__":
    main()
