"""Atropos's scored groups as honed's: tokens and masks become segments, `inference_logprobs`
the behaviour log-probs, `advantages` and `overrides` fixed advantages that the loss uses
token by token; the backend registers, pulls and waits as Atropos's trainer protocol says.
These need no atroposlib (`test_atropos_e2e.py` runs the real API and a real environment)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tiny_run import small_config

from honed.config import TrainerConfig
from honed.distributed.atropos import AtroposBackend, to_group
from honed.distributed.types import RolloutRequest
from honed.errors import HonedError
from honed.models.batching import build_batch
from honed.models.policy import Policy
from honed.models.scoring import frozen_logprobs
from honed.rewards import NormalizerSet
from honed.rl.loss import grpo_loss
from honed.rl.plan import training_plan
from honed.rl.prepare import TrainSequence, prepare
from honed.rl.update import PolicyUpdate

M = -100


def decode(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def scored_group(**extra) -> dict:
    """Two sequences of one prompt `[5, 6]`; the second has a masked tool result inside."""
    return {
        "tokens": [[5, 6, 7, 8], [5, 6, 9, 3, 4, 10]],
        "masks": [[M, M, 7, 8], [M, M, 9, M, M, 10]],
        "scores": [1.0, -1.0],
        "inference_logprobs": [[1.0, 1.0, -0.5, -0.25], [1.0, 1.0, -1.5, 1.0, 1.0, -0.75]],
        "env_id": 2,
        **extra,
    }


def test_a_scored_group_becomes_segments_with_masks_and_behaviour_logprobs():
    group, sampled = to_group(scored_group(), decode)
    assert sampled and group.env == "atropos_2"
    first, second = (t.segments[0] for t in group.trajectories)
    assert first.prompt_ids == [5, 6] and first.completion_ids == [7, 8]
    assert first.logprobs == [-0.5, -0.25] and first.mask() == [1, 1]
    assert second.completion_ids == [9, 3, 4, 10]
    assert second.mask() == [1, 0, 0, 1]  # the tool result is not trained on
    assert second.logprobs == [-1.5, 0.0, 0.0, -0.75]  # Atropos's 1.0 placeholders dropped
    assert [t.reward for t in group.trajectories] == [1.0, -1.0]
    assert [t.success for t in group.trajectories] == [1.0, 0.0]
    assert group.trajectories[1].completion_text == "9,3,4,10"
    # the item is the prompt: the same prompt, the same key
    again, _ = to_group(scored_group(env_id=None), decode)
    assert again.item_key == group.item_key and again.env == "atropos"
    assert first.advantages is None


def test_advantages_and_overrides_fix_the_segments_advantages():
    per_token = [[0.0, 0.0, 0.5, 0.25], [0.0, 0.0, -1.0, 0.0, 0.0, -2.0]]
    group, _ = to_group(scored_group(advantages=per_token), decode)
    assert [t.segments[0].advantages for t in group.trajectories] == [
        [0.5, 0.25],
        [-1.0, 0.0, 0.0, -2.0],
    ]
    zeroed, _ = to_group(scored_group(overrides=[{}, {"set_advantage_to_zero": True}]), decode)
    assert zeroed.trajectories[0].segments[0].advantages is None
    assert zeroed.trajectories[1].segments[0].advantages == [0.0] * 4
    # BaseEnv sends [] for the fields it did not fill
    empty, sampled = to_group(
        scored_group(advantages=[], overrides=[], inference_logprobs=[]), decode
    )
    assert not sampled and empty.trajectories[0].segments[0].advantages is None


def test_malformed_groups_are_refused_naming_the_environment():
    with pytest.raises(HonedError, match="environment 2: sequence 1 has 6 tokens and 5 masks"):
        to_group(scored_group(masks=[[M, M, 7, 8], [M, M, 9, M, 10]]), decode)
    with pytest.raises(HonedError, match="'scores' has 1 rows for 2 sequences"):
        to_group(scored_group(scores=[1.0]), decode)
    with pytest.raises(HonedError, match="environment 2 carries 'images'"):
        to_group(scored_group(images=["data:image/png;base64,AAAA"]), decode)
    with pytest.raises(HonedError, match="'advantages' holds a value that is not finite"):
        to_group(scored_group(advantages=[[math.nan] * 4, [0.0] * 6]), decode)


def test_prepare_trains_fixed_advantages_token_by_token():
    settings = TrainerConfig()
    per_token = [[0.0, 0.0, 0.5, 0.25], [0.0, 0.0, -1.0, 0.0, 0.0, -2.0]]
    fixed, _ = to_group(scored_group(advantages=per_token, scores=[1.0, 1.0]), decode)
    prepared = prepare([fixed], settings)
    # equal rewards, but the environment's advantages carry a signal: kept
    assert prepared.zero_std == [False] and len(prepared.sequences) == 2
    first, second = prepared.sequences
    assert first.token_advantages == [0.5, 0.25] and first.advantage == 0.375
    assert second.advantage == -1.5  # the mean over its trained tokens
    assert prepared.advantages == [[0.375, -1.5]]
    zero, _ = to_group(scored_group(advantages=[[0.0] * 4, [0.0] * 6]), decode)
    assert prepare([zero], settings).zero_std == [True]  # nothing to learn, whatever the rewards
    # an override zeroes one sequence; the other keeps its group-relative advantage
    mixed, _ = to_group(scored_group(overrides=[{}, {"set_advantage_to_zero": True}]), decode)
    one, two = prepare([mixed], settings).sequences
    assert one.token_advantages is None and one.advantage > 0
    assert two.token_advantages == [0.0] * 4 and two.advantage == 0.0


def test_each_token_is_weighted_by_its_own_advantage_in_the_loss():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.2, -0.1]], requires_grad=True)
    old = logp.detach() + 0.1  # ratios of e^-0.1, inside the clip range
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]) / 5
    clip = {"epsilon_low": 0.2, "epsilon_high": 0.2}
    scalar = grpo_loss(logp, old, torch.tensor([0.7, -1.2]), weights, **clip)
    repeated = grpo_loss(logp, old, torch.tensor([[0.7] * 3, [-1.2] * 3]), weights, **clip)
    assert torch.equal(scalar.loss, repeated.loss)
    per_token = torch.tensor([[0.0, 2.1, 0.0], [-1.2, 0.0, -2.4]])
    varied = grpo_loss(logp, old, per_token, weights, **clip)
    expected = -(weights * torch.exp(logp - old) * per_token).sum()
    assert torch.allclose(varied.loss, expected, atol=1e-7)


def test_an_environment_first_met_gets_a_normaliser_with_the_settings():
    norms = NormalizerSet(["addition"], "zscore", 3.0, 0, 1e-8)
    fresh = norms["atropos_0"]
    assert set(norms) == {"addition", "atropos_0"}
    assert (fresh.mode, fresh.clip, fresh.warmup) == ("zscore", 3.0, 0)


class FakeAPI:
    """The trajectory API's answers, scripted: `None` batches until `ready` calls."""

    url = "http://127.0.0.1:9"

    def __init__(self, batches: list[list[dict] | None]) -> None:
        self.batches = batches
        self.registered: list[dict] = []

    def register(self, registration: dict) -> None:
        self.registered.append(registration)

    def batch(self):
        return self.batches.pop(0) if self.batches else None

    def status(self):
        return {"current_step": 0, "queue_size": 0}

    def close(self) -> None:
        pass


