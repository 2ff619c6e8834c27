"""Configs for GRPO runs small enough to train in seconds in a test."""

from __future__ import annotations

import os
import random
import signal

import numpy as np
import torch
import yaml

from honed.config import Config, load_config
from honed.envs.base import SingleTurnEnv
from honed.types import Item, Score

SMALL_MODEL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}


def small_config_data(tmp_path) -> dict:
    return {
        "seed": 0,
        "policy": {"model": "tiny", "tiny": SMALL_MODEL},
        "envs": [
            {
                "name": "addition",
                "args": {
                    "levels": [1],
                    "train_size": 60,
                    "test_size": 16,
                    "validation_size": 8,
                    # partial credit gives an untrained policy's groups some spread
                    "partial_credit": 0.5,
                },
            }
        ],
        "trainer": {
            "max_steps": 4,
            "prompts_per_step": 4,
            "num_generations": 4,
            "learning_rate": 1e-3,
            "max_completion_length": 4,
        },
        "eval": {"num_items": 8},
        "checkpoint": {"every": 2, "keep_last": 5},
        "logging": {"progress": False},
        "run_dir": str(tmp_path / "run"),
    }


def write_config(tmp_path, data: dict | None = None, name: str = "config.yaml"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data or small_config_data(tmp_path)))
    return path


def small_config(tmp_path, *overrides: str, data: dict | None = None) -> Config:
    """A GRPO config (1-digit addition by default) that runs a step in well under a second."""
    return load_config(write_config(tmp_path, data), list(overrides))


class DigitShareEnv(SingleTurnEnv):
    """Reward = share of digits in the completion plus a little for its length: an untrained
    policy's groups (nearly) always spread, so every step of a short test run really updates the
    weights. Loaded through the user path, `type: tiny_run:DigitShareEnv`."""

    def __init__(self, name: str, seed: int = 0) -> None:
        super().__init__(name)
        self._items = {
            split: [Item(f"{name}:{split}{i}", name, {"i": i}) for i in range(20)]
            for split in ("train", "validation", "test")
        }

    def items(self, split: str) -> list[Item]:
        return self._items[split]

    def prompt(self, item: Item) -> str:
        return f"{item.data['i']}:"

    def score(self, item: Item, completion: str) -> Score:
        share = sum(c.isdigit() for c in completion) / max(1, len(completion))
        return Score(reward=share + 0.1 * len(completion), success=float(share == 1.0))


def spread_env_data(tmp_path) -> dict:
    data = small_config_data(tmp_path)
    data["envs"] = [{"name": "digits", "type": "tiny_run:DigitShareEnv"}]
    return data


class HalfSpreadEnv(DigitShareEnv):
    """`DigitShareEnv` on its odd items; every completion of an even item scores 0: half the
    groups have no spread whatever the policy, so screening stops some and completes others."""

    def score(self, item: Item, completion: str) -> Score:
        if item.data["i"] % 2 == 0:
            return Score(reward=0.0, success=0.0)
        return super().score(item, completion)


def half_spread_env_data(tmp_path) -> dict:
    data = small_config_data(tmp_path)
    data["envs"] = [{"name": "half", "type": "tiny_run:HalfSpreadEnv"}]
    return data


class NoisyDigitShareEnv(DigitShareEnv):
    """`DigitShareEnv` whose rewards also carry a little noise from the process-wide random
    generators of Python, NumPy and torch, as a user's environment might: a resumed run gives
    the same rewards only if it restores all three."""

    def score(self, item: Item, completion: str) -> Score:
        base = super().score(item, completion)
        noise = random.random() + float(np.random.rand()) + float(torch.rand(()))
        return Score(reward=base.reward + 0.01 * noise, success=base.success)


def noisy_env_data(tmp_path) -> dict:
    data = small_config_data(tmp_path)
    data["envs"] = [{"name": "digits", "type": "tiny_run:NoisyDigitShareEnv"}]
    return data


class FaultyDigitShareEnv(DigitShareEnv):
    """`DigitShareEnv` that, when `HONED_TEST_FAULT` is `KIND:RANK:CALL`, acts up in learner
    process RANK at its CALL-th training reward (counting from 1): `raise` raises, `nan`
    returns a reward that is not a number (bad input, which honed refuses), `sigint` sends
    SIGINT to the process that launched the learners (`honed train --nproc`), as a Ctrl-C in
    its terminal would, and `sigterm` SIGTERM, as `kill` or a job scheduler would.
    `evalskew:RANK` acts on held-out items instead: each of RANK's test scores is one
    more than the one before, so every evaluation there beats the last, as evaluations that
    differ in their last bits between processes could. Without the variable it is
    `DigitShareEnv`, so a run it interrupted resumes under the same config."""

    calls = 0
    test_calls = 0

    def score(self, item: Item, completion: str) -> Score:
        fault = os.environ.get("HONED_TEST_FAULT")
        if fault and fault.startswith("evalskew:"):
            if ":test" in item.key and os.environ.get("RANK", "0") == fault.split(":")[1]:
                FaultyDigitShareEnv.test_calls += 1
                base = super().score(item, completion)
                return Score(reward=base.reward + FaultyDigitShareEnv.test_calls, success=0.0)
        elif fault and item.key.split(":")[1].startswith("train"):
            kind, rank, call = fault.split(":")
            if os.environ.get("RANK", "0") == rank:
                FaultyDigitShareEnv.calls += 1
                if FaultyDigitShareEnv.calls == int(call):
                    if kind == "raise":
                        raise ValueError(f"the test environment failed on call {call}")
                    if kind == "nan":
                        return Score(reward=float("nan"), success=0.0)
                    stop = signal.SIGTERM if kind == "sigterm" else signal.SIGINT
                    os.kill(os.getppid(), stop)
        return super().score(item, completion)
