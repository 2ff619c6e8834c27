"""The classic GRPO bugs: advantages across groups, micro-batch-dependent normalisation, an
on-policy ratio that is not 1, wrong clipping, a KL that is not zero at the reference."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from honed.config import TrainerConfig
from honed.models.batching import make_batch
from honed.models.policy import PolicySampler, SamplingParams
from honed.models.scoring import score
from honed.rl.advantages import compute_advantages, group_units
from honed.rl.loss import LOSS_TYPES, clipped_surrogate, kl_penalty, token_weights
from honed.rl.prepare import TrainSequence, prepare, zero_spread
from honed.rl.update import PolicyUpdate
from honed.types import Group, Segment, Trajectory


def _traj(reward: float, seg_rewards: list[float | None] | None = None) -> Trajectory:
    segs = [Segment([1, 5], [6, 2], [-0.5, -0.1], reward=r) for r in (seg_rewards or [None])]
    return Trajectory(segments=segs, reward=reward)


def _group(rewards: list[float], key: str = "k") -> Group:
    return Group("env", key, [_traj(r) for r in rewards])


# ----------------------------------------------------------------------------- advantages


def test_advantages_are_computed_within_each_group_not_across_the_batch():
    easy = [1.0, 1.0, 1.0, 0.0]
    hard = [0.0, 0.0, 0.0, 1.0]
    adv, stds = compute_advantages([easy, hard], "group")
    # Each group is centred on its own mean: the easy group's failure is negative and the hard
    # group's success positive, whatever the other group holds.
    for a in adv:
        assert sum(a) == pytest.approx(0.0, abs=1e-12)
    std = torch.tensor(easy).std().item()
    assert adv[0][3] == pytest.approx((0.0 - 0.75) / (std + 1e-4))
    assert adv[1][3] == pytest.approx((1.0 - 0.25) / (std + 1e-4))
    # Batch centring would make the easy group's successes and the hard one's failures equal.
    assert adv[0][0] > 0 > adv[1][0]
    assert stds[0] == pytest.approx(std)


def test_scale_rewards_none_only_centres_and_batch_uses_the_batch_std():
    groups = [[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 6.0]]
    none, _ = compute_advantages(groups, "none")
    assert none[0] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert none[1] == pytest.approx([-1.0, -1.0, -1.0, 3.0])
    batch, _ = compute_advantages(groups, "batch")
    std = torch.tensor(groups[0] + groups[1]).std().item()
    assert batch[1][3] == pytest.approx(3.0 / (std + 1e-4))
    with pytest.raises(ValueError, match="scale_rewards"):
        compute_advantages(groups, "whatever")


def test_segment_rewards_make_every_segment_of_the_group_a_unit():
    group = Group("memory", "inst", [_traj(0.5, [1.0, 0.0]), _traj(0.5, [0.0, 0.0])])
    units = group_units(group)
    assert units.rewards == [1.0, 0.0, 0.0, 0.0]
    assert units.members == [[(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)]]
    plain = Group("env", "k", [_traj(1.0, [None, None]), _traj(0.0, [None, None])])
    assert group_units(plain).rewards == [1.0, 0.0]
    assert group_units(plain).members == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    # once any segment carries its own reward, a segment without one takes its trajectory's
    mixed = Group("memory", "inst", [_traj(0.7, [1.0, None]), _traj(0.2, [None, 0.0])])
    assert group_units(mixed).rewards == [1.0, 0.7, 0.2, 0.0]


def test_zero_spread_groups_are_filtered_with_a_tolerance():
    cfg = TrainerConfig(zero_std_tolerance=1e-6)
    flat = _group([1.0, 1.0, 1.0, 1.0], "flat")
    noisy_flat = _group([0.5, 0.5 + 1e-9, 0.5, 0.5], "fp-noise")
    useful = _group([1.0, 0.0, 1.0, 0.0], "useful")
    prepared = prepare([flat, noisy_flat, useful], cfg)
    assert prepared.zero_std == [True, True, False]
    assert [g.item_key for g in prepared.kept_groups] == ["useful"]
    assert len(prepared.sequences) == 4
    assert prepared.metrics["frac_reward_zero_std"] == pytest.approx(2 / 3)
    kept = prepare([flat, useful], cfg.model_copy(update={"filter_zero_std": False}))
    assert len(kept.sequences) == 8


def test_truncated_completions_can_be_masked_out_of_the_loss():
    group = _group([1.0, 0.0])
    group.trajectories[1].segments[0].truncated = True
    cfg = TrainerConfig(mask_truncated_completions=True)
    seqs = prepare([group], cfg).sequences
    assert seqs[0].mask == [1, 1] and seqs[1].mask == [0, 0]


def test_soft_overlong_penalty_lowers_long_completions_rewards():
    from honed.rewards.units import overlong_penalty

    assert overlong_penalty(10, 20, 5, 1.0) == 0.0
    assert overlong_penalty(15, 20, 5, 1.0) == 0.0
    assert overlong_penalty(18, 20, 5, 1.0) == pytest.approx(-0.6)
    assert overlong_penalty(20, 20, 5, 0.5) == pytest.approx(-0.5)
    assert overlong_penalty(20, 20, 0, 1.0) == 0.0


# ----------------------------------------------------------------------------- the surrogate


def test_clipping_by_hand_with_positive_and_negative_advantages():
    # ratios e^{log π - log π_old}: 0.5, 1.0, 1.5 for each of two sequences
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]]))
    adv = torch.tensor([2.0, -1.0])
    out = clipped_surrogate(logp, old, adv, epsilon_low=0.2, epsilon_high=0.28)
    # A > 0: min(ρA, clip(ρ)A) = [min(1, 1.6), 2, min(3, 2.56)] = [1, 2, 2.56]
    # A < 0: min(ρA, clip(ρ)A) = [min(-0.5, -0.8), -1, min(-1.5, -1.28)] = [-0.8, -1, -1.5]
    expected = -torch.tensor([[1.0, 2.0, 2.56], [-0.8, -1.0, -1.5]])
    assert torch.allclose(out.per_token_loss, expected, atol=1e-6)
    # clipping took the gradient away only where the clipped branch won
    assert out.high_clipped.tolist() == [[False, False, True], [False, False, False]]
    assert out.low_clipped.tolist() == [[False, False, False], [True, False, False]]
    logp = logp.clone().requires_grad_(True)
    clipped_surrogate(logp, old, adv, 0.2, 0.28).per_token_loss.sum().backward()
    grad = logp.grad
    assert grad[0, 2] == 0 and grad[1, 0] == 0  # clipped: no gradient
    assert grad[0, 0] == pytest.approx(-2.0 * 0.5)  # -A·ρ where the ratio is inside
    assert grad[1, 2] == pytest.approx(1.0 * 1.5)  # A < 0 above 1+ε is never clipped


def test_kl_estimators_are_zero_when_the_policy_is_the_reference():
    logp = torch.log(torch.tensor([[0.1, 0.7, 0.2]]))
    for est in ("k1", "k2", "k3"):
        assert torch.equal(kl_penalty(logp, logp.clone(), est), torch.zeros_like(logp))
    other = logp + torch.tensor([[0.3, -0.2, 0.1]])
    assert (kl_penalty(other, logp, "k2") > 0).all() and (kl_penalty(other, logp, "k3") > 0).all()
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(logp, logp, "k4")


# ----------------------------------------------------------------------------- normalisation


def _sequences(small_policy, n: int = 8, group: int = 1) -> list[TrainSequence]:
    """n sequences; `group` > 1 gives runs of completions of one prompt (prefix sharing)."""
    sampler = PolicySampler(small_policy, SamplingParams(1.0, 1.0, 6))
    prompts = [f"{i // group}+{i // group + 1}=" for i in range(n)]
    samples = sampler.generate(prompts, list(range(n)))
    adv = torch.linspace(-1.5, 1.5, n).tolist()
    return [
        TrainSequence(s.prompt_ids, s.completion_ids, [1] * len(s.completion_ids), s.logprobs, a)
        for s, a in zip(samples, adv, strict=True)
    ]


def _grad(policy, seqs, **cfg) -> torch.Tensor:
    model = copy.deepcopy(policy.model)
    clone = copy.copy(policy)
    clone.model = model
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    config = TrainerConfig(max_completion_length=6, max_grad_norm=None, **cfg)
    PolicyUpdate(clone, opt, sched, config).step(seqs)
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_gradient_is_the_same_with_one_micro_batch_or_four(small_policy, loss_type, group):
    seqs = _sequences(small_policy, group=group)
    assert len({len(s.completion_ids) for s in seqs}) > 1, "lengths must differ to catch bugs"
    whole = _grad(small_policy, seqs, loss_type=loss_type, micro_batch_size=None)
    # micro-batches of 3 cut groups of 4 apart: shared prompts span micro-batches
    split = _grad(small_policy, seqs, loss_type=loss_type, micro_batch_size=2 if group == 1 else 3)
    assert whole.abs().max() > 0
    assert torch.allclose(whole, split, atol=1e-6, rtol=0)


def test_loss_type_weights_match_their_definitions():
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 1.0]), torch.zeros(3)]
    grpo = token_weights(masks, "grpo", 10)
    assert grpo[0].tolist() == pytest.approx([1 / 4, 1 / 4, 0])  # 1 / (|o_1| · N=2)
    assert grpo[1].tolist() == pytest.approx([1 / 6] * 3)
    assert grpo[2].tolist() == [0, 0, 0]
    for name in ("dapo", "bnpo"):
        assert token_weights(masks, name, 10)[1].tolist() == pytest.approx([1 / 5] * 3)
    assert token_weights(masks, "dr_grpo", 10)[0].tolist() == pytest.approx([1 / 20, 1 / 20, 0])


def test_on_policy_ratio_is_exactly_one_and_nothing_is_clipped(small_policy):
    seqs = _sequences(small_policy)
    opt = torch.optim.SGD(small_policy.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cfg = TrainerConfig(max_completion_length=6, epsilon=0.0, epsilon_high=0.0)
    stats = PolicyUpdate(small_policy, opt, sched, cfg).step(seqs)
    # even with a zero-width clip range nothing is clipped: the ratio is 1 in value
    assert stats["ratio/mean"] == 1.0
    assert stats["clip_ratio/region_mean"] == 0.0


def test_behaviour_logprobs_from_sampling_match_a_fresh_forward_pass(small_policy):
    seqs = _sequences(small_policy)
    batch = make_batch(
        [s.prompt_ids for s in seqs],
        [s.completion_ids for s in seqs],
        [s.mask for s in seqs],
        small_policy.pad_id,
    )
    with torch.no_grad():
        logp = score(small_policy.model, batch).logprobs
    for row, s in enumerate(seqs):
        n = len(s.completion_ids)
        assert torch.allclose(logp[row, :n], torch.tensor(s.old_logprobs), atol=1e-4)


def test_kl_term_is_zero_at_the_reference_and_penalises_drift(small_policy):
    seqs = _sequences(small_policy)
    ref = copy.deepcopy(small_policy.model)
    opt = torch.optim.SGD(small_policy.model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cfg = TrainerConfig(max_completion_length=6, beta=0.1, kl_estimator="k3")
    update = PolicyUpdate(small_policy, opt, sched, cfg, reference=ref)
    first = update.step(seqs)
    assert first["kl"] == 0.0
    second = update.step(seqs)
    assert second["kl"] > 0.0 and math.isfinite(second["kl"])


# ----------------------------------------------------------------------------- prefix sharing


def test_prefix_sharing_scores_and_gradients_match_the_plain_forward(small_policy):
    from honed.models.batching import PrefixBatch, build_batch

    sampler = PolicySampler(small_policy, SamplingParams(1.0, 1.0, 6))
    prompts = [p for p in ("12+3=", "7-1=", "100+23=") for _ in range(4)]
    samples = sampler.generate(prompts, list(range(len(prompts))))
    assert len({len(s.completion_ids) for s in samples}) > 1, "lengths must differ"
    args = (
        [s.prompt_ids for s in samples],
        [s.completion_ids for s in samples],
        [[1] * len(s.completion_ids) for s in samples],
        small_policy.pad_id,
    )
    shared, plain = build_batch(*args), make_batch(*args)
    assert isinstance(shared, PrefixBatch) and shared.prompt_ids.shape[0] == 3
    assert torch.equal(shared.completion_mask, plain.completion_mask)
    adv = torch.linspace(-1.0, 1.0, len(samples))[:, None]

    def run(batch):
        model = copy.deepcopy(small_policy.model).train()
        scores = score(model, batch, temperature=0.7, with_entropy=True)
        logp, entropy = scores.logprobs, scores.entropy
        mask = batch.completion_mask.float()
        (logp * adv * mask).sum().backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters()])
        return logp.detach() * mask, entropy * mask, grad

    for a, b in zip(run(shared), run(plain), strict=True):
        # the same sums in another order: equal up to float32 rounding of the gradient's scale
        assert torch.allclose(a, b, atol=1e-6 * max(1.0, float(b.abs().max())), rtol=0)


def test_prefix_sharing_is_used_only_when_prompts_repeat(small_policy):
    from honed.models.batching import PrefixBatch, TokenBatch, build_batch

    ids = [[1, 5, 6], [1, 7], [1, 5, 6]]
    comps = [[8, 2], [9], [10, 11, 2]]
    masks = [[1] * len(c) for c in comps]
    assert isinstance(build_batch(ids, comps, masks, 0), PrefixBatch)
    assert isinstance(build_batch(ids[:2], comps[:2], masks[:2], 0), TokenBatch)


# ----------------------------------------------------------------------------- π_old and clipping


def _old_logprobs(policy, seqs) -> torch.Tensor:
    batch = make_batch(
        [s.prompt_ids for s in seqs],
        [s.completion_ids for s in seqs],
        [s.mask for s in seqs],
        policy.pad_id,
    )
    with torch.no_grad():
        logp = score(policy.model, batch).logprobs
    return logp, batch


def test_the_second_iteration_descends_the_clipped_objective_against_pi_old(small_policy):
    """num_iterations = 2 by hand: after the first step, the gradient is that of
    −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) with ρ = π_θ / π_old and π_old the policy that
    sampled, written out here independently of rl/loss.py; and clipping really acts."""
    seqs = _sequences(small_policy, n=8)
    lr, eps_low, eps_high = 2.0, 0.1, 0.15
    cfg = {"num_iterations": 2, "epsilon": eps_low, "epsilon_high": eps_high, "loss_type": "dapo"}

    def run(iterations: int):
        policy = copy.copy(small_policy)
        policy.model = copy.deepcopy(small_policy.model)
        opt = torch.optim.SGD(policy.model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        config = TrainerConfig(
            max_completion_length=6, max_grad_norm=None, **{**cfg, "num_iterations": iterations}
        )
        stats = PolicyUpdate(policy, opt, sched, config).step(seqs)
        return policy, stats

    after_one, _ = run(1)
    after_two, stats = run(2)
    old, batch = _old_logprobs(small_policy, seqs)
    # the gradient at the weights after one step, of the clipped objective against π_old
    model = copy.deepcopy(after_one.model)
    logp = score(model, batch).logprobs
    ratio = torch.exp(logp - old)
    adv = torch.tensor([s.advantage for s in seqs])[:, None]
    mask = batch.completion_mask.float()
    objective = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    (-(objective * mask).sum() / mask.sum()).backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()])
    one = torch.cat([p.detach().flatten() for p in after_one.model.parameters()])
    two = torch.cat([p.detach().flatten() for p in after_two.model.parameters()])
    actual = (one - two) / lr
    assert stats["clip_ratio/region_mean"] > 0.05  # the first step moved ratios out of range
    assert torch.allclose(actual, expected, atol=1e-5 * float(expected.abs().max()), rtol=0)
    # and the clip matters: the unclipped surrogate's gradient is another one
    model.zero_grad()
    logp = score(model, batch).logprobs
    (-(torch.exp(logp - old) * adv * mask).sum() / mask.sum()).backward()
    unclipped = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert (unclipped - expected).norm() > 0.05 * expected.norm()


def test_pi_old_is_the_learners_own_forward_not_the_samplers_log_probs(small_policy):
    """With several iterations the ratio's denominator is the learner's log-prob at the start
    of the step: exactly 1 in the first iteration even when the recorded log-probs are off (as
    a bf16 sampler's or a server's are), and nothing is clipped with a zero-width range."""
    seqs = _sequences(small_policy)
    for s in seqs:
        s.old_logprobs = [lp + 2e-3 for lp in s.old_logprobs]
    opt = torch.optim.SGD(small_policy.model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cfg = TrainerConfig(max_completion_length=6, epsilon=0.0, epsilon_high=0.0, num_iterations=3)
    stats = PolicyUpdate(small_policy, opt, sched, cfg).step(seqs)
    assert stats["iterations"] == 3
    assert stats["ratio/mean"] == 1.0
    assert stats["clip_ratio/region_mean"] == 0.0


def test_zero_spread_is_judged_on_the_signal_the_advantages_use():
    """A normaliser that clips can flatten a group whose raw rewards spread: dynamic sampling's
    judgement (`zero_spread`) and the filter in `prepare` agree on it."""
    groups = [_group([0.0, 1.0, 0.0, 1.0], "a"), _group([5.0, 6.0, 7.0, 8.0], "b")]

    def clip_high(env, rewards):
        return [min(r, 3.0) for r in rewards]

    cfg = TrainerConfig()
    assert zero_spread(groups, cfg) == [False, False]
    assert zero_spread(groups, cfg, clip_high) == [False, True]
    prepared = prepare(groups, cfg, clip_high)
    assert prepared.zero_std == [False, True] and prepared.metrics["groups/trained"] == 1


# ----------------------------------------------------------------------------- dropout


def _dropout_policy():
    """A small GPT-2 with 10 % dropout everywhere (as its config says by default)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from honed.models.policy import Policy
    from honed.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    config = GPT2Config(
        vocab_size=len(tok),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return Policy(GPT2LMHeadModel(config), tok)


def test_pi_old_is_scored_without_dropout_and_disable_dropout_makes_the_ratio_one():
    from honed.models.dropout import disable_dropout, dropout_active

    policy = _dropout_policy()
    assert dropout_active(policy.model)
    seqs = _sequences(policy)
    policy.model.eval()
    eval_logp, _ = _old_logprobs(policy, seqs)  # dropout off

    def update(p, **cfg):
        opt = torch.optim.SGD(p.model.parameters(), lr=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        config = TrainerConfig(max_completion_length=6, num_iterations=2, **cfg)
        return PolicyUpdate(p, opt, sched, config)

    with_dropout = update(policy)
    seen = {}
    real = with_dropout._one_step

    def keep_cache(batches, cache):
        out = real(batches, cache)
        seen.update(cache)
        return out

    with_dropout._one_step = keep_cache
    stats = with_dropout.step(seqs)
    # π_old is the eval-mode (dropout off) log-prob; the update's forward keeps dropout, so
    # the ratio is not 1
    old = seen[0].old
    mask = seen[0].batch.completion_mask.bool()
    assert torch.allclose(old[mask], eval_logp[mask], atol=1e-5)
    assert stats["ratio/mean"] != 1.0
    disable_dropout(policy.model)
    assert not dropout_active(policy.model) and policy.model.config.resid_pdrop == 0.0
    stats = update(policy, epsilon=0.0, epsilon_high=0.0).step(seqs)
    assert stats["ratio/mean"] == 1.0 and stats["clip_ratio/region_mean"] == 0.0


def test_eval_mode_turns_dropout_off_for_a_block_and_restores_each_models_mode():
    """Sampling, evaluation and π_old / π_ref scoring share `eval_mode`: inside it no model
    drops anything; after it, each is back in the mode it was in, even when the block fails."""
    from honed.models.dropout import eval_mode

    training, frozen = _dropout_policy().model.train(), _dropout_policy().model.eval()
    with eval_mode(training, frozen):
        assert not any(m.training for m in [*training.modules(), *frozen.modules()])
    assert training.training and not frozen.training
    with pytest.raises(RuntimeError, match="inside"), eval_mode(training):
        raise RuntimeError("inside")
    assert all(m.training for m in training.modules())


def test_the_gradient_is_clipped_to_max_grad_norm(small_policy):
    seqs = _sequences(small_policy)
    before = torch.cat([p.detach().flatten().clone() for p in small_policy.model.parameters()])
    opt = torch.optim.SGD(small_policy.model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    cfg = TrainerConfig(max_completion_length=6, max_grad_norm=1e-3)
    stats = PolicyUpdate(small_policy, opt, sched, cfg).step(seqs)
    after = torch.cat([p.detach().flatten() for p in small_policy.model.parameters()])
    assert stats["grad_norm"] > 1e-2  # logged before clipping ...
    # ... and the step taken is the clipped one: lr · max_grad_norm (tied weights count once)
    assert float((after - before).norm()) == pytest.approx(1e-3, rel=1e-3)
