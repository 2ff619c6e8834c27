"""How new weights reach inference servers after each optimizer step.

A hook is anything with `push(policy, version) -> int`; it returns, once the servers generate
with their new weights, the version they serve (the backend has already waited for requests in
flight, so no sample mixes two versions, and each sample's staleness is exact).
`distributed.server.weight_sync` picks one:

- `reload` (`ReloadFromDisk`): save the policy as a Hugging Face directory
  `<weights_dir>/step_<version>` and POST `{"model_path": <that directory>}` to each server's
  `reload_endpoint`. SGLang serves this as `/update_weights_from_disk`; for vLLM, point
  `reload_endpoint` at a route that reloads from a path (vLLM's own weight-transfer API moves
  tensors over NCCL/IPC between GPUs, which a CPU learner cannot join). The directory must be
  readable by the servers under the same path (one machine, or a shared file system).
- `none`: the servers keep the weights they started with (the run learns from a fixed sampler,
  whose staleness grows by one every step; every token is importance-weighted against it).
- `lora` (`LoadLoraAdapter`, with `policy.lora`): save only the adapter (peft's format) as
  `<weights_dir>/step_<version>`, load it into each server with vLLM's runtime LoRA endpoint
  (`POST /v1/load_lora_adapter {"lora_name", "lora_path"}`; start vLLM with `--enable-lora`,
  `--max-lora-rank` at least `policy.lora.r`, and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`),
  request completions under that adapter's name, and unload the previous one
  (`POST /v1/unload_lora_adapter {"lora_name"}`). An adapter is megabytes where the model is
  gigabytes, and the server keeps its base weights;
- `module:Class`: your own hook, built as `Class(server_config, weights_dir)`.

A hook may have a `served_model` attribute: the model name completions are then requested
under (the adapter's, for `lora`), instead of `distributed.server.model`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol, runtime_checkable

from honed.config import ServerConfig
from honed.errors import HonedError
from honed.models.chat import ChatClient
from honed.models.policy import Policy
from honed.reach import ImportSpec
from honed.runs.files import atomic_write_dir
from honed.user_code import load_object


@runtime_checkable
class WeightSync(Protocol):
    def push(self, policy: Policy, version: int) -> int: ...


class NoWeightSync:
    """The servers keep serving what they served at the first push (the start of the run)."""

    def __init__(self) -> None:
        self.served: int | None = None

    def push(self, policy: Policy, version: int) -> int:
        if self.served is None:
            self.served = version
        return self.served


class _WeightsOnDisk:
    """Weights handed to servers through a directory per version, written atomically; the two
    newest are kept (a server may still be reading the previous one)."""

    def __init__(
        self, server_config: ServerConfig, weights_dir: Path, clients: list[ChatClient]
    ) -> None:
        self.server_config = server_config
        self.dir = Path(weights_dir).resolve()
        self.clients = clients

    def _save(self, policy: Policy, version: int) -> Path:
        path = self.dir / f"step_{version}"
        if not path.is_dir():
            atomic_write_dir(path, policy.save)
        return path

    def _prune(self) -> None:
        for old in sorted(self.dir.glob("step_*"), key=lambda p: int(p.name[5:]))[:-2]:
            shutil.rmtree(old, ignore_errors=True)


class ReloadFromDisk(_WeightsOnDisk):
    """Save + reload: the policy goes to disk, each server is asked to load that directory."""

    def push(self, policy: Policy, version: int) -> int:
        path = self._save(policy, version)
        for client in self.clients:
            url = self.server_config.reload_url(client.config.base_url)
            reply = client.post(url, {"model_path": str(path)}, stage="weight_sync")
            try:
                body = reply.json()
            except ValueError:
                body = {}
            if isinstance(body, dict) and body.get("success") is False:
                raise HonedError(
                    f"the inference server at {url} did not load the weights in {path}: "
                    f"{body.get('message', body)}"
                )
        self._prune()
        return version


LOAD_LORA = "/v1/load_lora_adapter"
UNLOAD_LORA = "/v1/unload_lora_adapter"


class LoadLoraAdapter(_WeightsOnDisk):
    """Adapters into vLLM at runtime: after each update, the new adapter is loaded under a
    name of its own (`<model>-step-<version>`, since vLLM refuses a name it already holds),
    completions are requested under it, and the previous adapter is unloaded."""

    def __init__(
        self, server_config: ServerConfig, weights_dir: Path, clients: list[ChatClient]
    ) -> None:
        super().__init__(server_config, weights_dir, clients)
        self.served_model: str | None = None

    def push(self, policy: Policy, version: int) -> int:
        if not policy.has_adapters:
            raise HonedError(
                "distributed.server.weight_sync: lora needs policy.lora (the learner must train "
                "LoRA adapters); use reload to send whole weights"
            )
        path = self._save(policy, version)
        name = f"{self.server_config.model}-step-{version}"
        if name == self.served_model:
            return version
        for client in self.clients:
            url = client.config.base_url.with_path(LOAD_LORA)
            client.post(url, {"lora_name": name, "lora_path": str(path)}, stage="weight_sync")
        previous, self.served_model = self.served_model, name
        if previous is not None:
            for client in self.clients:
                url = client.config.base_url.with_path(UNLOAD_LORA)
                client.post(url, {"lora_name": previous}, stage="weight_sync")
        self._prune()
        return version


def build_weight_sync(
    server_config: ServerConfig, run_dir: Path, clients: list[ChatClient]
) -> WeightSync:
    weights_dir = (
        Path(server_config.weights_dir)
        if server_config.weights_dir
        else Path(run_dir) / "server_weights"
    )
    if server_config.weight_sync == "reload":
        return ReloadFromDisk(server_config, weights_dir, clients)
    if server_config.weight_sync == "none":
        return NoWeightSync()
    if server_config.weight_sync == "lora":
        return LoadLoraAdapter(server_config, weights_dir, clients)
    if ":" not in server_config.weight_sync:
        raise HonedError(
            f"distributed.server.weight_sync: '{server_config.weight_sync}' is not reload, lora, "
            "none or module:Class"
        )
    spec = ImportSpec.named(server_config.weight_sync, "distributed.server.weight_sync")
    hook = load_object(spec, "weight-sync hook")(server_config, weights_dir)
    if not isinstance(hook, WeightSync):
        raise HonedError(
            f"weight-sync hook '{server_config.weight_sync}' has no push(policy, version)"
        )
    return hook
