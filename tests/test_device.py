"""Device and dtype: `policy.device` / `policy.dtype` resolution, the same run on `cpu` and
`auto`, no misplaced tensor anywhere in a training step (`device_guard`), and bf16 on the CPU."""

from __future__ import annotations

import json
import math

import pytest
import torch
from device_guard import VIRTUAL, DeviceGuard
from tiny_run import small_config, small_config_data, spread_env_data

from honed.errors import HonedError
from honed.models import device as device_module
from honed.models.device import resolve_device, resolve_dtype
from honed.models.policy import Policy
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir


def _train(tmp_path, *overrides: str, data: dict | None = None) -> GRPOTrainer:
    config = small_config(tmp_path, *overrides, data=data)
    trainer = GRPOTrainer(config, RunDir(config.run_dir))
    trainer.train()
    return trainer


def _metrics(trainer: GRPOTrainer) -> list[dict]:
    rows = trainer.run.read_jsonl(trainer.run.metrics_path)
    # wall-clock fields ("perf/...", the row's "time") differ between any two runs
    return [{k: v for k, v in r.items() if not k.startswith(("perf/", "time"))} for r in rows]


def test_auto_is_the_cpu_here_and_gives_the_same_run(tmp_path):
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine has an accelerator: auto is not the CPU")
    data = spread_env_data(tmp_path)
    data["trainer"]["max_steps"] = 2
    explicit = _train(tmp_path / "cpu", "policy.device=cpu", data=data)
    data["run_dir"] = str(tmp_path / "auto" / "run")
    auto = _train(tmp_path / "auto", "policy.device=auto", data=data)
    assert auto.policy.device == torch.device("cpu") == explicit.policy.device
    assert _metrics(auto) == _metrics(explicit)
    for (name, a), b in zip(
        auto.policy.model.state_dict().items(),
        explicit.policy.model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), name


def test_the_guard_sees_a_host_tensor_meet_a_device_tensor():
    """The guard itself: mixing is recorded, a 0-dim host scalar is not, `.device` of a
    device tensor reads the virtual device and a factory given it makes a device tensor."""
    with DeviceGuard() as guard:
        weight = torch.ones(3, device="cpu").to(VIRTUAL)
        _ = weight * torch.tensor(2.0, device="cpu")  # a host scalar: allowed, as on CUDA
        assert guard.violations == []
        assert weight.device == VIRTUAL
        _ = weight + torch.zeros(3, device=weight.device)
        assert guard.violations == []
        _ = weight + torch.zeros(3, device="cpu")
    assert len(guard.violations) == 1 and "mixed" in guard.violations[0]


def test_a_model_loaded_under_the_guard_is_the_model_saved(tmp_path, monkeypatch):
    """`from_pretrained` builds the model on the meta device and initialises only what the
    checkpoint does not hold (RoPE's `inv_freq`, a non-persistent buffer) once it is real. A
    guard that read a meta tensor's device as `VIRTUAL` made `transformers` initialise on the
    meta device and mark the work done, leaving `inv_freq` as `torch.empty_like` left it: the
    reference loaded from the warm-start scored garbage, and NaN when the memory held NaN.
    Here the memory `empty_like` hands out holds NaN, so a skipped initialisation always shows."""
    built = Policy.from_config(small_config(tmp_path).policy, seed=0)
    built.save(tmp_path / "model")
    empty_like = torch.empty_like

    def unwritten(*args, **kwargs):
        out = empty_like(*args, **kwargs)
        return out.fill_(math.nan) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty_like", unwritten)
    with DeviceGuard():
        loaded = Policy.load(tmp_path / "model")
    saved = dict(built.model.named_parameters()) | dict(built.model.named_buffers())
    found = dict(loaded.model.named_parameters()) | dict(loaded.model.named_buffers())
    assert found.keys() == saved.keys()
    for name, tensor in saved.items():
        assert torch.equal(found[name], tensor), name


GUARDED_RUNS = {
    # the update with micro-batches, two iterations, the KL term against a frozen reference
    "kl in the loss": [
        "trainer.beta=0.04",
        "trainer.micro_batch_size=3",
        "trainer.num_iterations=2",
    ],
    # the KL reward penalty, a supervised warm-start, dynamic sampling
    "kl in the reward": [
        "trainer.beta=0.04",
        "trainer.kl_in_reward=true",
        "sft.steps=2",
        "sft.batch_size=4",
        "sft.prompt_loss_weight=0.5",
        "trainer.dynamic_sampling=true",
    ],
}


@pytest.mark.parametrize("name", list(GUARDED_RUNS))
def test_no_tensor_is_misplaced_in_a_training_run(tmp_path, monkeypatch, name):
    """A whole run (warm-start, evaluation, rollouts, scoring, loss, optimizer, checkpoint) on
    a device that is not the plain CPU: every tensor that meets the weights is on it."""
    monkeypatch.setattr("honed.models.policy.resolve_device", lambda name: VIRTUAL)
    data = small_config_data(tmp_path)
    data["trainer"]["max_steps"] = 2
    data["eval"]["num_items"] = 4
    config = small_config(tmp_path, *GUARDED_RUNS[name], data=data)
    with DeviceGuard() as guard:
        trainer = GRPOTrainer(config, RunDir(config.run_dir))
        trainer.train()
    assert trainer.step == 2
    assert guard.violations == [], "\n".join(guard.violations[:5])


def test_bfloat16_on_the_cpu(tmp_path):
    """bf16 weights: a few steps run, the ratio is exactly 1 on the first iteration (π_old is
    the update's own first forward), the loss is finite, log-probs are float32."""
    data = spread_env_data(tmp_path)
    data["trainer"]["max_steps"] = 3
    trainer = _train(tmp_path, "policy.dtype=bfloat16", data=data)
    assert {p.dtype for p in trainer.policy.model.parameters()} == {torch.bfloat16}
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "loss" in r]
    assert len(rows) == 3
    for row in rows:
        assert row["ratio/mean"] == 1.0
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
    config = json.loads(json.dumps(trainer.config.model_dump(mode="json")))
    assert config["policy"]["dtype"] == "bfloat16"


def test_resolving_devices_and_dtypes(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(HonedError, match="no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(HonedError, match="no MPS device"):
        resolve_device("mps")
    # a machine with two GPUs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(HonedError, match="cuda:2 is not available"):
        resolve_device("cuda:2")
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cuda")) == torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.float32
    # each process of a multi-process run takes its own GPU
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert device_module.peak_memory_gb(torch.device("cpu")) > 0


def test_a_misspelt_device_is_a_config_error(tmp_path):
    with pytest.raises(HonedError, match=r"policy\.device"):
        small_config(tmp_path, "policy.device=gpu")
