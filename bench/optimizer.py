"""AdamW's step with torch's fused kernel against its default (foreach) implementation, on
float32 parameters of a given total size, interleaved, one thread by default.

    PYTHONPATH=src python bench/optimizer.py [--params 27000000] [--threads 1] [--rounds 3]

honed's `build_optimizer` picks the fused kernel wherever torch has one (CPU and CUDA).
"""

from __future__ import annotations

import argparse
import time

import torch


def step_ms(params: list[torch.nn.Parameter], fused: bool, steps: int) -> float:
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused)
    optimizer.step()  # allocates the moments
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - started) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=27_000_000)
    parser.add_argument("--tensors", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    size = args.params // args.tensors
    params = [torch.nn.Parameter(torch.randn(size, generator=g)) for _ in range(args.tensors)]
    for p in params:
        p.grad = torch.randn(size, generator=g)
    print(f"{'round':>5}{'foreach ms':>12}{'fused ms':>10}{'foreach/fused':>15}")
    for r in range(args.rounds):
        slow, fast = step_ms(params, False, args.steps), step_ms(params, True, args.steps)
        print(f"{r:>5}{slow:>12.1f}{fast:>10.1f}{slow / fast:>15.2f}")


if __name__ == "__main__":
    main()
