"""`weight_sync: lora`: after each update the adapter is saved and loaded into the inference
server through vLLM's runtime LoRA endpoints, and completions are requested under its name
(a local HTTP server implements the endpoints; it loads the adapter with peft and samples)."""

from __future__ import annotations

import pytest
from scaleout_helpers import LORA, LoraServer
from tiny_run import small_config, spread_env_data

pytest.importorskip("peft", reason="LoRA needs peft: pip install 'honed[lora]'")

from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir


def test_adapters_are_loaded_into_the_server_and_sampled_from(tmp_path):
    with LoraServer() as server:
        config = small_config(
            tmp_path,
            "trainer.max_steps=3",
            f"policy.lora={{r: {LORA['r']}, alpha: {LORA['alpha']}}}",
            "distributed.backend=server",
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            "distributed.server.weight_sync=lora",
            data=spread_env_data(tmp_path),
        )
        trainer = GRPOTrainer(config, RunDir(tmp_path / "run"))
        trainer.train()
    names = [f"{server.model}-step-{v}" for v in range(4)]
    assert server.loads == names
    assert server.unloads == names[:-1]
    # every rollout of step v came from the adapter of version v
    assert server.requested and set(server.requested) <= set(names[:3])
    assert server.requested == sorted(server.requested, key=names.index)
    saved = sorted(p.name for p in (tmp_path / "run" / "server_weights").iterdir())
    assert saved == ["step_2", "step_3"]
    assert (tmp_path / "run" / "server_weights" / "step_3" / "adapter_config.json").is_file()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in rows] == [0.0, 0.0, 0.0]


def test_lora_weight_sync_without_adapters_is_refused(tmp_path):
    from honed.errors import HonedError

    with LoraServer() as server:
        config = small_config(
            tmp_path,
            "distributed.backend=server",
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            "distributed.server.weight_sync=lora",
        )
        with pytest.raises(HonedError, match=r"needs policy\.lora"):
            GRPOTrainer(config, RunDir(tmp_path / "run")).train()
