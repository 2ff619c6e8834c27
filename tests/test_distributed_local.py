"""Scale-out pieces that need no Ray: sharded rollouts, reward-statistics shards, the
truncated importance weights, the lagged (asynchronous) pipeline, and the config section."""

from __future__ import annotations

import copy
import math
import shutil

import pytest
import torch
from numerics import assert_logprobs_close
from tiny_run import small_config, spread_env_data

from honed.config import TrainerConfig
from honed.distributed.ray_backend import connect
from honed.distributed.shard import roll_out, split
from honed.distributed.worker import RolloutWorker, ShardTask
from honed.errors import HonedError
from honed.models.policy import PolicySampler, SamplingParams
from honed.rewards import RewardNormalizer, WelfordAccumulator
from honed.rl.prepare import TrainSequence
from honed.rl.trainer import GRPOTrainer, build_envs
from honed.rl.update import PolicyUpdate
from honed.runs.rundir import RunDir
from honed.types import derive_seed


def test_split_is_contiguous_and_balanced():
    assert [list(r) for r in split(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [len(r) for r in split(3, 4)] == [1, 1, 1, 0]
    assert [i for r in split(17, 3) for i in r] == list(range(17))


def test_items_sharded_over_two_workers_give_the_in_process_groups(tmp_path, small_policy):
    config = small_config(tmp_path, "trainer.num_generations=4", "trainer.max_completion_length=6")
    envs = build_envs(config)
    items = list(envs["addition"].items("train"))[:6]
    seed = derive_seed(config.seed, "rollout", 3, 0)
    sampler = PolicySampler(small_policy, SamplingParams(1.0, 1.0, 6))
    whole = roll_out(envs, sampler, items, seed, config.trainer)
    state = small_policy.model.state_dict()
    shards = []
    for k, slots in enumerate(split(len(items), 2)):
        worker = RolloutWorker(config.model_dump(mode="json"), k)
        worker.load_weights(7, state)
        task = ShardTask(1, k, list(slots), [items[i] for i in slots], seed)
        shards.append(worker.rollout(task))
    assert [s.version for s in shards] == [7, 7]
    pieces = [pair for s in shards for pair in s.pairs]
    for (g, stats), (h, other) in zip(whole, pieces, strict=True):
        assert (g.env, g.item_key) == (h.env, h.item_key)
        for a, b in zip(g.trajectories, h.trajectories, strict=True):
            # the same tokens (each row's randomness is its own seed's) ...
            assert a.segments[0].completion_ids == b.segments[0].completion_ids
            # ... scored in a batch of 24 and in two of 12: equal up to the kernels' rounding
            assert_logprobs_close(a.segments[0].logprobs, b.segments[0].logprobs)
            assert a.reward == b.reward
        assert stats.state_dict() == other.state_dict()


def test_merging_group_shards_in_item_order_is_exact_and_order_free_to_rounding():
    rng = torch.Generator().manual_seed(0)
    groups = [(1e6 + torch.randn(8, generator=rng, dtype=torch.float64)).tolist() for _ in range(5)]
    shards = []
    for rewards in groups:
        acc = WelfordAccumulator()
        acc.update_batch(rewards)
        shards.append(acc)
    learner = RewardNormalizer("zscore", clip=None, warmup=0)
    for acc in shards:
        learner.observe(acc)
    whole = WelfordAccumulator()
    whole.update_batch([r for g in groups for r in g])
    assert learner.count == whole.count == 40
    assert learner.mean == pytest.approx(whole.mean, rel=1e-15)
    assert learner.std == pytest.approx(whole.std, rel=1e-9)
    # observe then apply maps every group of a step with one affine map
    mapped = learner.apply(groups[0])
    assert mapped == pytest.approx([(r - learner.mean) / learner.std for r in groups[0]])
    assert RewardNormalizer("none").apply([3.0]) == [3.0]


def _update(policy, cap: float):
    opt = torch.optim.SGD(policy.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cfg = TrainerConfig(max_completion_length=6, max_grad_norm=None, importance_sampling_cap=cap)
    return PolicyUpdate(policy, opt, sched, cfg)


def _grad_and_stats(small_policy, shift: float | None) -> tuple[torch.Tensor, dict]:
    """Gradient of one sequence whose behaviour log-probs are the current ones minus `shift`
    (so π_old / μ = e^shift on every token); `None`: an on-policy sequence."""
    policy = copy.copy(small_policy)
    policy.model = copy.deepcopy(small_policy.model)
    [s] = PolicySampler(policy, SamplingParams(1.0, 1.0, 6)).generate(["4+4="], [3])
    behaviour = [lp - (shift or 0.0) for lp in s.logprobs]
    seq = TrainSequence(
        s.prompt_ids,
        s.completion_ids,
        [1] * len(s.completion_ids),
        behaviour,
        1.0,
        shift is not None,
    )
    stats = _update(policy, cap=2.0).step([seq])
    return torch.cat([p.grad.flatten() for p in policy.model.parameters()]), stats


def test_off_policy_tokens_are_weighted_by_the_truncated_ratio(small_policy):
    on, on_stats = _grad_and_stats(small_policy, None)
    assert on_stats["is/off_policy_frac"] == 0.0
    below, stats = _grad_and_stats(small_policy, math.log(1.5))  # ratio 1.5 < cap 2
    assert torch.allclose(below, 1.5 * on, rtol=1e-4, atol=1e-7)
    assert stats["is/off_policy_frac"] == 1.0 and stats["is/capped_frac"] == 0.0
    assert stats["is/weight_mean"] == pytest.approx(1.5, rel=1e-4)
    above, stats = _grad_and_stats(small_policy, math.log(5.0))  # ratio 5 → capped at 2
    assert torch.allclose(above, 2.0 * on, rtol=1e-4, atol=1e-7)
    assert stats["is/capped_frac"] == 1.0 and stats["is/weight_mean"] == pytest.approx(2.0)


def test_lagged_rollouts_are_k_steps_stale_and_importance_weighted(tmp_path):
    cfg = small_config(
        tmp_path,
        "distributed.max_staleness=2",
        "trainer.max_steps=4",
        data=spread_env_data(tmp_path),
    )
    trainer = GRPOTrainer(cfg, RunDir(tmp_path / "run"))
    trainer.train()
    rows = [r for r in trainer.run.read_jsonl(trainer.run.metrics_path) if "reward/mean" in r]
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 2.0, 2.0]
    assert rows[0]["is/off_policy_frac"] == 0.0 and rows[3]["is/off_policy_frac"] == 1.0
    # a checkpoint keeps the requests submitted ahead (steps 3 and 4 after step 2)
    state = torch.load(tmp_path / "run/checkpoints/step_2/trainer_state.pt", weights_only=False)
    assert [r["step"] for r in state["rollout_queue"]] == [2, 3]


def test_resume_in_lagged_mode_redoes_the_queued_requests_without_drawing_again(tmp_path):
    lag = ("distributed.max_staleness=1", "checkpoint.every=1", "checkpoint.keep_last=5")
    cfg = small_config(tmp_path, *lag, data=spread_env_data(tmp_path))
    straight = GRPOTrainer(cfg, RunDir(tmp_path / "a"))
    straight.train()
    # a run stopped after step 2, with step 3's request (drawn at step 2) in its checkpoint
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for step in (3, 4):
        shutil.rmtree(tmp_path / f"b/checkpoints/step_{step}")
    resumed = GRPOTrainer(cfg, RunDir(tmp_path / "b"))
    resumed.train(resume=True)

    def items(run: RunDir) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for row in run.read_jsonl(run.samples_path):
            out.setdefault(row["step"], []).append(row["item"])
        return out

    assert items(resumed.run) == items(straight.run)  # same items, none drawn twice or lost
    rows = [r for r in resumed.run.read_jsonl(resumed.run.metrics_path) if "reward/mean" in r]
    # step 3's queued items were rolled out again on the weights of step 2
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("distributed.backend=server", "needs a 'server' section"),
        ("distributed.address=somewhere", "local, auto or ray://"),
        ("distributed.max_stalenes=1", "did you mean 'distributed.max_staleness'"),
        ("trainer.importance_sampling_cap=0.5", "trainer.importance_sampling_cap"),
    ],
)
def test_distributed_config_errors_name_the_key(tmp_path, override, message):
    with pytest.raises(HonedError, match=message):
        small_config(tmp_path, override)


def test_ray_backend_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("honed.distributed.ray_backend.ray", None)
    with pytest.raises(HonedError, match=r"honed\[distributed\]"):
        connect("local")
