"""The multi-process learner on the CPU (gloo): `honed train --nproc 2` ends where one process
ends (same items, same completions, the same update within float rounding), and its
checkpoints resume on one process and on two."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml
from numerics import assert_weights_close
from safetensors.torch import load_file
from tiny_run import spread_env_data, write_config

from honed.cli import main

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


@pytest.fixture(autouse=True)
def _children_find_honed_and_the_test_envs(monkeypatch):
    path = os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _config(tmp_path, name: str, steps: int, every: int = 0) -> Path:
    data = spread_env_data(tmp_path)
    data["run_dir"] = str(tmp_path / name)
    data["torch_threads"] = 1
    data["trainer"].update(max_steps=steps, micro_batch_size=3)
    data["checkpoint"] = {"every": every, "keep_last": 5}
    data["eval"]["num_items"] = 4
    return write_config(tmp_path, data, f"{name}.yaml")


def _train(config: Path, *more: str) -> None:
    assert main(["train", str(config), "--quiet", *more]) == 0


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step}" / "model.safetensors"))


def _samples(run: Path, step: int) -> list[tuple]:
    rows = [yaml.safe_load(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return [(r["item"], r["completion"], r["reward"]) for r in rows if r["step"] == step]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    _train(_config(tmp, "run", 3))
    return tmp / "run"


def test_two_processes_end_where_one_does(tmp_path, single):
    _train(_config(tmp_path, "run", 3), "--nproc", "2")
    run = tmp_path / "run"
    # the first step: the same weights sampled, so the same items and completions exactly
    assert _samples(run, 1) == _samples(single, 1) != []
    # the update: gradients summed over two processes of whole groups against one process's
    # micro-batches: the same sums in another order
    assert_weights_close(_weights(run, 3), _weights(single, 3))
    rows = [yaml.safe_load(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]
    assert not (run / "checkpoints" / "step_3.tmp").exists()


@pytest.mark.parametrize("then", [1, 2])
def test_a_two_process_checkpoint_resumes_on_one_process_and_on_two(tmp_path, single, then):
    config = _config(tmp_path, "run", 2, every=1)
    _train(config, "--nproc", "2")
    config = _config(tmp_path, "run", 3, every=1)
    _train(config, "--resume", "--nproc", str(then))
    assert_weights_close(_weights(tmp_path / "run", 3), _weights(single, 3))
