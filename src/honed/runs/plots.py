"""`reward.png`: reward per step with a moving average, and held-out accuracy where measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from honed.runs.files import atomic_write


def plot_rewards(rows: list[dict[str, Any]], out: Path, window: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows if "reward/mean" in r]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if steps:
        ax.plot(steps, rewards, color="#9ecae1", linewidth=1, label="reward (batch mean)")
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1])
            / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        ax.plot(steps, smooth, color="#08519c", linewidth=2, label=f"moving average ({window})")
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    if evals:
        ax2 = ax.twinx()
        ax2.plot(*zip(*evals, strict=True), "o-", color="#d94801", label="held-out accuracy")
        ax2.set_ylabel("accuracy")
        ax2.set_ylim(0, 1)
        ax2.legend(loc="lower right")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title("GRPO training")
    ax.legend(loc="upper left")
    fig.tight_layout()
    # written to a new file of a random name beside `out` and renamed over it: a reader never
    # sees half an image, and a link at either name is never written through
    try:
        atomic_write(out, lambda fh: fig.savefig(fh, format="png"))
    finally:
        plt.close(fig)
