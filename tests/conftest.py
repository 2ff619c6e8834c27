"""Shared fixtures: a very small policy and configs that train in seconds on a CPU."""

from __future__ import annotations

import pytest
import torch
from tiny_run import SMALL_MODEL

from honed.config import PolicyConfig, TinyModelConfig
from honed.models.policy import Policy


@pytest.fixture(autouse=True)
def _one_thread():
    """Tests compare floats bit for bit; one thread keeps reductions in one order."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def small_policy() -> Policy:
    return Policy.from_config(PolicyConfig(tiny=TinyModelConfig(**SMALL_MODEL)), seed=0)
