"""The inference-server rollout backend against OpenAI-compatible servers on 127.0.0.1 whose
completions come from a real tiny honed policy (`scaleout_helpers.PolicyServer`)."""

from __future__ import annotations

import pytest
import torch
from scaleout_helpers import PolicyServer
from tiny_run import half_spread_env_data, small_config, spread_env_data

from honed.config import ServerConfig
from honed.distributed.server import CompletionsGenerator
from honed.errors import HonedError
from honed.models.policy import PolicySampler, SamplingParams
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

PARAMS = SamplingParams(1.0, 1.0, 6)


def _generator(server: PolicyServer, policy) -> CompletionsGenerator:
    cfg = ServerConfig(base_url=server.base_url, model=server.model, max_retries=0)
    return CompletionsGenerator(cfg, policy, PARAMS)


def test_server_samples_are_the_in_process_samples_token_for_token(small_policy):
    with PolicyServer(small_policy) as server:
        generator = _generator(server, small_policy)
        prompts = ["1+2=", "3+4=", "1+2="]
        remote = generator.generate(prompts, [5, 6, 7])
        local = PolicySampler(small_policy, PARAMS).generate(prompts, [5, 6, 7])
        # rows go out concurrently, one request each: find row 0's by its seed
        [body] = [r.body for r in server.http.requests if r.body and r.body["seed"] == 5]
    assert body["prompt"] == small_policy.encode("1+2=")  # token ids in
    assert body["return_token_ids"] and body["logprobs"] == 1
    for r, s in zip(remote, local, strict=True):
        assert r.completion_ids == s.completion_ids  # token ids out
        assert r.logprobs == pytest.approx(s.logprobs)
        assert (r.text, r.truncated, r.prompt_ids) == (s.text, s.truncated, s.prompt_ids)


def test_token_ids_are_also_read_from_token_id_strings(small_policy):
    with PolicyServer(small_policy) as server:
        server.ids_as = "tokens"
        [sample] = _generator(server, small_policy).generate(["2+2="], [1])
    [local] = PolicySampler(small_policy, PARAMS).generate(["2+2="], [1])
    assert sample.completion_ids == local.completion_ids


def test_a_server_without_token_ids_or_logprobs_is_a_clear_error(small_policy):
    with PolicyServer(small_policy) as server:
        generator = _generator(server, small_policy)
        server.ids_as = None
        with pytest.raises(HonedError, match=r"no token ids.*return_token_ids"):
            generator.generate(["1+1="], [0])
        server.ids_as, server.logprobs = "field", False
        with pytest.raises(HonedError, match="no log-probs"):
            generator.generate(["1+1="], [0])


def test_training_on_two_servers_pushes_every_step_s_weights(tmp_path):
    with PolicyServer() as a, PolicyServer() as b:
        cfg = small_config(
            tmp_path,
            "trainer.max_steps=2",
            "distributed.backend=server",
            f"distributed.server={{base_url: [{a.base_url}, {b.base_url}], model: {a.model}}}",
            data=spread_env_data(tmp_path),
        )
        trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
        trainer.train()
        served = [len(s.http.requests) for s in (a, b)]
        final = {k: v.clone() for k, v in a.policy.model.state_dict().items()}
        reloads = a.reloads
    # weights of versions 0 (before the first step), 1 and 2 went to both servers
    assert [p.rsplit("/", 1)[1] for p in reloads] == ["step_0", "step_1", "step_2"]
    learner = trainer.policy.model.state_dict()
    assert all(torch.equal(final[k], learner[k]) for k in learner)
    assert min(served) > 8  # rows were spread over both servers
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    for r in rows:
        # every token is weighted against the server's log-probs: same weights, same model
        # code here, so the weights are 1 up to float noise
        assert r["is/off_policy_frac"] == 1.0 and r["is/capped_frac"] == 0.0
        assert r["is/weight_mean"] == pytest.approx(1.0, abs=1e-3)
        assert r["async/staleness_max"] == 0.0
    assert len(list((tmp_path / "run/server_weights").iterdir())) == 2  # the two newest


def test_without_weight_sync_the_servers_fixed_weights_grow_stale(tmp_path):
    with PolicyServer() as server:
        cfg = small_config(
            tmp_path,
            "trainer.max_steps=2",
            "distributed.backend=server",
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            "distributed.server.weight_sync=none",
            data=spread_env_data(tmp_path),
        )
        trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
        trainer.train()
        assert server.reloads == []
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0]


def test_server_rollouts_run_ahead_on_a_background_thread(tmp_path):
    with PolicyServer() as server:
        cfg = small_config(
            tmp_path,
            "trainer.max_steps=3",
            "distributed.backend=server",
            "distributed.max_staleness=1",
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            data=spread_env_data(tmp_path),
        )
        trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
        trainer.train()
        reloads = [p.rsplit("/", 1)[1] for p in server.reloads]
    assert reloads == ["step_0", "step_1", "step_2", "step_3"]
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 1.0]


def test_screening_against_an_inference_server_asks_only_for_what_it_counts(tmp_path):
    with PolicyServer() as server:
        cfg = small_config(
            tmp_path,
            "trainer.max_steps=2",
            "trainer.screening.rollouts=2",
            "distributed.backend=server",
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            data=half_spread_env_data(tmp_path),
        )
        trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
        trainer.train()
        completions = [r for r in server.http.requests if r.path == "/v1/completions"]
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    # one request per completion: exactly the rollouts counted, fewer than 2 steps x 4 x 4 as
    # some groups stopped after 2, more than 2 x 4 x 2 as others went on
    assert 2 * 4 * 2 < len(completions) == rows[-1]["rollouts/generated"] < 2 * 4 * 4
