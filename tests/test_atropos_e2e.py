"""honed as the trainer behind Atropos, end to end with atroposlib's real pieces: its
trajectory API (`run-api`, a process on 127.0.0.1) and a `BaseEnv` written here (local
questions, items chosen by honed's `CurriculumScheduler`) that samples from `honed serve`
through atroposlib's own SGLang client and `ManagedServer`. honed registers, pulls, trains two
steps, pushes its weights into the server after each, and the environment's next completions
carry the new weights' log-probs; the environment's curriculum is saved with honed's
checkpoint, and the run resumes for a third step."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
import yaml
from serve_helpers import LocalServer
from tiny_run import SMALL_MODEL, small_config_data

from honed.cli import main
from honed.config import PolicyConfig, TinyModelConfig
from honed.models.batching import build_batch
from honed.models.policy import Policy
from honed.models.scoring import frozen_logprobs
from honed.sampling.curriculum import CurriculumScheduler
from honed.serve.weights import with_chat_template

INSTALL = "atroposlib is not installed: pip install atroposlib"
pytest.importorskip("atroposlib", reason=INSTALL)
pytest.importorskip("openai", reason="the openai client is not installed: pip install openai")
from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig  # noqa: E402

GROUP = 4
MAX_TOKENS = 8


class DigitsEnv(BaseEnv):
    """Questions `U:<i>+<i>=`; a completion scores its share of digits (so that an untrained
    policy's groups spread). Items are drawn by honed's `CurriculumScheduler`, whose state the
    environment saves in its Atropos checkpoint."""

    name = "digits"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.questions = {f"q{i}": f"U:{i}+{i}=\nA:" for i in range(8)}
        self.curriculum = CurriculumScheduler("uniform", seed=0)
        self.curriculum.register_items(self.questions)

    async def setup(self) -> None:
        pass

    async def evaluate(self, *args, **kwargs) -> None:
        pass

    async def get_next_item(self) -> str:
        return self.curriculum.sample_item(self.curr_step, self.config.total_steps)

    async def collect_trajectories(self, key: str):
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.completion(
                prompt=self.questions[key], n=GROUP, max_tokens=MAX_TOKENS, temperature=1.0
            )
            nodes = managed.get_state()["nodes"]
        completions = [self.tokenizer.decode(n.tokens[-MAX_TOKENS:]) for n in nodes]
        scores = [sum(c.isdigit() for c in text) / MAX_TOKENS for text in completions]
        self.curriculum.update_batch(key, scores)
        group = {
            "tokens": [n.tokens for n in nodes],
            "masks": [n.masked_tokens for n in nodes],
            "scores": scores,
            "inference_logprobs": [n.logprobs for n in nodes],
        }
        return group, []

    def save_checkpoint(self, step, data=None) -> None:
        super().save_checkpoint(step, {"curriculum": self.curriculum.state_dict()})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def trajectory_api(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    port = free_port()
    log = (tmp_path / "run-api.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atroposlib.cli.run_api",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/info", trust_env=False).status_code == 200
        except httpx.TransportError:
            return process.poll() is not None and pytest.fail("run-api exited")

    try:
        wait_for(up, 60, "run-api")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


class RunningEnv:
    """The environment's own loop (`env_manager`: register, poll, roll out, post) on a
    thread with its event loop, as `python env.py serve` would run it."""

    def __init__(self, env: BaseEnv) -> None:
        self.env = env
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.task = self.loop.create_task(self.env.env_manager())
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self.task)
        # the server clients' health checks and the workers still pending end with the loop
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def stop(self) -> None:
        if self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(timeout=30)


def score(policy: Policy, tokens: list[int], start: int) -> torch.Tensor:
    batch = build_batch([tokens[:start]], [tokens[start:]], [[1] * (len(tokens) - start)], 0)
    return frozen_logprobs(policy.model, batch, 1.0)[0, : len(tokens) - start]


def test_honed_trains_behind_atropos_and_the_environment_samples_the_new_weights(
    tmp_path, trajectory_api
):
    shape = TinyModelConfig(**SMALL_MODEL)
    initial = with_chat_template(Policy.from_config(PolicyConfig(tiny=shape), 0))
    initial.save(tmp_path / "model")
    weights = tmp_path / "weights"
    with LocalServer(initial, "tiny", weights_dirs=[weights], max_batch=16) as server:
        env_config = BaseEnvConfig(
            tokenizer_name=str(tmp_path / "model"),
            group_size=GROUP,
            use_wandb=False,
            rollout_server_url=trajectory_api,
            max_token_length=64,
            total_steps=100,
            steps_per_eval=1000,
            max_batches_offpolicy=1,
            wandb_name="digits",
        )
        inference = APIServerConfig(
            server_type="sglang",
            base_url=server.base_url,
            model_name="tiny",
            tokenizer_name=str(tmp_path / "model"),
            api_key="unused",
        )
        env = RunningEnv(DigitsEnv(env_config, [inference]))
        env.thread.start()
        data = small_config_data(tmp_path)
        data["trainer"].update({"max_steps": 2, "prompts_per_step": 2, "num_generations": GROUP})
        data["reward_norm"] = {"mode": "zscore", "warmup": 0}
        data["distributed"] = {
            "backend": "atropos",
            "api_url": trajectory_api,
            "server": {"base_url": server.base_url, "model": "tiny", "weights_dir": str(weights)},
        }
        config = tmp_path / "atropos.yaml"
        config.write_text(yaml.safe_dump(data))
        run = tmp_path / "run"
        try:
            assert main(["train", str(config), "--quiet"]) == 0
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            trained = [r for r in rows if "reward/atropos_0/mean" in r]
            assert [r["step"] for r in trained] == [1, 2]
            assert all(r["groups/trained"] > 0 and r["atropos/batches"] >= 1 for r in trained)
            assert trained[-1]["reward_norm/atropos_0/count"] == 16
            # the groups are kept for `honed view` as any run's
            viewed = json.loads((run / "rollouts" / "step_000002.json").read_text())
            assert {g["env"] for g in viewed["groups"]} == {"atropos_0"}
            # the weights of each step went into the server; it now serves step 2's
            assert server.served.weights_path == str((weights / "step_2").resolve())
            # the environment saved its curriculum with honed's checkpoint of step 2
            saved = wait_for(
                lambda: next(run.glob("env_checkpoints/digits_*/step-2.json"), None),
                30,
                "the environment's checkpoint",
            )
            curriculum = CurriculumScheduler()
            curriculum.load_state_dict(json.loads(saved.read_text())["curriculum"])
            assert curriculum.n_items_tracked > 0
            # the environment's next completions come from the new weights
            group, _ = env.call(env.env.collect_trajectories("q0"))
            trained_policy = Policy.load(run / "checkpoints" / "step_2")
            moved = 0.0
            for tokens, masks, logprobs in zip(
                group["tokens"], group["masks"], group["inference_logprobs"], strict=True
            ):
                start = next(i for i, m in enumerate(masks) if m != -100)
                served = torch.tensor(logprobs[start:])
                assert torch.allclose(served, score(trained_policy, tokens, start), atol=1e-5)
                moved = max(moved, float((served - score(initial, tokens, start)).abs().max()))
            assert moved > 1e-3
            # and the run resumes behind the same API, the environments' normalisers restored
            more = ["train", str(config), "--quiet", "--resume", "-o", "trainer.max_steps=3"]
            assert main(more) == 0
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            last = [r for r in rows if "reward/atropos_0/mean" in r][-1]
            assert last["step"] == 3 and last["reward_norm/atropos_0/count"] == 24
            assert server.served.weights_path == str((weights / "step_3").resolve())
        finally:
            env.stop()
