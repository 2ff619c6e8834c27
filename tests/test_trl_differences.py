"""Where honed's objective and defaults differ from TRL's `GRPOTrainer` (1.16), each pinned by a
hand-computed value, so that a change to any of them is a decision (README, "Where honed differs
from TRL"), not an accident."""

from __future__ import annotations

import math

import pytest
import torch

from honed.config import Config, TrainerConfig
from honed.rl.loss import grpo_loss, kl_penalty, token_weights, truncated_importance_weights


def test_defaults_that_are_honeds_own():
    """TRL 1.16: max_completion_length 512, seed 42, use_bias_correction_kl true, loss_type
    dapo, beta 0. honed: 256, 0, false (k3's classic gradient; docs/kl.md), dapo, 0."""
    trainer = TrainerConfig()
    assert trainer.max_completion_length == 256
    assert Config().seed == 0
    assert trainer.use_bias_correction_kl is False
    assert (trainer.loss_type, trainer.beta) == ("dapo", 0.0)


def test_the_importance_weight_multiplies_the_kl_term_too():
    """TRL weighs only the policy term by its vLLM importance ratio; honed multiplies the whole
    per-token loss, KL included, by min(π_old / μ, cap). One token, A = 0 (so the surrogate is
    0), ρ = 1, π_old / μ = e^0.5 (under the cap 2), β = 0.1:
    loss = e^0.5 · 0.1 · k3(r = log π − log π_ref = 0.4)."""
    logp = torch.tensor([[-1.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.4]], dtype=torch.float64)
    behaviour = torch.tensor([[-1.5]], dtype=torch.float64)
    out = grpo_loss(
        logp, logp, torch.zeros(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
        epsilon_low=0.2, epsilon_high=0.2, ref_logp=ref, beta=0.1, behaviour_logp=behaviour,
        off_policy=torch.ones(1, 1, dtype=torch.bool), importance_sampling_cap=2.0,
    )  # fmt: skip
    k3 = math.exp(-0.4) + 0.4 - 1
    assert float(out.loss) == pytest.approx(math.exp(0.5) * 0.1 * k3, rel=1e-12)


def test_server_tokens_are_truncated_per_token_not_masked_per_sequence():
    """TRL's default correction for vLLM rollouts is `sequence_mask` with cap 3: a sequence whose
    summed log-ratio exceeds log 3 loses its whole loss. honed truncates each off-policy token's
    weight at `importance_sampling_cap` (2): here one token at e^2 becomes 2 and its neighbours,
    at e^0.5 and e^-1, keep their weights, though the sequence's product e^1.5 is over 3."""
    proximal = torch.tensor([[0.0, 0.0, 0.0]], dtype=torch.float64)
    behaviour = torch.tensor([[-2.0, -0.5, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    weights, capped = truncated_importance_weights(proximal, behaviour, mask, cap=2.0)
    assert weights.tolist()[0] == pytest.approx([2.0, math.exp(0.5), math.exp(-1.0)])
    assert capped.tolist() == [[True, False, False]]


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        # two sequences carry tokens (N = 2), the fully masked one does not count (TRL: N = 3)
        ("grpo", [[1 / (2 * 2)] * 2, [0.0, 0.0], [1 / (1 * 2)]]),
        # N · max_completion_length with N = 2 and L = 4: 1/8 (TRL: 1/12)
        ("dr_grpo", [[1 / 8] * 2, [0.0, 0.0], [1 / 8]]),
        # the optimizer step's 3 trained tokens (TRL's bnpo: the micro-batch's)
        ("bnpo", [[1 / 3] * 2, [0.0, 0.0], [1 / 3]]),
        ("dapo", [[1 / 3] * 2, [0.0, 0.0], [1 / 3]]),
    ],
)
def test_fully_masked_sequences_do_not_count_in_the_normaliser(loss_type, expected):
    """A completion masked out entirely (e.g. `mask_truncated_completions`) adds no sequence to
    grpo's mean nor to dr_grpo's N · max_completion_length, which is therefore the number of
    sequences with a trained token times the limit: constant across micro-batches of a step,
    not across steps."""
    masks = [torch.ones(2), torch.zeros(2), torch.ones(1)]
    weights = token_weights(masks, loss_type, max_completion_length=4)
    assert [w.tolist() for w in weights] == [pytest.approx(e) for e in expected]


def test_bias_correction_is_refused_where_the_loss_has_no_kl_term():
    with pytest.raises(ValueError, match="use_bias_correction_kl"):
        TrainerConfig(beta=0.1, kl_in_reward=True, use_bias_correction_kl=True)


def test_bias_correction_multiplies_the_kl_by_the_ratio_off_the_first_iteration():
    """With ρ = e^0.3 (a second iteration), the KL term is ρ · k3, as in TRL."""
    logp = torch.tensor([[-1.0]], dtype=torch.float64)
    old = torch.tensor([[-1.3]], dtype=torch.float64)
    ref = torch.tensor([[-1.4]], dtype=torch.float64)
    out = grpo_loss(
        logp, old, torch.zeros(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
        epsilon_low=0.2, epsilon_high=0.2, ref_logp=ref, beta=1.0, kl_bias_correction=True,
    )  # fmt: skip
    assert float(out.kl) == pytest.approx(math.exp(0.3) * float(kl_penalty(logp, ref, "k3")))
