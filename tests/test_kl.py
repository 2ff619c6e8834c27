"""The KL estimators' gradients are what docs/kl.md says, checked by exact enumeration, and
one real update with β > 0 and nothing else to learn moves the policy towards the reference."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from honed.config import TrainerConfig
from honed.models.batching import make_batch
from honed.models.policy import PolicySampler, SamplingParams
from honed.rl.loss import clipped_surrogate, grpo_loss, kl_penalty, kl_reward_penalty
from honed.rl.prepare import TrainSequence, prepare, reward_penalties
from honed.rl.update import PolicyUpdate
from honed.types import Group, Segment, Trajectory

VOCAB = 5
BETA = 0.3


def _one_position() -> tuple[torch.Tensor, torch.Tensor]:
    """Free logits θ of a policy over 5 tokens at one position, and a reference's log-probs."""
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(VOCAB, generator=gen, dtype=torch.float64)
    ref = F.log_softmax(torch.randn(VOCAB, generator=gen, dtype=torch.float64), -1)
    return theta, ref


def _expected_gradient(theta: torch.Tensor, per_token_loss) -> torch.Tensor:
    """Σ_y π(y) ∇_θ loss(y): the gradient a loss gives in expectation over tokens sampled from
    π, with the sampling itself not differentiated (as in training)."""
    pi = F.softmax(theta, -1)
    total = torch.zeros_like(theta)
    for y in range(VOCAB):
        th = theta.clone().requires_grad_(True)
        logp = F.log_softmax(th, -1)[y].reshape(1, 1)
        (grad,) = torch.autograd.grad(per_token_loss(logp, y).sum(), th)
        total += pi[y] * grad
    return total


