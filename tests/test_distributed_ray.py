"""Rollouts on a local Ray cluster started by the tests (2 CPUs, 2 rollout workers).

Every rollout is seeded from (run seed, step, round, item key, generation index) and workers
load the learner's weights before each step, so a Ray run must end with exactly the weights of
the in-process run of the same config, synchronously and after losing a worker mid-run (the
learner trains on the same tokens with the same shapes). Asynchronously (actors run their calls
in order, so a request submitted k steps ahead runs on the same weights version in both
backends) the off-policy weights use the workers' behaviour log-probs, computed in batches of
another shape, so the weights agree up to rounding (`numerics.py`).

Ray comes with the `dev` extra, so `make test` runs these; `make test` sets HONED_REQUIRE_RAY so
that a missing Ray fails there instead of skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from numerics import assert_weights_close
from scaleout_helpers import LORA, LoraServer, PolicyServer, scaleout_data
from tiny_run import half_spread_env_data, small_config

from honed.errors import HonedError
from honed.models.policy import Policy
from honed.rl.trainer import GRPOTrainer
from honed.runs.rundir import RunDir

try:
    import ray
except ImportError:
    if os.environ.get("HONED_REQUIRE_RAY"):
        raise
    pytest.skip("Ray is not installed: pip install 'honed[distributed]'", allow_module_level=True)

RAY = ("distributed.backend=ray", "distributed.num_rollout_workers=2")


@pytest.fixture(scope="module")
def cluster():
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here), str(here.parent / "src"), os.environ.get("PYTHONPATH", "")])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


def _train(tmp_path, name: str, *overrides: str, kill_a_worker: bool = False) -> GRPOTrainer:
    data = scaleout_data(tmp_path / name, kill_a_worker)
    trainer_ = GRPOTrainer(
        small_config(tmp_path / name, *overrides, data=data), RunDir(tmp_path / name / "run")
    )
    trainer_.train()
    return trainer_


def _rows(trainer: GRPOTrainer) -> list[dict]:
    return [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]


def _same_weights(a: GRPOTrainer, b: GRPOTrainer) -> bool:
    wa, wb = a.policy.model.state_dict(), b.policy.model.state_dict()
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> GRPOTrainer:
    return _train(tmp_path_factory.mktemp("reference"), "inprocess")


def test_synchronous_ray_run_ends_with_the_in_process_weights(cluster, reference, tmp_path):
    run = _train(tmp_path, "ray", *RAY)
    assert _same_weights(run, reference)
    initial = Policy.from_config(run.config.policy, run.config.seed).model.state_dict()
    assert any(not torch.equal(initial[k], v) for k, v in run.policy.model.state_dict().items())
    rows, ref_rows = _rows(run), _rows(reference)
    assert [r["distributed/workers"] for r in rows] == [2.0, 2.0, 2.0]
    for key in ("reward/mean", "groups/trained", "reward_norm/digits/mean", "loss"):
        assert [r[key] for r in rows] == [r[key] for r in ref_rows], key


def test_a_worker_killed_mid_run_is_replaced_and_its_items_redone(cluster, reference, tmp_path):
    run = _train(tmp_path, "ray", *RAY, kill_a_worker=True)
    assert (tmp_path / "ray/worker-died").exists()
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["distributed/restarts"] == 1.0
    assert sum(r["distributed/requeued_items"] for r in rows) == 2.0  # one shard of 4 items
    for r in rows:  # every step trained on prompts_per_step groups, none twice
        assert r["groups/trained"] + r["groups/filtered"] == 4
    assert _same_weights(run, reference)


def test_asynchronous_ray_run_matches_the_in_process_lagged_run(cluster, tmp_path):
    lag = ("distributed.max_staleness=1",)
    local = _train(tmp_path, "inprocess", *lag)
    run = _train(tmp_path, "ray", *RAY, *lag)
    rows = _rows(run)
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 1.0]
    assert rows[-1]["is/off_policy_frac"] == 1.0 and 0 <= rows[-1]["is/capped_frac"] <= 1
    # Off-policy tokens are weighted by pi_old / mu, and mu comes from the workers' batches of
    # half the items: not the in-process batch's shape, so its last bits differ on some CPUs.
    assert_weights_close(run.policy.model.state_dict(), local.policy.model.state_dict())


SCREENED = (
    "trainer.screening.rollouts=2",
    "trainer.dynamic_sampling=true",
    "trainer.max_sampling_rounds=2",
    "trainer.max_steps=3",
)


def test_screening_on_ray_workers_ends_with_the_in_process_weights(cluster, tmp_path):
    """Half the items never have spread: their screens stop, the others go on (their rest
    seeded as in the whole group, wherever it is generated)."""

    def train(name: str, *more: str) -> GRPOTrainer:
        data = half_spread_env_data(tmp_path / name)
        trainer_ = GRPOTrainer(
            small_config(tmp_path / name, *SCREENED, *more, data=data),
            RunDir(tmp_path / name / "run"),
        )
        trainer_.train()
        return trainer_

    local, run = train("inprocess"), train("ray", *RAY)
    assert _same_weights(run, local)
    rows, local_rows = _rows(run), _rows(local)
    for key in ("rollouts/generated", "tokens/generated", "rollouts/kept", "loss"):
        assert [r.get(key) for r in rows] == [r.get(key) for r in local_rows], key
    drawn = sum(r["sampling/groups_drawn"] for r in rows)
    assert 2 * drawn < rows[-1]["rollouts/generated"] < 4 * drawn  # some stopped, some went on


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("BrokenEnv", "environment 'broken' cannot score this completion"),
        # a NaN reward is not an error in the worker: the learner's check stops the run on it
        ("NaNEnv", r"non-finite reward at step 1 \(environment 'broken'\)"),
    ],
)
def test_an_error_in_a_worker_reaches_the_learner_as_its_message(cluster, tmp_path, env, message):
    data = scaleout_data(tmp_path)
    data["envs"] = [{"name": "broken", "type": f"scaleout_helpers:{env}"}]
    trainer = GRPOTrainer(small_config(tmp_path, *RAY, data=data), RunDir(tmp_path / "run"))
    with pytest.raises(HonedError, match=message):
        trainer.train()


def test_ray_workers_generating_through_an_inference_server(cluster, tmp_path):
    with PolicyServer() as server:
        server_cfg = f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}"
        run = _train(tmp_path, "ray", *RAY, server_cfg)
        completions = [r for r in server.http.requests if r.path == "/v1/completions"]
        reloads = len(server.reloads)
    assert len(completions) == 3 * 4 * 4  # steps x prompts x generations, all from the workers
    assert reloads == 4  # the initial weights and those of each step
    rows = _rows(run)
    assert all(r["is/off_policy_frac"] == 1.0 and r["async/staleness_max"] == 0 for r in rows)


def test_ray_workers_request_the_adapter_the_server_was_given(cluster, tmp_path):
    """`weight_sync: lora` behind Ray workers: the learner loads each version's adapter into
    the server under a name of its own, and the workers' completions ask for that name, not
    for the base model (whose completions would not be the policy's)."""
    pytest.importorskip("peft", reason="LoRA needs peft: pip install 'honed[lora]'")
    with LoraServer() as server:
        _train(
            tmp_path,
            "ray",
            *RAY,
            f"distributed.server={{base_url: {server.base_url}, model: {server.model}}}",
            "distributed.server.weight_sync=lora",
            f"policy.lora={{r: {LORA['r']}, alpha: {LORA['alpha']}}}",
        )
    names = [f"{server.model}-step-{v}" for v in range(4)]
    assert server.loads == names
    # each step's 4 prompts x 4 generations, from the adapter of that step's version
    assert server.requested == [n for n in names[:3] for _ in range(16)]
