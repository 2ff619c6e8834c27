"""`honed serve` under 16 concurrent requests against the same 16 sent one at a time.

The server runs in this process (the engine and uvicorn on a thread, 127.0.0.1, a free port),
serving SmolLM2-135M-Instruct (`make smollm2`) or the tiny policy. The workload is 16 chat
requests through the `openai` client, one per quickstart question ("What is 47 + 39? Reply
with the number only."), temperature 1, each with its own seed, at most N new tokens. Seeded
rows draw their randomness from their own seed, so both modes generate the same completions
(up to the rounding of batched kernels) and the comparison is of the same tokens:

- one at a time: each request is sent after the previous one was answered;
- concurrent: 16 threads send theirs at once, and the engine batches requests that follow
  each other within its window (`--batch-window-ms`, 10 by default, as `honed serve`).

Throughput is completion tokens (every choice's `usage.completion_tokens`, stop token
included) over wall time; the modes alternate after a warm-up and the medians are reported,
with the engine's generation calls (how many batches the 16 became).

    PYTHONPATH=src python bench/serve_batching.py                   # SmolLM2, N=32, 3 repeats
    PYTHONPATH=src python bench/serve_batching.py --model tiny --new-tokens 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from datetime import date
from pathlib import Path

import openai
import torch
from common import load_average, machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serve_helpers import LocalServer

from honed.config import PolicyConfig
from honed.envs.tasks import ArithmeticEnv
from honed.models.policy import Policy
from honed.serve.weights import load_policy, with_chat_template

REQUESTS = 16


def questions() -> list[str]:
    env = ArithmeticEnv("add", seed=0, op="+", levels=[2], test_size=REQUESTS)
    return [env.prompt(item) for item in env.items("test")[:REQUESTS]]


def ask(client: openai.OpenAI, question: str, seed: int, new_tokens: int) -> int:
    reply = client.chat.completions.create(
        model="bench",
        messages=[{"role": "user", "content": question}],
        temperature=1.0,
        max_tokens=new_tokens,
        seed=seed,
    )
    return reply.usage.completion_tokens


def one_at_a_time(client: openai.OpenAI, asked: list[str], new_tokens: int) -> tuple[int, float]:
    started = time.perf_counter()
    tokens = sum(ask(client, q, i, new_tokens) for i, q in enumerate(asked))
    return tokens, time.perf_counter() - started


def concurrent(client: openai.OpenAI, asked: list[str], new_tokens: int) -> tuple[int, float]:
    counts = [0] * len(asked)

    def run(i: int) -> None:
        counts[i] = ask(client, asked[i], i, new_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(asked))]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="or tiny")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-window-ms", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.model == "tiny":
        policy = with_chat_template(Policy.from_config(PolicyConfig(), 0))
    else:
        policy = load_policy(args.model, "cpu", "float32", 0)
    asked = questions()
    print(f"{machine()}, {args.threads} threads, {date.today()}")
    results: dict[str, list[float]] = {"one at a time": [], "concurrent": []}
    calls: list[int] = []
    with LocalServer(
        policy, "bench", max_batch=REQUESTS, window_s=args.batch_window_ms / 1000
    ) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        concurrent(client, asked, args.new_tokens)  # warm-up
        for repeat in range(args.repeats):
            for name, mode in (("one at a time", one_at_a_time), ("concurrent", concurrent)):
                before = server.engine.stats.calls
                tokens, seconds = mode(client, asked, args.new_tokens)
                results[name].append(tokens / seconds)
                if name == "concurrent":
                    calls.append(server.engine.stats.calls - before)
                print(
                    f"repeat {repeat}: {name}: {tokens} tokens in {seconds:.2f} s "
                    f"({tokens / seconds:.1f} tokens/s), load {load_average()}",
                    flush=True,
                )
    alone = statistics.median(results["one at a time"])
    together = statistics.median(results["concurrent"])
    print(
        f"\n{args.model}, {REQUESTS} requests, at most {args.new_tokens} new tokens: one at a "
        f"time {alone:.1f} tokens/s, concurrent {together:.1f} tokens/s "
        f"({together / alone:.2f}x); the 16 concurrent requests ran as {calls} generation calls"
    )


if __name__ == "__main__":
    main()
