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


@pytest.fixture(scope="session")
def skill_server():
    """`skill_world`'s server playing target and reflector, for the whole session."""
    from openai_server import FakeOpenAIServer
    from skill_world import World

    with pytest.MonkeyPatch.context() as mp:  # a CI proxy must not see the local server
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        with FakeOpenAIServer(World(), models=("target", "reflector")) as server:
            yield server


@pytest.fixture(scope="session")
def grpo_base(tmp_path_factory):
    """(config, run) of a finished one-step GRPO run, to copy (`run_trees.copy_run`)."""
    from run_trees import grpo_config

    from honed.cli import main

    folder = tmp_path_factory.mktemp("grpo_base")
    config = grpo_config(folder)
    assert main(["train", str(config), "--quiet", "--run-dir", str(folder / "run")]) == 0
    return config, folder / "run"


@pytest.fixture(scope="session")
def skills_base(tmp_path_factory, skill_server):
    """(config, run) of a skills run stopped after its first step, to copy."""
    from run_trees import skills_config

    from honed.cli import main

    folder = tmp_path_factory.mktemp("skills_base")
    config = skills_config(folder, skill_server.base_url)
    run = folder / "run"
    assert (
        main(
            [
                "skills",
                "train",
                str(config),
                "--quiet",
                "--run-dir",
                str(run),
                "-o",
                "train.max_steps=1",
            ]
        )
        == 0
    )
    return config, run
