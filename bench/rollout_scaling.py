"""Rollout throughput with 1 and 2 Ray workers (and in-process) on this machine, and the
numbers a throughput model for N workers and M inference servers needs.

What is timed, per backend, over `--steps` steps after one warm-up step: the sampler draws a
step's items, the backend rolls them out (the quickstart's sort task with the embedded tiny
policy), and the learner sends its weights, as between two optimizer steps (no training, so
that only rollout is measured). Also measured:

- the Ray round trip of a request too small to cost anything (per-request overhead);
- object-store broadcast: one `ray.put` of a state dict and a `ray.get` by each of 2 actors;
- the client side of the inference-server backend: completions requests per second one learner
  drives against a local server that answers at once (`--skip-server` leaves it out).

Rates are wall-clock, with the CPU time of this process in brackets where it matters; the
machine's load average is printed, since it is shared. From the repository root:

    PYTHONPATH=src python bench/rollout_scaling.py
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from honed.config import Config
from honed.distributed import RolloutRequest, build_backend
from honed.distributed.ray_backend import connect
from honed.envs.registry import build_envs
from honed.models.policy import Policy, SamplingParams
from honed.sampling.sampler import Sampler
from honed.types import derive_seed


def config(args: argparse.Namespace, backend: str, workers: int = 1, threads: int = 1) -> Config:
    return Config.model_validate(
        {
            "seed": 0,
            "torch_threads": threads,
            "envs": [{"name": "sort", "args": {"levels": [6, 7, 8, 9, 10]}}],
            "trainer": {
                "prompts_per_step": args.prompts,
                "num_generations": args.generations,
                "max_completion_length": args.max_tokens,
            },
            "distributed": {"backend": backend, "num_rollout_workers": workers},
        }
    )


def run_backend(args: argparse.Namespace, cfg: Config) -> dict[str, float]:
    """Rollout rate of one backend: completions, tokens and groups per second."""
    torch.set_num_threads(cfg.torch_threads or 1)
    envs = build_envs(cfg.envs, cfg.seed)
    sampler = Sampler.from_config(envs, cfg.envs, cfg.curriculum, cfg.seed)
    policy = Policy.from_config(cfg.policy, cfg.seed)
    started = time.perf_counter()
    backend = build_backend(cfg, envs, policy, Path(tempfile.mkdtemp()))
    backend.sync_weights(policy, 0)
    ready = time.perf_counter() - started
    tokens = groups = 0
    sync = 0.0
    wall = cpu = 0.0
    for step in range(args.steps + 1):
        items = sampler.next_items(args.prompts, step, args.steps + 1)
        request = RolloutRequest(step, step, 0, items, derive_seed(0, "rollout", step, 0))
        t0, c0 = time.perf_counter(), time.process_time()
        backend.submit(request)
        rolled = backend.result(request)
        t1 = time.perf_counter()
        backend.sync_weights(policy, step + 1)
        t2, c2 = time.perf_counter(), time.process_time()
        if step == 0:
            continue  # warm-up: first calls, lazy imports, allocator
        wall += t2 - t0
        cpu += c2 - c0
        sync += t2 - t1
        groups += len(rolled)
        tokens += sum(
            len(t.segments[0].completion_ids) for r in rolled for t in r.group.trajectories
        )
    backend.close()
    return {
        "ready_s": ready,
        "groups_per_s": groups / wall,
        "completions_per_s": groups * args.generations / wall,
        "tokens_per_s": tokens / wall,
        "learner_cpu_share": cpu / wall,
        "sync_ms": 1000 * sync / args.steps,
        "step_s": wall / args.steps,
    }


def ray_overheads(rounds: int = 50) -> dict[str, float]:
    """Round trip of an empty actor call, and object-store broadcast bandwidth to 2 actors."""
    import ray

    @ray.remote(num_cpus=0)
    class Sink:
        def noop(self) -> int:
            return 0

        def take(self, state: dict) -> int:
            return sum(t.numel() for t in state.values())

    actors = [Sink.remote() for _ in range(2)]
    ray.get([a.noop.remote() for a in actors])
    t0 = time.perf_counter()
    for _ in range(rounds):
        ray.get(actors[0].noop.remote())
    round_trip = (time.perf_counter() - t0) / rounds
    out = {"round_trip_ms": 1000 * round_trip}
    for mb in (4, 256):
        state = {f"w{i}": torch.zeros(mb * 2**20 // 4 // 8) for i in range(8)}
        t0 = time.perf_counter()
        ref = ray.put(state)
        ray.get([a.take.remote(ref) for a in actors])
        out[f"broadcast_{mb}MB_ms"] = 1000 * (time.perf_counter() - t0)
    for a in actors:
        ray.kill(a)
    return out


def server_client_rate(requests: int = 400) -> dict[str, float]:
    """Completions requests per second one learner drives (server answering at once)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from openai_server import FakeOpenAIServer

    from honed.config import ServerConfig
    from honed.distributed.server import CompletionsGenerator

    def answer(req):
        ids = [5, 6, 7, 2]
        return {
            "choices": [
                {
                    "text": "",
                    "token_ids": ids,
                    "logprobs": {"token_logprobs": [-0.1] * len(ids)},
                    "finish_reason": "stop",
                }
            ]
        }

    policy = Policy.from_config(Config().policy, 0)
    out = {}
    with FakeOpenAIServer(models=["m"], routes={"/v1/completions": answer}) as server:
        cfg = ServerConfig(base_url=server.base_url, model="m", concurrency=16)
        generator = CompletionsGenerator(cfg, policy, SamplingParams(1.0, 1.0, 4))
        generator.generate(["1+1="] * 16, list(range(16)))
        t0, c0 = time.perf_counter(), time.process_time()
        generator.generate(["1+1="] * requests, list(range(requests)))
        wall = time.perf_counter() - t0
        out["requests_per_s"] = requests / wall
        out["client_cpu_ms_per_request"] = 1000 * (time.process_time() - c0) / requests
        generator.close()
    return out