def atropos_config(tmp_path, *overrides: str):
    return small_config(
        tmp_path,
        "distributed.backend=atropos",
        "distributed.api_url=http://127.0.0.1:9",
        *overrides,
    )


def test_the_backend_registers_once_pulls_and_scores_groups_without_logprobs(
    tmp_path, small_policy: Policy, monkeypatch
):
    monkeypatch.setattr("honed.distributed.atropos.POLL_S", 0.0)
    config = atropos_config(tmp_path, "checkpoint.every=3")
    plain = scored_group(inference_logprobs=None)
    api = FakeAPI([None, None, [scored_group(), plain]])
    backend = AtroposBackend(config, small_policy, tmp_path / "run", None, api=api)
    backend.sync_weights(small_policy, 5)
    request = RolloutRequest(1, 5, 0, [], 0)
    rolled = backend.result(request)
    (sent,) = api.registered
    assert sent["batch_size"] == 16 and sent["starting_step"] == 5
    assert sent["save_checkpoint_interval"] == 3 and sent["num_steps"] == 4
    assert sent["checkpoint_dir"] == str((tmp_path / "run").resolve())
    assert sent["max_token_len"] == 128
    assert [r.version for r in rolled] == [5, 5]
    assert [r.exact for r in rolled] == [False, True]  # the server's log-probs, the learner's
    segment = rolled[1].group.trajectories[1].segments[0]
    batch = build_batch(
        [segment.prompt_ids], [segment.completion_ids], [segment.mask()], small_policy.pad_id
    )
    expected = frozen_logprobs(small_policy.model, batch, 1.0)[0].tolist()
    assert segment.logprobs == pytest.approx(expected, abs=1e-6)
    assert rolled[0].reward_stats.count == 2
    assert backend.metrics()["atropos/batches"] == 1.0
    api.batches = [[scored_group()]]
    backend.result(RolloutRequest(2, 6, 0, [], 0))
    assert len(api.registered) == 1


