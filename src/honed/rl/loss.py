"""The clipped GRPO surrogate, its KL term, and loss normalisation that ignores micro-batching.

The normaliser of every `loss_type` is fixed for the whole optimizer step *before* the batch is
split: each token gets a weight, and a micro-batch's loss is the weighted sum of its tokens'
losses. Summing micro-batch gradients therefore gives exactly the full-batch gradient, however
the batch is split (the bug class behind most GRPO gradient-accumulation reports).

- `grpo`:    each sequence's token mean, then the mean over sequences (weight 1 / (|o_i| · N)).
- `bnpo`:    token mean over the optimizer step (weight 1 / T): the step's tokens, not the
             micro-batch's, so that the gradient does not depend on `micro_batch_size`; on
             one learner `bnpo` and `dapo` coincide (README, "Where honed differs from TRL").
- `dapo`:    token sum over the step's total tokens (weight 1 / T).
- `dr_grpo`: token sum over a constant, N · max_completion_length (no length bias at all).

Off-policy tokens (sampled by weights some optimizer steps old, or by an inference server whose
numerics differ from the learner's) carry a truncated importance weight
w = min(π_old / μ, C) (`truncated_importance_weights`), where μ is the behaviour policy whose
log-probs the rollout recorded and π_old the learner's policy at the start of the step. The
clipped surrogate then compares π_θ with π_old as usual (the decoupled PPO objective), and w
multiplies every per-token term, KL included, since all of them are expectations over tokens
that μ, not π_old, sampled. Capping w at C bounds the variance a very stale or mismatched token
can add, at the price of a bias towards μ.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import get_args

import torch

from honed.config import KlEstimator, LossType

LOSS_TYPES: tuple[str, ...] = get_args(LossType)


def token_weights(
    masks: list[torch.Tensor], loss_type: str, max_completion_length: int
) -> list[torch.Tensor]:
    """Per-token weights for sequences of one optimizer step (masks: 0/1 per completion token).

    Sequences with no trained token do not count in N.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, not {loss_type!r}")
    counts = [float(m.sum()) for m in masks]
    n_seq = sum(1 for c in counts if c > 0)
    n_tok = sum(counts)
    weights = []
    for m, c in zip(masks, counts, strict=True):
        m = m.to(torch.float64)
        if c == 0:
            weights.append(m * 0)
        elif loss_type == "grpo":
            weights.append(m / (c * n_seq))
        elif loss_type == "dr_grpo":
            weights.append(m / (n_seq * max_completion_length))
        else:
            weights.append(m / n_tok)
    return weights


KL_ESTIMATORS: tuple[str, ...] = get_args(KlEstimator)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL term of the loss, from tokens sampled by π_θ (see `docs/kl.md`).

    With r = log π_θ − log π_ref on a sampled token, the three estimators of Schulman (2020) and
    the gradients they give in expectation over π_θ (the sampling itself is not differentiated):

    - k1 = r: an unbiased *value* of KL(π_θ ‖ π_ref), but its expected gradient is
      E[∇ log π_θ] = 0: in the loss it adds noise and no regularisation. Put it in the reward
      instead (`kl_in_reward`, `kl_reward_penalty`).
    - k2 = r² / 2: expected gradient E[r ∇ log π_θ] = ∇ KL(π_θ ‖ π_ref).
    - k3 = e^(−r) + r − 1: never negative, low variance; expected gradient
      E[(1 − π_ref/π_θ) ∇ log π_θ] = ∇ KL(π_ref ‖ π_θ), the *reverse* divergence.

    All three are zero where the policy equals the reference.
    """
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if estimator == "k3":
        delta = ref_logp - logp
        return torch.exp(delta) - delta - 1
    raise ValueError(f"kl_estimator must be one of {', '.join(KL_ESTIMATORS)}, not {estimator!r}")


def kl_reward_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """β · Σ_t (log π − log π_ref) over each row's trained tokens ([B, C] -> [B]), detached.

    The PPO-RLHF KL penalty: each token's reward is lowered by β·k1 and, with outcome rewards,
    no discount and no critic, a sequence's return is its reward minus this sum; GRPO gives the
    whole sequence that one value before the group baseline. In expectation the policy gradient
    of the penalised reward is −β ∇ KL(π ‖ π_ref): the score-function term that k1 lacks as a
    loss.
    """
    return beta * ((logp - ref_logp).detach() * mask).sum(-1)


@dataclass
class SurrogateOut:
    per_token_loss: torch.Tensor
    ratio: torch.Tensor
    low_clipped: torch.Tensor
    high_clipped: torch.Tensor


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> SurrogateOut:
    """Per-token −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) with ρ = π_θ / π_old.

    `advantages` has one value per sequence ([B]) or one per token ([B, C], when an
    environment fixed them); token tensors are [B, C]. The clip flags mark tokens where
    clipping took the gradient away: ρ < 1−ε_low with A < 0, ρ > 1+ε_high with A > 0.
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    low = (ratio < 1 - epsilon_low) & (adv < 0)
    high = (ratio > 1 + epsilon_high) & (adv > 0)
    return SurrogateOut(per_token, ratio, low, high)


