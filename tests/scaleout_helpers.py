"""Helpers for the scale-out tests: an environment that kills its worker once, and fake
OpenAI-compatible inference servers whose completions come from a real tiny honed policy
(`PolicyServer`), or from LoRA adapters loaded at runtime as vLLM does (`LoraServer`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai_server import FakeOpenAIServer, FakeRequest, Reply
from tiny_run import SMALL_MODEL, DigitShareEnv, small_config_data

from honed.config import LoraSettings, PolicyConfig, TinyModelConfig
from honed.errors import HonedError
from honed.models.policy import Policy, SamplingParams
from honed.types import Score


class DieOnceEnv(DigitShareEnv):
    """DigitShareEnv whose second rollout in a process other than `learner_pid` kills that
    process (os._exit, as a crash or a lost node would), once per run: the first to die
    creates `flag`. In the learner it never dies, so an in-process run is its reference."""

    def __init__(self, name: str, seed: int = 0, flag: str = "", learner_pid: int = 0) -> None:
        super().__init__(name, seed)
        self.flag, self.learner_pid, self.calls = flag, learner_pid, 0

    def rollout(self, items, generator, num_generations, seed, first_generation=0):
        self.calls += 1
        if self.calls == 2 and os.getpid() != self.learner_pid:
            try:
                Path(self.flag).open("x").close()
            except FileExistsError:
                pass
            else:
                os._exit(1)
        return super().rollout(items, generator, num_generations, seed, first_generation)


class NaNEnv(DigitShareEnv):
    """Scores every completion NaN: the group must reach the learner, which stops on it."""

    def score(self, item, completion):
        return Score(reward=float("nan"))


class BrokenEnv(DigitShareEnv):
    """Fails to score with a `HonedError`: in a worker, it must reach the learner as it is."""

    def score(self, item, completion):
        raise HonedError("environment 'broken' cannot score this completion")


def scaleout_data(tmp_path: Path, kill_a_worker: bool = False, **trainer: Any) -> dict:
    """A 3-step run on DieOnceEnv whose normaliser state reaches the weights (so merging the
    workers' reward statistics is tested too); with `kill_a_worker` one rollout worker dies
    in its second rollout. The flag file `worker-died` exists afterwards if one did."""
    flag = tmp_path / "worker-died"
    if not kill_a_worker:
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()
    data = small_config_data(tmp_path)
    data["envs"] = [
        {
            "name": "digits",
            "type": "scaleout_helpers:DieOnceEnv",
            "args": {"flag": str(flag), "learner_pid": os.getpid()},
        }
    ]
    data["trainer"].update({"max_steps": 3, "scale_rewards": "none", "max_grad_norm": None})
    data["trainer"].update(trainer)
    data["reward_norm"] = {"mode": "zscore", "warmup": 4}
    data["checkpoint"] = {"every": 0, "keep_last": 1}
    return data


class PolicyServer:
    """An inference server on 127.0.0.1 that samples from a tiny honed policy, the way vLLM's
    `/v1/completions` answers (`token_ids`, `logprobs.token_logprobs`), and reloads weights from
    a directory on `POST /update_weights_from_disk` (SGLang's route and body).

    `ids_as` says how sampled ids come back: `"field"` (`token_ids`, vLLM's
    `return_token_ids`), `"tokens"` (only as `token_id:<id>` strings in `logprobs.tokens`, vLLM's
    `return_tokens_as_token_ids`) or `None` (text tokens only, a server without either);
    `logprobs = False` drops the log-probs, as a server without support for them would.
    """

    def __init__(self, policy: Policy | None = None, model: str = "tiny-policy") -> None:
        self.policy = policy or Policy.from_config(
            PolicyConfig(tiny=TinyModelConfig(**SMALL_MODEL)), seed=0
        )
        self.model = model
        self.ids_as: str | None = "field"
        self.logprobs = True
        self.reloads: list[str] = []
        self._lock = threading.Lock()  # the policy is not thread-safe while reloading
        self.http = FakeOpenAIServer(
            models=[model],
            routes={
                "/v1/completions": self.complete,
                "/update_weights_from_disk": self.reload,
            },
        )

    def __enter__(self) -> PolicyServer:
        self.http.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.stop()

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def complete(self, req: FakeRequest) -> Reply | dict:
        return self.answer(req, lambda: self.policy)

    def answer(self, req: FakeRequest, policy: Callable[[], Policy]) -> Reply | dict:
        """A completion sampled from `policy()`, chosen under the lock that reloads take."""
        body = req.body
        params = SamplingParams(body["temperature"], body["top_p"], body["max_tokens"])
        with self._lock:
            [sample] = policy().generate([body["prompt"]], [body["seed"]], params)
        choice: dict[str, Any] = {
            "index": 0,
            "text": sample.text,
            "finish_reason": "length" if sample.truncated else "stop",
        }
        tokens = [self.policy.decode([i]) for i in sample.completion_ids]
        if self.ids_as == "field" and body.get("return_token_ids"):
            choice["token_ids"] = sample.completion_ids
        if self.ids_as == "tokens" and body.get("return_tokens_as_token_ids"):
            tokens = [f"token_id:{i}" for i in sample.completion_ids]
        if self.logprobs and body.get("logprobs") is not None:
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": sample.logprobs}
        n = len(sample.completion_ids)
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        return {"object": "text_completion", "choices": [choice], "usage": usage}

    def reload(self, req: FakeRequest) -> dict:
        path = req.body["model_path"]
        with self._lock:
            self.policy = Policy.load(path)
        self.reloads.append(path)
        return {"success": True, "message": "Succeeded to update model weights."}


LORA = {"r": 4, "alpha": 8}


class LoraServer(PolicyServer):
    """vLLM's runtime LoRA API over a tiny base model: `/v1/load_lora_adapter` loads the
    adapter in `lora_path` with peft under `lora_name`, `/v1/unload_lora_adapter` drops it,
    and a completion request must name a loaded adapter (or the base model); `requested` lists
    the model each completion was asked of."""

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
        with self._lock:
            if name in self.adapters:  # vLLM refuses a name it holds
                message = f"The lora adapter '{name}' has already been loaded."
                return Reply(400, {"error": {"message": message}})
            self.adapters[name] = Policy.from_checkpoint(path, self.settings, seed=0)
            self.loads.append(name)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, req: FakeRequest) -> Reply | str:
        name = req.body["lora_name"]
        with self._lock:
            if self.adapters.pop(name, None) is None:
                message = f"The lora adapter '{name}' cannot be found."
                return Reply(404, {"error": {"message": message}})
            self.unloads.append(name)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def complete(self, req: FakeRequest) -> Reply | dict:
        model = req.body["model"]
        with self._lock:
            if model != self.model and model not in self.adapters:
                message = f"The model `{model}` does not exist."
                return Reply(404, {"error": {"message": message}})
            self.requested.append(model)
        return self.answer(req, lambda: self.adapters.get(model, self.policy))