def save_rate() -> float:
    """MB/s of `Policy.save` (safetensors + tokenizer), the first half of a disk reload."""
    policy = Policy.from_config(Config().policy, 0)
    size = sum(p.numel() * p.element_size() for p in policy.model.parameters()) / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i in range(5):
            policy.save(Path(tmp) / str(i))
        return 5 * size / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    import ray

    print(f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, ", end="")
    print(f"Python {platform.python_version()}, torch {torch.__version__}, ray {ray.__version__}")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print(
        f"workload: {args.prompts} prompts x {args.generations} completions of <= "
        f"{args.max_tokens} tokens per step, {args.steps} timed steps"
    )
    rows = [
        ("in-process, 1 thread", config(args, "inprocess", threads=1)),
        ("in-process, 2 threads", config(args, "inprocess", threads=2)),
    ]
    results = [(name, run_backend(args, cfg)) for name, cfg in rows]
    connect("local")  # this machine, workers seeing this process's sys.path; kept warm
    for workers in (1, 2):
        name = f"ray, {workers} worker{'s' * (workers > 1)}"
        results.append((name, run_backend(args, config(args, "ray", workers))))
    overheads = ray_overheads()
    ray.shutdown()
    keys = [
        "groups_per_s",
        "completions_per_s",
        "tokens_per_s",
        "step_s",
        "sync_ms",
        "learner_cpu_share",
    ]
    print("| backend | " + " | ".join(keys) + " | actors ready (s) |")
    print("|---" * (len(keys) + 2) + "|")
    for name, r in results:
        cells = " | ".join(f"{r[k]:,.1f}" if r[k] >= 10 else f"{r[k]:.3f}" for k in keys)
        print(f"| {name} | {cells} | {r['ready_s']:.1f} |")
    print("ray:", {k: round(v, 2) for k, v in overheads.items()})
    print(f"Policy.save: {save_rate():.1f} MB/s")
    if not args.skip_server:
        print("server client:", {k: round(v, 2) for k, v in server_client_rate().items()})
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
