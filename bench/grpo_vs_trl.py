"""honed against TRL's `GRPOTrainer` on the same GRPO work, alternately, in one invocation.

Both frameworks load the same local model directory (honed's embedded Llama built from a config
and saved with its character tokenizer), draw prompts from the same JSONL file (two-digit
subtractions), score with the same reward function (`bench/reward.py`, TRL's signature) and use
the same settings: 8 prompts × 8 generations per step, the same maximum completion length,
temperature 1, top-p 1 and no top-k, `beta = 0`, DAPO token-level loss with group-scaled
advantages, ε = 0.2, AdamW (lr 1e-4, betas 0.9/0.99, no weight decay, constant schedule; both
use torch's fused AdamW kernel, TRL's default),
gradient clipping at 1.0, one optimizer step per generation batch, float32. TRL's two
GPU-minded defaults are switched off so that both do the same arithmetic: `bf16` (mixed
precision) and `gradient_checkpointing` (a second forward in the backward pass). honed keeps
zero-spread groups (`filter_zero_std: false`) so it never skips work TRL does.

How it is timed. Each framework runs in its own worker process for the whole invocation (each
process's peak RSS is then that framework's peak memory: `ru_maxrss`, the kernel's high-water
mark of resident memory, imports and model included). The parent tells one worker at a time to
run a few steps while the other waits, alternating the order every round (TRL first, then honed
first, ...), after warm-up steps that are not counted. A step is the wall time between the end of
one optimizer step and the end of the next: generation, rewards, advantages, the loss, backward,
the optimizer step and the per-step metrics/log line. Both processes use `--threads` torch
threads. CPU time of the worker process is also recorded: on a machine shared with other jobs
it shows what each framework costs when it gets the CPU.

Run from the repository root, with TRL installed (`pip install -e ".[bench]"`):

    PYTHONPATH=src python bench/grpo_vs_trl.py --model tiny --model large
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    BENCH,
    ROOT,
    Settings,
    build_model_dir,
    current_rss_mib,
    data_rows,
    honed_trainer,
    load_average,
    machine,
    peak_rss_mib,
)

MARK = "@@bench "  # workers' result lines; anything else they print is passed through


# --------------------------------------------------------------------------- worker side


class Channel:
    """The worker's end: commands on stdin, marked JSON results on stdout."""

    def send(self, **payload) -> None:
        print(MARK + json.dumps(payload), flush=True)

    def command(self) -> tuple[str, int]:
        line = sys.stdin.readline().split()
        return (line[0], int(line[1]) if len(line) > 1 else 0) if line else ("quit", 0)


