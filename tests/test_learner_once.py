"""The multi-process learner does each thing once (gloo on the CPU, two processes): with fsdp,
only rank 0 holds the whole model at the start, the others only their shards; with inference
servers, rank 0 alone pushes the weights, once a step (with fsdp, gathered whole); with
`kl_in_reward`, each process scores its share of the sequences, and the penalties are exactly
one process's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from numerics import assert_logprobs_close
from safetensors.torch import load_file
from scaleout_helpers import LORA, LoraServer, PolicyServer
from tiny_run import spread_env_data, write_config

from honed.cli import main
from honed.distributed.launch import free_port

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
PROBE = TESTS / "learner_probe.py"
MiB = 1 << 20
# A model big enough to see in the resident memory: about 55 MiB of float32 weights.
BIG_MODEL = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "intermediate_size": 1536,
    "max_position_embeddings": 128,
}


@pytest.fixture(autouse=True)
def _children_find_honed_and_the_test_envs(monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _probe(mode: str, config: Path, out: Path, nproc: int) -> list[dict]:
    """`learner_probe.py MODE CONFIG` in `nproc` processes started as `honed train --nproc`
    starts its learners; what each found, by rank."""
    out.mkdir()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), PYTHONWARNINGS="ignore")
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROBE), mode, str(config), str(out)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(nproc)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    return [json.loads((out / f"rank_{rank}.json").read_text()) for rank in range(nproc)]


def _config(tmp_path: Path, name: str, parallel: str, **trainer) -> Path:
    data = spread_env_data(tmp_path)
    data["run_dir"] = str(tmp_path / name)
    data["torch_threads"] = 1
    data["trainer"].update(parallel=parallel, **trainer)
    return write_config(tmp_path, data, f"{name}.yaml")


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="measures memory through Linux's /proc"
)
def test_with_fsdp_only_rank_0_holds_the_whole_model_at_the_start(tmp_path):
    """Over the trainer's set-up (fsdp, a KL reference), each process's resident memory peaks
    at what it allocates whatever the model (the tiny model's run measures that) plus what the
    model costs it: rank 1 about its half of the policy and the reference, where it used to
    load both whole first; rank 0 reads them whole, once, beside its own shards."""
    grew = {}
    for size, shape in (("small", None), ("big", BIG_MODEL)):
        data = yaml.safe_load(_config(tmp_path, size, "fsdp", beta=0.1).read_text())
        data["policy"]["tiny"] = shape or data["policy"]["tiny"]
        config = write_config(tmp_path, data, f"{size}.yaml")
        grew[size] = _probe("start", config, tmp_path / f"{size}_found", nproc=2)
    zero, one = grew["big"]
    whole = 2 * zero["model_bytes"]  # the policy and its reference
    assert zero["model_bytes"] == one["model_bytes"] > 50 * MiB
    assert zero["materialised"] and one["materialised"]
    shares = [b["grew"] - s["grew"] for b, s in zip(grew["big"], grew["small"], strict=True)]
    print(f"whole {whole / MiB:.0f} MiB; set-up grew by {[s / MiB for s in shares]} MiB")
    assert 0.4 * whole < shares[1] < 0.7 * whole  # 1/2 of the whole, and a tensor in flight
    assert shares[0] < 1.5 * whole  # the whole once, and its own half


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_kl_reward_penalties_are_scored_once_and_equal_one_process_s(tmp_path, parallel):
    """A run trained one step (so the policy is no longer its reference), resumed on one
    process and on two: its second step's 12 sequences in micro-batches of 5 make three
    micro-batches, two for rank 0 and one for rank 1 (which with fsdp also runs one forward of
    one row: a sharded model's forwards are collective calls); every process ends with the
    same penalties, those one process computes: exactly with ddp, within float rounding with
    fsdp (its forward rounds differently, as before each process scored only its share)."""
    settings = {"beta": 0.1, "kl_in_reward": True, "prompts_per_step": 3, "micro_batch_size": 5}
    data = yaml.safe_load(_config(tmp_path, "base", "ddp", max_steps=1, **settings).read_text())
    data["checkpoint"] = {"every": 1, "keep_last": 1}
    assert main(["train", str(write_config(tmp_path, data, "base.yaml")), "--quiet"]) == 0
    found = {}
    for name, mode, nproc in (("one", "ddp", 1), ("two", parallel, 2)):
        shutil.copytree(tmp_path / "base", tmp_path / name)
        config = _config(tmp_path, name, mode, max_steps=2, **settings)
        found[name] = _probe("penalties", config, tmp_path / f"{name}_found", nproc)
    [alone], (zero, one) = found["one"], found["two"]
    assert zero["items"] == one["items"] == alone["items"]
    assert zero["penalties"] == one["penalties"]
    values = [
        [v for group in f["penalties"] for traj in group for v in traj] for f in (zero, alone)
    ]
    assert all(v != 0 for v in values[1])
    if parallel == "ddp":
        assert values[0] == values[1]
    else:
        assert_logprobs_close(*values)
    # rows scored: the policy's and the reference's log-probs of each row (2 per row)
    assert alone["rows_scored"] == 2 * 12
    assert zero["rows_scored"] == 2 * 10
    assert one["rows_scored"] == 2 * (2 + (parallel == "fsdp"))


def _train_on_two(config: Path, server: PolicyServer, *settings: str) -> None:
    """`honed train CONFIG --nproc 2` rolling out on `server`, as a command with a time limit:
    a sharded push gone wrong waits forever in a collective call the other process never
    makes. (A SIGTERM to the launcher stops its learner processes too.)"""
    server_config = f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}"
    command = [sys.executable, "-m", "honed", "train", str(config), "--quiet", "--nproc", "2"]
    command += ["-o", "distributed.backend=server", "-o", server_config]
    command += [arg for setting in settings for arg in ("-o", setting)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.communicate(timeout=60)
        pytest.fail("the run did not end in 300 s: a process waits for another")
    assert proc.returncode == 0, err


def _pushed_as_saved(run: Path, weights: str) -> None:
    """The servers' last weights are exactly those of the run's final checkpoint (step 2), and
    not those of the step before."""
    pushed, before = (load_file(run / "server_weights" / s / weights) for s in ("step_2", "step_1"))
    saved = load_file(run / "checkpoints" / "step_2" / weights)
    assert pushed.keys() == saved.keys()
    assert all(torch.equal(pushed[k], saved[k]) for k in saved)
    assert any(not torch.equal(pushed[k], before[k]) for k in saved)  # the step changed them


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_rank_0_alone_pushes_the_weights_to_the_servers_once_a_step(tmp_path, parallel):
    """Both processes wait for the push; rank 0 alone saves and asks the server to reload.
    With fsdp each process holds only its shards, so all gather the weights first and rank 0
    saves them whole: the server loads exactly the weights of the run's final checkpoint."""
    with PolicyServer() as server:
        _train_on_two(_config(tmp_path, "run", parallel, max_steps=2), server)
        reloads = [Path(p).name for p in server.reloads]
    # the weights before the first step, and after each of the two
    assert reloads == ["step_0", "step_1", "step_2"]
    _pushed_as_saved(tmp_path / "run", "model.safetensors")


def test_with_fsdp_the_lora_adapter_pushed_is_the_checkpointed_one(tmp_path):
    """`weight_sync: lora` on sharded learners: the adapter is cut from the gathered weights,
    loaded into the server once a step and sampled from, and is the checkpoint's."""
    pytest.importorskip("peft", reason="LoRA needs peft: pip install 'honed[lora]'")
    with LoraServer() as server:
        config = _config(tmp_path, "run", "fsdp", max_steps=2)
        _train_on_two(config, server, f"policy.lora={LORA}", "distributed.server.weight_sync=lora")
    names = [f"{server.model}-step-{v}" for v in range(3)]
    assert server.loads == names
    assert set(server.requested) == set(names[:2])
    _pushed_as_saved(tmp_path / "run", "adapter_model.safetensors")
