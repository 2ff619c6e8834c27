"""Run examples/tools.yaml over seeds and torch thread counts, and print the table of what the
warm-start and GRPO reached on each (the robustness table of examples/tools/README.md).

    python examples/tools/seeds.py --seeds 0 1 2 3 4 --threads 1 2 --jobs 2 --out runs/tools_seeds
    python examples/tools/seeds.py --out runs/tools_seeds --table      # the table only

Each run is `honed train examples/tools.yaml --run-dir OUT/s{seed}_t{threads} -o seed=S -o
torch_threads=T`; a run whose `summary.json` exists is not run again. Two thread counts were meant
as a stand-in for two CPUs (kernels that split a sum over threads add it in another order); on
the AMD EPYC VM the example's runs at one and two threads were bit-identical
(examples/tools/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CONFIG = Path(__file__).parent.parent / "tools.yaml"
ENV = "shop"


def run(out: Path, seed: int, threads: int) -> None:
    run_dir = out / f"s{seed}_t{threads}"
    if (run_dir / "summary.json").exists():
        return
    command = [
        *(sys.executable, "-m", "honed", "train", str(CONFIG), "--run-dir", str(run_dir)),
        *("--quiet", "-o", f"seed={seed}", "-o", f"torch_threads={threads}"),
    ]
    log = out / f"s{seed}_t{threads}.log"
    with log.open("w") as handle:
        subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=True)


def row(run_dir: Path) -> dict[str, float] | None:
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    start, end, sft = summary["initial_eval"], summary["final_eval"], summary["warmstart"]
    return {
        "sft_steps": sft["sft/steps"],
        "copy": sft.get("sft/check/copy_accuracy", float("nan")),
        "start": start["accuracy"],
        "end": end["accuracy"],
        "start_out": start[f"episodes/{ENV}/max_turns"],
        "end_out": end[f"episodes/{ENV}/max_turns"],
        "minutes": summary["seconds"] / 60,
    }


def table(out: Path) -> str:
    lines = [
        "| seed | threads | warm-start steps | copy accuracy at the stop | warm-start accuracy "
        "| after GRPO | gain | out of turns, before → after | minutes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    gains = []
    named = (re.fullmatch(r"s(\d+)_t(\d+)", p.name) for p in out.iterdir() if p.is_dir())
    runs = sorted((int(m[1]), int(m[2]), out / m[0]) for m in named if m)  # other folders: not runs
    for seed, threads, run_dir in runs:
        r = row(run_dir)
        if r is None:
            continue
        gains.append(r["end"] - r["start"])
        lines.append(
            f"| {seed} | {threads} | {r['sft_steps']:.0f} | {r['copy']:.3f} | {r['start']:.3f} "
            f"| {r['end']:.3f} | {gains[-1]:+.3f} | {r['start_out']:.3f} → {r['end_out']:.3f} "
            f"| {r['minutes']:.1f} |"
        )
    if gains:
        lines.append(
            f"\n{len(gains)} runs; gain median {statistics.median(gains):+.3f}, "
            f"least {min(gains):+.3f}, most {max(gains):+.3f}; "
            f"{sum(g >= 0.15 for g in gains)} of {len(gains)} gain at least 0.15"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--out", type=Path, default=Path("runs/tools_seeds"))
    parser.add_argument("--table", action="store_true", help="print the table, run nothing")
    args = parser.parse_args()
    if not args.table:
        args.out.mkdir(parents=True, exist_ok=True)
        pairs = [(s, t) for s in args.seeds for t in args.threads]
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda pair: run(args.out, *pair), pairs))
    print(table(args.out))


if __name__ == "__main__":
    main()