class StepClock:
    """Wall and CPU time per step, restarted whenever the worker resumes after waiting."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.tokens: list[float] = []
        self.restart()

    def restart(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def lap(self, tokens: float) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.walls.append(wall - self.wall)
        self.cpus.append(cpu - self.cpu)
        self.tokens.append(tokens)
        self.wall, self.cpu = wall, cpu

    def report(self, channel: Channel) -> None:
        import torch

        channel.send(
            wall=self.walls,
            cpu=self.cpus,
            tokens=self.tokens,
            peak_rss=peak_rss_mib(),
            threads=torch.get_num_threads(),
        )
        self.walls, self.cpus, self.tokens = [], [], []


def run_honed(s: Settings) -> None:
    import torch

    torch.set_num_threads(s.threads)
    trainer = honed_trainer(s)
    channel, clock = Channel(), StepClock()
    channel.send(ready=True, rss=current_rss_mib())
    per_step = s.prompts_per_step * s.num_generations
    while True:
        what, n = channel.command()
        if what != "run":
            return
        clock.restart()
        for _ in range(n):
            metrics = trainer.train_step()
            trainer.life.log(trainer.step, metrics)
            clock.lap(metrics["completions/mean_length"] * per_step)
        clock.report(channel)


def run_trl(s: Settings) -> None:
    import torch
    from datasets import Dataset
    from reward import partial_match
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(s.threads)
    channel, clock = Channel(), StepClock()
    counted = {"tokens": 0}

    def reward(completions, completion_ids, **kwargs):
        counted["tokens"] += sum(len(c) for c in completion_ids)
        return partial_match(completions, **kwargs)

    reward.__name__ = "partial_match"

    class Pacer(TrainerCallback):
        """Runs the commanded number of steps, then reports and waits for the next command."""

        def __init__(self) -> None:
            self.left = 0

        def wait(self, control):
            clock.report(channel) if clock.walls else None
            what, n = channel.command()
            if what != "run":
                control.should_training_stop = True
            self.left = n
            clock.restart()
            return control

        def on_train_begin(self, args, state, control, **kwargs):
            channel.send(ready=True, rss=current_rss_mib())
            return self.wait(control)

        def on_step_end(self, args, state, control, **kwargs):
            clock.lap(counted["tokens"])
            counted["tokens"] = 0
            self.left -= 1
            return self.wait(control) if self.left == 0 else control

    config = GRPOConfig(
        output_dir=s.run_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=s.seed,
        per_device_train_batch_size=s.prompts_per_step * s.num_generations,
        gradient_accumulation_steps=1,
        num_generations=s.num_generations,
        num_iterations=1,
        max_completion_length=s.max_completion_length,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=0,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=0.2,
        learning_rate=s.learning_rate,
        lr_scheduler_type="constant",
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=1_000_000,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        model_init_kwargs={"dtype": torch.float32},
    )
    tokenizer = AutoTokenizer.from_pretrained(s.model_dir)
    trainer = GRPOTrainer(
        model=s.model_dir,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(data_rows()),
        processing_class=tokenizer,
        callbacks=[Pacer()],
    )
    trainer.train()


# --------------------------------------------------------------------------- parent side


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)
    setup_rss: float = 0.0
    peak_rss: float = 0.0
    threads: int = 0

    @classmethod
    def start(cls, name: str, s: Settings) -> Worker:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "src"), str(BENCH), env.get("PYTHONPATH", "")]
        )
        env["TOKENIZERS_PARALLELISM"] = "false"
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, "--settings", s.to_json()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        worker = cls(name, proc)
        worker.setup_rss = worker.receive()["rss"]
        return worker

    def receive(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
        raise RuntimeError(f"the {self.name} worker exited (code {self.proc.wait()})")

    def run(self, steps: int, keep: bool) -> None:
        self.proc.stdin.write(f"run {steps}\n")
        self.proc.stdin.flush()
        out = self.receive()
        self.peak_rss, self.threads = out["peak_rss"], out["threads"]
        if keep:
            self.wall += out["wall"]
            self.cpu += out["cpu"]
            self.tokens += out["tokens"]

    def stop(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=120)


def compare(shape: str, args: argparse.Namespace, work: Path) -> dict:
    model_dir = work / f"model-{shape}"
    params = build_model_dir(shape, model_dir)
    workers = {}
    for name in ("trl", "honed"):
        s = Settings(
            model_dir=str(model_dir),
            run_dir=str(work / f"run-{shape}-{name}"),
            threads=args.threads,
            max_completion_length=args.max_completion_length,
        )
        workers[name] = Worker.start(name, s)
    load_before = load_average()
    for w in workers.values():
        w.run(args.warmup, keep=False)
    for r in range(args.rounds):
        order = ("trl", "honed") if r % 2 == 0 else ("honed", "trl")
        for name in order:
            workers[name].run(args.steps, keep=True)
    for w in workers.values():
        w.stop()
    return {
        "model": shape,
        "params": params,
        "load": f"{load_before} → {load_average()}",
        **{name: summarize(w) for name, w in workers.items()},
    }


def summarize(w: Worker) -> dict:
    wall = statistics.median(w.wall)
    return {
        "median_step_s": wall,
        "median_cpu_s": statistics.median(w.cpu),
        "tokens_per_s": sum(w.tokens) / sum(w.wall),
        "tokens_per_step": sum(w.tokens) / len(w.tokens),
        "peak_rss_mib": w.peak_rss,
        "setup_rss_mib": w.setup_rss,
        "steps": len(w.wall),
        "threads": w.threads,
    }


def table(results: list[dict]) -> str:
    head = (
        "| model | framework | median step (s) | median CPU (s) | completion tok/s | "
        "tok/step | peak RSS (MiB) | RSS after setup (MiB) |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for res in results:
        label = f"{res['model']} ({res['params'] / 1e6:.1f} M)"
        for name in ("trl", "honed"):
            x = res[name]
            lines.append(
                f"| {label} | {name} | {x['median_step_s']:.3f} | {x['median_cpu_s']:.3f} | "
                f"{x['tokens_per_s']:,.0f} | {x['tokens_per_step']:.0f} | "
                f"{x['peak_rss_mib']:,.0f} | {x['setup_rss_mib']:,.0f} |"
            )
    lines += [
        "",
        "| model | honed / TRL step time | honed / TRL CPU time | honed / TRL peak RSS | "
        "load (1-min avg, before → after) |",
        "|---|---|---|---|---|",
    ]
    for res in results:
        t, h = res["trl"], res["honed"]
        lines.append(
            f"| {res['model']} | {h['median_step_s'] / t['median_step_s']:.2f} | "
            f"{h['median_cpu_s'] / t['median_cpu_s']:.2f} | "
            f"{h['peak_rss_mib'] / t['peak_rss_mib']:.2f} | {res['load']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=["tiny", "large"])
    parser.add_argument("--rounds", type=int, default=6, help="alternations (each runs both)")
    parser.add_argument("--steps", type=int, default=5, help="steps per framework per round")
    parser.add_argument("--warmup", type=int, default=3, help="uncounted steps per framework")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in both workers")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--worker", choices=["honed", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        (run_honed if args.worker == "honed" else run_trl)(Settings.from_json(args.settings))
        return
    print(f"machine: {machine()}; load average {load_average()}")
    print(
        f"{args.rounds} rounds × {args.steps} steps per framework after {args.warmup} warm-up "
        f"steps; {args.threads} torch threads; 8 prompts × 8 generations; "
        f"max_completion_length {args.max_completion_length}"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="honed-bench-") as tmp:
        for shape in args.model or ["tiny"]:
            results.append(compare(shape, args, Path(tmp)))
            print(table(results[-1:]), flush=True)
    if len(results) > 1:
        print("\nall models:\n" + table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
