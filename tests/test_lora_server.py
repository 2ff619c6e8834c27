"""`weight_sync: lora`: after each update the adapter is saved and loaded into the inference
server through vLLM's runtime LoRA endpoints, and completions are requested under its name
(a local HTTP server implements the endpoints; it loads the adapter with peft and samples)."""

from __future__ import annotations

import pytest
from openai_server import FakeRequest, Reply
from scaleout_helpers import PolicyServer
from tiny_run import SMALL_MODEL, small_config, spread_env_data

pytest.importorskip("peft", reason="LoRA needs peft: pip install 'honed[lora]'")

from honed.config import LoraSettings, PolicyConfig, TinyModelConfig
from honed.models.policy import Policy
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

LORA = {"r": 4, "alpha": 8}


class LoraServer(PolicyServer):
    """vLLM's runtime LoRA API over a tiny base model: `/v1/load_lora_adapter` loads the
    adapter in `lora_path` with peft under `lora_name`, `/v1/unload_lora_adapter` drops it,
    and a completion request must name a loaded adapter (or the base model)."""

    def __init__(self) -> None:
        self.settings = PolicyConfig(tiny=TinyModelConfig(**SMALL_MODEL), lora=LoraSettings(**LORA))
        super().__init__(Policy.from_config(self.settings.model_copy(update={"lora": None}), 0))
        self.adapters: dict[str, Policy] = {}
        self.loads: list[str] = []
        self.unloads: list[str] = []
        self.requested: list[str] = []
        self.http.routes["/v1/load_lora_adapter"] = self.load
        self.http.routes["/v1/unload_lora_adapter"] = self.unload

    def load(self, req: FakeRequest) -> Reply | str:
        name, path = req.body["lora_name"], req.body["lora_path"]
        if name in self.adapters:  # vLLM refuses a name it holds
            return Reply(
                400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
            )
        self.adapters[name] = Policy.from_checkpoint(path, self.settings, seed=0)
        self.loads.append(name)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, req: FakeRequest) -> Reply | str:
        name = req.body["lora_name"]
        if self.adapters.pop(name, None) is None:
            return Reply(404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}})
        self.unloads.append(name)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def complete(self, req: FakeRequest) -> Reply | dict:
        model = req.body["model"]
        if model != self.model and model not in self.adapters:
            return Reply(404, {"error": {"message": f"The model `{model}` does not exist."}})
        self.requested.append(model)
        base, self.policy = self.policy, self.adapters.get(model, self.policy)
        try:
            return super().complete(req)
        finally:
            self.policy = base


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