def test_no_batch_in_time_stops_the_run_saying_why(tmp_path, small_policy, monkeypatch):
    monkeypatch.setattr("honed.distributed.atropos.POLL_S", 0.0)
    config = atropos_config(tmp_path, "distributed.batch_timeout_s=0.05")
    backend = AtroposBackend(config, small_policy, tmp_path, None, api=FakeAPI([]))
    with pytest.raises(HonedError, match=r"no batch from the Atropos API .* in 0\.05 s"):
        backend.result(RolloutRequest(1, 0, 0, [], 0))


def test_the_config_and_the_backend_refuse_what_atropos_cannot_do(
    tmp_path, small_policy, monkeypatch
):
    with pytest.raises(HonedError, match="go together"):
        small_config(tmp_path, "distributed.backend=atropos")
    with pytest.raises(HonedError, match="go together"):
        small_config(tmp_path, "distributed.api_url=http://127.0.0.1:8000")
    with pytest.raises(HonedError, match="max_batches_offpolicy"):
        atropos_config(tmp_path, "distributed.max_staleness=1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(HonedError, match="one learner process"):
        AtroposBackend(atropos_config(tmp_path), small_policy, tmp_path, None, api=FakeAPI([]))


def _gradient(policy: Policy, sequences: list[TrainSequence]) -> torch.Tensor:
    model = copy.deepcopy(policy.model)
    clone = copy.copy(policy)
    clone.model = model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    settings = TrainerConfig(max_completion_length=4, max_grad_norm=None, micro_batch_size=2)
    PolicyUpdate(clone, optimizer, schedule, settings).step(sequences)
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_the_update_trains_each_token_with_its_fixed_advantage(small_policy):
    """A sequence whose fixed advantages are its scalar one everywhere trains as before (in a
    micro-batch with sequences without any); changing one token's changes the gradient."""
    prompt = [1, 10, 11]

    def sequence(advantage: float, tokens: list[float] | None = None) -> TrainSequence:
        return TrainSequence(
            prompt, [12, 13, 14], [1, 1, 1], [0.0] * 3, advantage, False, 0, tokens
        )

    plain = [sequence(0.5), sequence(-0.5), sequence(1.0)]
    fixed = [sequence(0.5, [0.5] * 3), sequence(-0.5), sequence(1.0, [1.0] * 3)]
    varied = [sequence(0.5, [0.5, 0.0, 0.5]), sequence(-0.5), sequence(1.0, [1.0] * 3)]
    reference = _gradient(small_policy, plain)
    assert torch.allclose(_gradient(small_policy, fixed), reference, atol=1e-7, rtol=0)
    assert not torch.allclose(_gradient(small_policy, varied), reference, atol=1e-5, rtol=0)


def test_the_dry_run_says_where_groups_come_from_and_weights_go(tmp_path):
    config = atropos_config(
        tmp_path,
        "distributed.server.base_url=http://127.0.0.1:30000/v1",
        "distributed.server.model=m",
    )
    rows = dict(training_plan(config))
    assert rows["rollouts on"] == (
        "Atropos environments, pulled from the trajectory API at http://127.0.0.1:9; weights "
        "to http://127.0.0.1:30000/v1 (reload)"
    )