def _reverse_kl_gradient(theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """∇_θ KL(π ‖ π_ref) for π = softmax(θ): π ⊙ (r − KL) with r = log π − log π_ref."""
    logp = F.log_softmax(theta, -1)
    pi, r = logp.exp(), logp - ref
    return pi * (r - (pi * r).sum())


def _forward_kl_gradient(theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """∇_θ KL(π_ref ‖ π) = π − π_ref."""
    return F.softmax(theta, -1) - ref.exp()


@pytest.mark.parametrize(
    ("estimator", "divergence"),
    [("k1", None), ("k2", _reverse_kl_gradient), ("k3", _forward_kl_gradient)],
)
def test_each_loss_estimator_has_the_gradient_the_docs_name(estimator, divergence):
    theta, ref = _one_position()
    expected = _expected_gradient(
        theta, lambda logp, y: kl_penalty(logp, ref[y].reshape(1, 1), estimator)
    )
    analytic = (
        torch.zeros(VOCAB, dtype=torch.float64) if divergence is None else divergence(theta, ref)
    )
    assert float(analytic.abs().max()) > 1e-2 or divergence is None  # a real check, not 0 = 0
    assert torch.allclose(expected, analytic, atol=1e-6, rtol=0)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_bias_corrected_kl_has_the_gradient_of_the_reverse_kl(estimator):
    """`use_bias_correction_kl` (TRL's default) multiplies the KL term by ρ = π_θ / π_old with
    its gradient: on-policy, E_{y∼π_old}[∇(ρ·k)] = ∇ E_{y∼π}[k] = ∇ KL(π ‖ π_ref) for k1 and k3,
    whose values average to that KL; without it k3's gradient is that of KL(π_ref ‖ π)."""
    theta, ref = _one_position()
    one, zero = torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)

    def corrected(logp, y):
        return grpo_loss(
            logp, logp.detach(), zero, one, epsilon_low=0.2, epsilon_high=0.2,
            ref_logp=ref[y].reshape(1, 1), beta=BETA, kl_estimator=estimator,
            kl_bias_correction=True,
        ).loss  # fmt: skip

    expected = _expected_gradient(theta, corrected)
    reverse = BETA * _reverse_kl_gradient(theta, ref)
    assert torch.allclose(expected, reverse, atol=1e-6, rtol=0)
    assert not torch.allclose(reverse, BETA * _forward_kl_gradient(theta, ref), atol=1e-3)


def test_bias_correction_leaves_the_kl_value_alone_at_ratio_one():
    """On the first iteration ρ = 1, so the logged KL is the plain estimate."""
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    args = (logp, logp, torch.zeros(1, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64))
    plain = grpo_loss(*args, epsilon_low=0.2, epsilon_high=0.2, ref_logp=ref, beta=BETA)
    fixed = grpo_loss(
        *args, epsilon_low=0.2, epsilon_high=0.2, ref_logp=ref, beta=BETA, kl_bias_correction=True
    )
    assert torch.equal(plain.kl, fixed.kl)
    assert float(fixed.loss) == pytest.approx(BETA * float(kl_penalty(logp, ref, "k3").sum()))


def test_estimator_values_and_the_unbiased_ones_expectations():
    """As numbers: k1 = r, k2 = r²/2, k3 = e^(−r) + r − 1; k1 and k3 average to KL(π ‖ π_ref)
    over tokens drawn from π (which is what the logged `kl` estimates)."""
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    r = logp - ref
    assert torch.allclose(kl_penalty(logp, ref, "k1"), r)
    assert torch.allclose(kl_penalty(logp, ref, "k2"), 0.5 * r**2)
    assert torch.allclose(kl_penalty(logp, ref, "k3"), torch.exp(-r) + r - 1)
    theta, ref_all = _one_position()
    logp_all = F.log_softmax(theta, -1)
    pi = logp_all.exp()
    kl = float((pi * (logp_all - ref_all)).sum())
    for estimator in ("k1", "k3"):
        values = kl_penalty(logp_all[None], ref_all[None], estimator)[0]
        assert float((pi * values).sum()) == pytest.approx(kl, abs=1e-12)


def test_kl_in_reward_gives_the_gradient_of_the_reverse_kl():
    """The reward penalty β·k1 as a (negative) advantage in the clipped surrogate at ratio 1:
    in expectation the loss's gradient is β ∇ KL(π ‖ π_ref), the score-function term that k1
    lacks as a loss."""
    theta, ref = _one_position()
    mask = torch.ones(1, 1, dtype=torch.float64)

    def surrogate(logp, y):
        advantage = -kl_reward_penalty(logp, ref[y].reshape(1, 1), mask, BETA)
        return clipped_surrogate(logp, logp.detach(), advantage, 0.2, 0.2).per_token_loss

    expected = _expected_gradient(theta, surrogate)
    assert torch.allclose(expected, BETA * _reverse_kl_gradient(theta, ref), atol=1e-6, rtol=0)


def test_the_reward_penalty_sums_each_rows_trained_tokens_and_carries_no_gradient():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    penalty = kl_reward_penalty(logp, ref, mask, 0.5)
    assert penalty.tolist() == pytest.approx([0.5 * (0.5 - 1.0 + 0.0), 0.5 * (0.5 + 0.5)])
    assert not penalty.requires_grad


# ----------------------------------------------------------------------------- a real update


def _exact_kl(policy_model, ref_model, seqs, pad_id: int) -> tuple[float, float]:
    """Mean over the completions' positions of the exact KL(π ‖ π_ref) and KL(π_ref ‖ π) of the
    next-token distributions (summed over the whole vocabulary)."""
    batch = make_batch(
        [s.prompt_ids for s in seqs],
        [s.completion_ids for s in seqs],
        [s.mask for s in seqs],
        pad_id,
    )
    width = batch.completion_width

    def logits(model):
        with torch.no_grad():
            out = model(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
            ).logits
        return F.log_softmax(out[:, -width - 1 : -1].double(), -1)

    lp, lq = logits(policy_model), logits(ref_model)
    mask = batch.completion_mask.double()
    reverse = ((lp.exp() * (lp - lq)).sum(-1) * mask).sum() / mask.sum()
    forward = ((lq.exp() * (lq - lp)).sum(-1) * mask).sum() / mask.sum()
    return float(reverse), float(forward)


def _drifted(small_policy):
    """A copy of the policy moved away from the original, which serves as the reference."""
    policy = copy.copy(small_policy)
    policy.model = copy.deepcopy(small_policy.model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return policy, small_policy.model


def _samples(policy, prompts: list[str], n: int):
    sampler = PolicySampler(policy, SamplingParams(1.0, 1.0, 6))
    return sampler.generate([p for p in prompts for _ in range(n)], list(range(len(prompts) * n)))


def _update(policy, ref, **cfg) -> PolicyUpdate:
    opt = torch.optim.SGD(policy.model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    config = TrainerConfig(max_completion_length=6, max_grad_norm=None, beta=BETA, **cfg)
    return PolicyUpdate(policy, opt, sched, config, reference=ref)


@pytest.mark.parametrize(("estimator", "which"), [("k2", 0), ("k3", 1)])
def test_with_zero_advantages_a_step_moves_the_policy_towards_the_reference(
    small_policy, estimator, which
):
    policy, ref = _drifted(small_policy)
    samples = _samples(policy, ["1+2=", "7+5=", "3+3=", "9+0="], 2)
    seqs = [
        TrainSequence(s.prompt_ids, s.completion_ids, [1] * len(s.completion_ids), s.logprobs, 0.0)
        for s in samples
    ]
    before = _exact_kl(policy.model, ref, seqs, policy.pad_id)
    stats = _update(policy, ref, kl_estimator=estimator).step(seqs)
    after = _exact_kl(policy.model, ref, seqs, policy.pad_id)
    assert stats["kl"] > 0
    # the divergence this estimator's gradient descends, and the other one too
    assert after[which] < before[which] and after[1 - which] < before[1 - which]


def test_kl_in_reward_trains_towards_the_reference_when_the_task_reward_is_flat(small_policy):
    policy, ref = _drifted(small_policy)
    prompts = ["1+2=", "7+5=", "3+3=", "9+0="]
    samples = _samples(policy, prompts, 8)
    groups = [
        Group(
            "env",
            prompt,
            [
                Trajectory([Segment(s.prompt_ids, s.completion_ids, s.logprobs)], reward=0.0)
                for s in samples[8 * i : 8 * i + 8]
            ],
        )
        for i, prompt in enumerate(prompts)
    ]
    update = _update(policy, ref, kl_in_reward=True)
    penalties = reward_penalties(update.policy, update.reference, groups, update.settings)
    # every group's task reward is flat: only the penalties spread it, so nothing is filtered
    prepared = prepare(groups, update.settings, penalties=penalties)
    assert prepared.metrics["groups/filtered"] == 0
    seqs = prepared.sequences
    before = _exact_kl(policy.model, ref, seqs, policy.pad_id)
    stats = update.step(seqs)
    after = _exact_kl(policy.model, ref, seqs, policy.pad_id)
    assert stats["kl"] == 0.0  # no KL term in the loss in this mode
    assert after[0] < before[0]
    # and without the penalties the same groups have nothing to learn
    assert prepare(groups, update.settings).metrics["groups/filtered"] == len(groups)