def truncated_importance_weights(
    proximal_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token min(π_old / μ, cap) where `mask` is set, 1 elsewhere; and where it capped.

    Computed in log space and clamped before `exp`, so a padded position or a huge ratio never
    overflows. No gradient flows through the weights.
    """
    log_ratio = (proximal_logp - behaviour_logp).detach().masked_fill(~mask, 0.0)
    weights = torch.exp(log_ratio.clamp(max=math.log(cap)))
    return weights, (log_ratio > math.log(cap)) & mask


@dataclass
class LossOut:
    """One micro-batch's share of the step's loss, and what it was made of (for metrics)."""

    loss: torch.Tensor  # scalar: Σ over tokens of weight · per-token loss
    surrogate: SurrogateOut
    kl: torch.Tensor | None  # [B, C] per-token KL term, when there is a reference
    off_policy: torch.Tensor  # [B, C] tokens that carry an importance weight
    is_weight: torch.Tensor | None  # [B, C] those weights (1 elsewhere)
    capped: torch.Tensor | None  # [B, C] where the cap bound them


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    epsilon_low: float,
    epsilon_high: float,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    kl_bias_correction: bool = False,
    behaviour_logp: torch.Tensor | None = None,
    off_policy: torch.Tensor | None = None,
    importance_sampling_cap: float = 2.0,
) -> LossOut:
    """The whole GRPO objective of one micro-batch: what `honed train` minimises.

        loss = Σ_{i,t} w_{i,t} · IS_{i,t} · ( −min(ρ_{i,t} A_i, clip(ρ_{i,t}, 1−ε_low, 1+ε_high) A_i)
                                             + β · KL_{i,t} )

    with ρ = π_θ / π_old (`logp`, `old_logp`: [B, C]), A the sequence's advantage ([B], or per
    token [B, C] where an environment fixed them), KL the per-token estimator against the
    reference (`kl_penalty`; only when `ref_logp` is given),
    multiplied by the differentiable ratio ρ when `kl_bias_correction` is set (then its expected
    gradient is ∇ KL(π_θ ‖ π_ref) for k1 and k3, see docs/kl.md), IS = min(π_old / μ, cap) on `off_policy` tokens and 1 elsewhere
    (`truncated_importance_weights`, μ = `behaviour_logp`), and w the token weights of
    `token_weights`, which fix the `loss_type`'s normaliser for the whole optimizer step, so
    summing the micro-batches' losses gives the full batch's, however it is split. Padding
    has weight 0.
    """
    surrogate = clipped_surrogate(logp, old_logp, advantages, epsilon_low, epsilon_high)
    per_token = surrogate.per_token_loss
    kl = None
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, kl_estimator)
        if kl_bias_correction:
            kl = kl * surrogate.ratio
        per_token = per_token + beta * kl
    if off_policy is None:
        off_policy = torch.zeros_like(logp, dtype=torch.bool)
    is_weight = capped = None
    if bool(off_policy.any()):
        if behaviour_logp is None:
            raise ValueError("off-policy tokens need the behaviour log-probs")
        is_weight, capped = truncated_importance_weights(
            old_logp, behaviour_logp, off_policy, importance_sampling_cap
        )
        per_token = per_token * is_weight
    loss = (per_token * weights).sum()
    return LossOut(loss, surrogate, kl, off_policy, is_weight, capped)


@dataclass
class StepStats:
    """What an optimizer step's loss was made of, summed over its micro-batches (and over the
    learner processes): token counts and token-weighted sums, which `metrics` turns into
    means. Each micro-batch's `LossOut` adds to it (`add`)."""

    loss: float = 0.0  # the loss itself (the token weights already normalise it)
    low: float = 0.0  # tokens whose gradient the lower clip took away
    high: float = 0.0  # ... and the upper clip
    kl: float = 0.0
    entropy: float = 0.0
    ratio: float = 0.0
    off: float = 0.0  # off-policy tokens (importance-weighted)
    capped: float = 0.0  # off-policy tokens whose weight the cap bound
    is_weight: float = 0.0  # their importance weights
    tokens: float = 0.0  # tokens trained on

    def add(self, out: LossOut, mask: torch.Tensor, entropy: torch.Tensor) -> float:
        """Add one micro-batch: its loss's parts, over the tokens of `mask` ([B, C], float)
        whose entropy is `entropy` ([B, C]); its loss, as a number (read once from the
        device)."""
        surr = out.surrogate
        if out.is_weight is not None and out.capped is not None:
            self.off += float(out.off_policy.sum())
            self.capped += float(out.capped.sum())
            self.is_weight += float((out.is_weight * out.off_policy).sum())
        self.tokens += float(mask.sum())
        loss = out.loss.item()
        self.loss += loss
        self.low += float((surr.low_clipped.float() * mask).sum())
        self.high += float((surr.high_clipped.float() * mask).sum())
        self.ratio += float((surr.ratio.detach() * mask).sum())
        self.entropy += float((entropy * mask).sum())
        if out.kl is not None:
            self.kl += float((out.kl.detach() * mask).sum())
        return loss

    def as_tensor(self, device: torch.device) -> torch.Tensor:
        """The sums as one float64 tensor, to be summed over processes (`from_tensor`)."""
        return torch.tensor(astuple(self), dtype=torch.float64, device=device)

    @classmethod
    def from_tensor(cls, totals: torch.Tensor) -> StepStats:
        return cls(*totals.tolist())

    def metrics(self, grad_norm: float) -> dict[str, float]:
        """The step's metrics: per-token means of the sums, and the gradient's norm."""
        per_tok = max(self.tokens, 1.0)
        off_tok = max(self.off, 1.0)
        return {
            "loss": self.loss,
            "clip_ratio/low_mean": self.low / per_tok,
            "clip_ratio/high_mean": self.high / per_tok,
            "clip_ratio/region_mean": (self.low + self.high) / per_tok,
            "ratio/mean": self.ratio / per_tok,
            "entropy": self.entropy / per_tok,
            "kl": self.kl / per_tok,
            "grad_norm": grad_norm,
            "tokens/trained": self.tokens,
            "is/off_policy_frac": self.off / per_tok,
            "is/capped_frac": self.capped / off_tok,
            "is/weight_mean": self.is_weight / off_tok if self.off else 1.0,
        }
