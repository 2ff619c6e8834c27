"""What the throughput benchmarks share: the models, the data, the GRPO settings, honed's trainer.

Both frameworks load one local Hugging Face directory (the embedded Llama built from a config,
saved with its character tokenizer), train on one JSONL file through one reward function, with
the settings below; nothing downloads anything.
"""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = ROOT / "examples" / "dataset" / "data.jsonl"  # 300 two-digit subtractions
REWARD = f"{BENCH / 'reward.py'}:partial_match"

# Model shapes (TinyModelConfig fields). `tiny` is honed's embedded default (0.9 M parameters);
# `large` (27 M) is big enough that the model's own compute dominates a step.
MODELS = {
    "tiny": {
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 384,
        "max_position_embeddings": 512,
    },
    "large": {
        "hidden_size": 512,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "intermediate_size": 1536,
        "max_position_embeddings": 512,
    },
}


@dataclass(frozen=True)
class Settings:
    """One GRPO configuration, spelled out once and given to both frameworks."""

    model_dir: str
    run_dir: str
    threads: int
    prompts_per_step: int = 8
    num_generations: int = 8
    max_completion_length: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    learning_rate: float = 1e-4
    seed: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls(**json.loads(text))


def build_model_dir(shape: str, path: Path, seed: int = 0) -> int:
    """Save the embedded policy of the given shape as a Hugging Face directory; its size."""
    from honed.config import TinyModelConfig
    from honed.models.policy import Policy
    from honed.models.tiny import build_char_tokenizer, build_tiny_model

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(**MODELS[shape]), tokenizer, seed)
    Policy(model, tokenizer).save(path)
    return sum(p.numel() for p in model.parameters())


def data_rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def honed_trainer(s: Settings):
    """A honed `GRPOTrainer` over the benchmark's dataset environment, set up and ready to step.

    Every prompt trains (no held-out carve-out, as TRL gets every row), and zero-spread groups
    are kept so honed updates on exactly the sequences TRL does. No evaluation, checkpoints or
    progress bars: the loop below times `train_step` plus the metrics line, what `train()` does
    per step.
    """
    from honed.config import Config
    from honed.rl.trainer import GRPOTrainer
    from honed.runs.rundir import RunDir

    config = Config.model_validate(
        {
            "seed": s.seed,
            "torch_threads": s.threads,
            "run_dir": s.run_dir,
            "policy": {"model": s.model_dir},
            "envs": [
                {
                    "name": "subtraction",
                    "type": "dataset",
                    "args": {"path": str(DATA), "reward": REWARD, "test_fraction": 0.0},
                }
            ],
            "trainer": {
                "max_steps": 1_000_000,
                "prompts_per_step": s.prompts_per_step,
                "num_generations": s.num_generations,
                "learning_rate": s.learning_rate,
                "max_completion_length": s.max_completion_length,
                "temperature": s.temperature,
                "top_p": s.top_p,
                "beta": 0.0,
                "loss_type": "dapo",
                "scale_rewards": "group",
                "num_iterations": 1,
                "filter_zero_std": False,
            },
            "checkpoint": {"every": 0},
            "logging": {"progress": False, "samples_per_step": 0},
        }
    )
    trainer = GRPOTrainer(config, RunDir(s.run_dir))
    trainer.setup(resume=False)
    return trainer


def peak_rss_mib() -> float:
    """This process's resident-set high-water mark (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return (
        f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}, "
        f"torch {torch.__version__}"
    )


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"
