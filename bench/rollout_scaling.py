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
import statistics
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


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes on this machine, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def run_backend(args: argparse.Namespace, cfg: Config) -> dict[str, float]:
    """Rollout rate of one backend, wall-clock and per CPU-second of the learner and the
    workers (Ray's own daemons, which move the objects, are not counted)."""
    torch.set_num_threads(cfg.torch_threads or 1)
    envs = build_envs(cfg.envs, cfg.seed)
    sampler = Sampler.from_config(envs, cfg.envs, cfg.curriculum, cfg.seed)
    policy = Policy.from_config(cfg.policy, cfg.seed)
    backend = build_backend(cfg, envs, policy, Path(tempfile.mkdtemp()))
    pids = [os.getpid()]
    tokens = completions = 0
    sync = wall = cpu = first = 0.0
    for step in range(args.steps + 1):
        items = sampler.next_items(args.prompts, step, args.steps + 1)
        request = RolloutRequest(step, step, 0, items, derive_seed(0, "rollout", step, 0))
        t0, c0 = time.perf_counter(), cpu_seconds(pids)
        backend.sync_weights(policy, step)
        t1 = time.perf_counter()
        backend.submit(request)
        rolled = backend.result(request)
        t2, c2 = time.perf_counter(), cpu_seconds(pids)
        if step == 0:  # warm-up: actors start, first calls, allocator
            first = t2 - t0
            if hasattr(backend, "workers"):
                import ray

                pids += ray.get([w.pid.remote() for w in backend.workers])
            continue
        wall += t2 - t0
        cpu += c2 - c0
        sync += t1 - t0
        completions += len(rolled) * args.generations
        tokens += sum(
            len(t.segments[0].completion_ids) for r in rolled for t in r.group.trajectories
        )
    backend.close()
    return {
        "completions_per_s": completions / wall,
        "tokens_per_s": tokens / wall,
        "cpu_s_per_1k_completions": 1000 * cpu / completions,
        "step_s": wall / args.steps,
        "sync_ms": 1000 * sync / args.steps,
        "first_step_s": first,
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
    ray.get([a.take.remote(ray.put({"w": torch.zeros(1)})) for a in actors])  # imports torch
    for mb in (4, 64, 256):
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


def save_rate() -> tuple[float, float]:
    """(MB, MB/s) of `Policy.save` for a 34 M-parameter model: the learner's half of a disk
    reload (the server reads the same bytes back)."""
    shape = {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
    }
    policy = Policy.from_config(Config.model_validate({"policy": {"tiny": shape}}).policy, 0)
    size = sum(p.numel() * p.element_size() for p in policy.model.parameters()) / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i in range(3):
            policy.save(Path(tmp) / str(i))
        return size, 3 * size / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
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
    connect("local")  # this machine, workers seeing this process's sys.path; kept warm
    runs: dict[str, list[dict[str, float]]] = {}
    configs = [
        ("in-process, 1 thread", config(args, "inprocess", threads=1)),
        ("ray, 1 worker", config(args, "ray", 1)),
        ("ray, 2 workers", config(args, "ray", 2)),
    ]
    for _ in range(args.repeats):  # interleaved, so load changes hit every row alike
        for name, cfg in configs:
            runs.setdefault(name, []).append(run_backend(args, cfg))
    runs["in-process, 2 threads"] = [run_backend(args, config(args, "inprocess", threads=2))]
    overheads = ray_overheads()
    ray.shutdown()
    keys = list(next(iter(runs.values()))[0])
    print(f"medians of {args.repeats} interleaved runs (in-process, 2 threads: one run)")
    print("| backend | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, rs in runs.items():
        cells = []
        for k in keys:
            v = statistics.median(r[k] for r in rs)
            cells.append(f"{v:,.0f}" if v >= 100 else f"{v:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("ray:", {k: round(v, 2) for k, v in overheads.items()})
    size, rate = save_rate()
    print(f"Policy.save: {size:.0f} MB at {rate:.0f} MB/s")
    if not args.skip_server:
        print("server client:", {k: round(v, 2) for k, v in server_client_rate().items()})
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
