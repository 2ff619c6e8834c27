"""From scored groups to an optimizer step: advantages, filtering, micro-batched loss.

`prepare` turns groups into training sequences (one per segment, each with its group-relative
advantage), dropping zero-spread groups; `PolicyUpdate.step` runs `num_iterations` optimizer
steps over them, in micro-batches whose losses sum exactly to the full-batch loss.

One reward signal: the rewards that advantages are computed from (`unit_signal`: the units'
rewards, with the overlong penalty, mapped by the environment's normaliser, less the KL
penalty when `kl_in_reward`) are also the ones that decide whether a group has any spread,
both for dynamic sampling and for the zero-spread filter.

One model for π_old: the ratio's denominator is always the learner's own log-prob at the start
of the step (the proximal policy), scored on the very micro-batches the update scores, never
the sampler's recorded log-probs, which come from other kernels (a KV-cached decoder, another
precision, an inference server). With one iteration and no active dropout it is the first
forward's values, so the ratio is exactly 1; with dropout active it is a separate pass with
dropout off. A sequence is *off-policy* when the weights or the engine that sampled it are not
the learner's current ones (asynchronous rollouts, inference servers); its tokens are also
reweighted by the truncated importance weight min(π_old / μ, C) against the recorded behaviour
log-probs μ (`rl/loss.py`).

The update pass itself runs the model in training mode: dropout as the model's config sets it
(0 in most LLM configs; `trainer.disable_dropout` zeroes it for the run). π_old, the
reference and the KL reward penalty are scored with dropout off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace

import torch
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from honed.config import TrainerConfig
from honed.distributed.learner import LearnerGroup
from honed.models.dropout import dropout_active
from honed.models.lora import AdapterFreeReference
from honed.models.policy import Policy
from honed.models.scoring import ScoreBatch, build_batch, score
from honed.rewards.units import group_units, unit_rewards
from honed.rl.advantages import compute_advantages
from honed.rl.loss import grpo_loss, kl_reward_penalty, token_weights
from honed.types import Group, Segment

# One group's KL reward penalties: per trajectory, per segment, β·Σ k1 over its tokens.
Penalties = list[list[float]]
Normalize = Callable[[str, list[float]], list[float]]


# What `_one_step` sums over micro-batches (token-weighted; divided by the token count at the end).
_SUMS = ("loss", "low", "high", "kl", "entropy", "ratio", "off", "capped", "is_weight", "tokens")


@dataclass
class TrainSequence:
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    old_logprobs: list[float]
    advantage: float
    off_policy: bool = False
    group: int = 0  # the index of its group among the step's groups


@dataclass
class Prepared:
    """What one step trains on, and what it learned about the groups on the way."""

    sequences: list[TrainSequence]
    kept_groups: list[Group]
    group_stds: list[float]
    zero_std: list[bool]
    metrics: dict[str, float] = field(default_factory=dict)
    # per group (all of them, kept or not), the advantage of each reward unit
    advantages: list[list[float]] = field(default_factory=list)


def unit_signal(
    group: Group,
    settings: TrainerConfig,
    normalize: Normalize | None = None,
    penalty: Penalties | None = None,
) -> list[float]:
    """The rewards a group's advantages are computed from, one per unit.

    Each unit's reward (with the soft overlong penalty), mapped by `normalize(env, rewards)`,
    less the KL penalty of the unit's segments (`penalty[trajectory][segment]`) when given.
    """
    rewards = unit_rewards(group, settings)
    if normalize is not None:
        rewards = normalize(group.env, rewards)
    if penalty is not None:
        members = group_units(group).members
        rewards = [
            r - sum(penalty[ti][si] for ti, si in unit)
            for r, unit in zip(rewards, members, strict=True)
        ]
    return rewards


def zero_spread(
    groups: list[Group],
    settings: TrainerConfig,
    normalize: Normalize | None = None,
    penalties: Sequence[Penalties | None] | None = None,
) -> list[bool]:
    """Whether each group's signal is (nearly) all equal: zero advantage, nothing to learn.

    Decided on exactly the values `prepare` computes advantages from, with the same test.
    """
    penalties = penalties or [None] * len(groups)
    signals = [
        unit_signal(g, settings, normalize, p) for g, p in zip(groups, penalties, strict=True)
    ]
    _, stds = compute_advantages(signals, "none")
    return [s < settings.zero_std_tolerance for s in stds]


def prepare(
    groups: list[Group],
    settings: TrainerConfig,
    normalize: Normalize | None = None,
    off_policy: Sequence[bool] | None = None,
    penalties: Sequence[Penalties | None] | None = None,
) -> Prepared:
    """Training sequences from groups; `normalize(env, rewards)` maps rewards before advantages;
    `off_policy` (one flag per group, default none) marks groups whose behaviour log-probs are
    not the learner's current ones, to be importance-weighted; `penalties` (one per group) are
    the KL reward penalties of `kl_in_reward`."""
    off_policy = off_policy or [False] * len(groups)
    penalties = penalties or [None] * len(groups)
    signals = [
        unit_signal(g, settings, normalize, p) for g, p in zip(groups, penalties, strict=True)
    ]
    advantages, stds = compute_advantages(signals, settings.scale_rewards)
    zero = [s < settings.zero_std_tolerance for s in stds]
    sequences: list[TrainSequence] = []
    kept: list[Group] = []
    for index, (group, adv, is_zero, off) in enumerate(
        zip(groups, advantages, zero, off_policy, strict=True)
    ):
        if is_zero and settings.filter_zero_std:
            continue
        kept.append(group)
        units = group_units(group)
        for a, members in zip(adv, units.members, strict=True):
            for ti, si in members:
                seg = group.trajectories[ti].segments[si]
                if not seg.completion_ids:
                    continue
                mask = list(seg.mask())
                if settings.mask_truncated_completions and seg.truncated:
                    mask = [0] * len(mask)
                sequences.append(
                    TrainSequence(
                        seg.prompt_ids,
                        seg.completion_ids,
                        mask,
                        seg.logprobs,
                        float(a),
                        off,
                        index,
                    )
                )
    metrics = {
        "frac_reward_zero_std": sum(zero) / len(zero) if zero else 0.0,
        "groups/trained": float(len(kept)),
        "groups/filtered": float(len(groups) - len(kept)),
    }
    return Prepared(sequences, kept, stds, zero, metrics, advantages)


def _pad(
    rows: list[list[float]], width: int, device: torch.device, dtype=torch.float32
) -> torch.Tensor:
    """Rows right-padded with 0 to `width`, built on the CPU and moved to `device` at once."""
    out = torch.zeros((len(rows), width), dtype=dtype, device="cpu")
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.as_tensor(r[:width], dtype=dtype, device="cpu")
    return out.to(device)


@dataclass
class _MicroBatch:
    """What every iteration of a step reuses for one micro-batch: its batch, π_old, π_ref."""

    batch: ScoreBatch
    old: torch.Tensor
    ref: torch.Tensor | None


def _scope(target: torch.nn.Module | AdapterFreeReference) -> AbstractContextManager:
    """The model to score with: `target` itself, or the policy with its adapters off."""
    if isinstance(target, AdapterFreeReference):
        return target.scope()
    return nullcontext(target)


class PolicyUpdate:
    """The GRPO optimizer step: clipped surrogate (+ β·KL), global normaliser, micro-batches."""

    def __init__(
        self,
        policy: Policy,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        settings: TrainerConfig,
        reference: PreTrainedModel | AdapterFreeReference | None = None,
        importance_sampling_cap: float = 2.0,
        learners: LearnerGroup | None = None,
        sharded: bool = False,
    ) -> None:
        """`reference` is a frozen model, or with LoRA the policy's own model with its
        adapters off (`AdapterFreeReference`). With several learner processes (`learners`),
        each trains on its own sequences and the gradients are summed over the processes: by
        this class (ddp), or by FSDP itself when the model is `sharded`, whose forwards are
        collective calls: every process then runs as many micro-batches as the one with the
        most, topped up with micro-batches of weight zero."""
        if settings.beta > 0 and reference is None:
            raise ValueError("beta > 0 needs a reference model")
        self.policy = policy
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.settings = settings
        self.reference = reference
        self.importance_sampling_cap = importance_sampling_cap
        self.learners = learners or LearnerGroup()
        self.sharded = sharded

    @property
    def kl_in_loss(self) -> bool:
        return self.settings.beta > 0 and not self.settings.kl_in_reward

    def micro_batches(self, n: int) -> list[list[int]]:
        size = self.settings.micro_batch_size or max(1, n)
        return [list(range(s, min(n, s + size))) for s in range(0, n, size)]

    def _score(
        self, target: torch.nn.Module | AdapterFreeReference, batch: ScoreBatch
    ) -> torch.Tensor:
        """Log-probs of a batch without gradient and with dropout off (π_old, π_ref)."""
        with _scope(target) as model:
            training = model.training
            model.eval()
            try:
                with torch.inference_mode():
                    logp = score(model, batch, self.settings.temperature).logprobs
            finally:
                model.train(training)
        return logp.clone()

    def _batch(
        self,
        prompts: list[list[int]],
        completions: list[list[int]],
        masks: list[list[int]],
    ) -> ScoreBatch:
        """A scoring batch on the policy's device (moved once, reused by every iteration)."""
        return build_batch(prompts, completions, masks, self.policy.pad_id).to(self.policy.device)

    def reward_penalties(self, groups: list[Group]) -> list[Penalties]:
        """The KL reward penalty β·Σ_t (log π_old − log π_ref) of every segment of `groups`.

        π_old is the learner's policy now, before this step's update, scored by the learner
        itself; the penalty is a fixed part of the reward, so no gradient flows through it.
        Each learner process scores its share of the micro-batches one process would score
        (the same rows together, so the same values) and all processes get them all.
        """
        segments = [
            (gi, ti, si, seg)
            for gi, g in enumerate(groups)
            for ti, t in enumerate(g.trajectories)
            for si, seg in enumerate(t.segments)
        ]
        out: list[Penalties] = [[[0.0] * len(t.segments) for t in g.trajectories] for g in groups]
        scored = [x for x in segments if x[3].completion_ids]
        batches = self.micro_batches(len(scored))
        mine = [
            self._penalties([scored[i][3] for i in batches[b]])
            for b in self.learners.shard(len(batches))
        ]
        if self.sharded and batches:  # a sharded model's forwards are collective calls
            for _ in range(self.learners.largest_share(len(batches)) - len(mine)):
                self._penalties([scored[0][3]])  # as many on every process, the fewest rows
        for idx, values in zip(batches, self.learners.gather(mine), strict=True):
            for i, value in zip(idx, values, strict=True):
                gi, ti, si, _ = scored[i]
                out[gi][ti][si] = value
        return out

    def _penalties(self, chunk: list[Segment]) -> list[float]:
        """The KL reward penalty of each of a micro-batch of segments."""
        batch = self._batch(
            [s.prompt_ids for s in chunk],
            [s.completion_ids for s in chunk],
            [list(s.mask()) for s in chunk],
        )
        logp = self._score(self.policy.model, batch)
        ref = self._score(self.reference, batch)
        penalty = kl_reward_penalty(logp, ref, batch.completion_mask.float(), self.settings.beta)
        return penalty.cpu().tolist()  # one copy from the device, not one per row

    def step(
        self, sequences: list[TrainSequence], owned: Sequence[bool] | None = None
    ) -> dict[str, float]:
        """Run `num_iterations` optimizer steps on the sequences; the scheduler advances once.

        `sequences` are the whole step's, on every learner process: the loss's token weights
        (its normaliser) are computed over all of them, and this process backpropagates those
        it `owned` (all, by default); the gradients are then summed over the processes.
        """
        settings = self.settings
        masks = [torch.as_tensor(s.mask, dtype=torch.float32, device="cpu") for s in sequences]
        weights = token_weights(masks, settings.loss_type, settings.max_completion_length)
        # a micro-batch that trains nothing: a sequence of the step, every token weight 0
        filler = [replace(sequences[0], mask=[0] * len(sequences[0].mask), off_policy=False)]
        filler_weights = [torch.zeros_like(masks[0])]
        if owned is not None:
            mine = [i for i, own in enumerate(owned) if own]
            sequences, weights = [sequences[i] for i in mine], [weights[i] for i in mine]
        batches = [
            ([sequences[i] for i in idx], [weights[i] for i in idx])
            for idx in self.micro_batches(len(sequences))
        ]
        if self.sharded:
            most = self.learners.most(len(batches), self.policy.device)
            batches += [(filler, filler_weights)] * (most - len(batches))
        stats: dict[str, float] = {}
        # per micro-batch: the batch, π_old (the learner at the start of the step) and π_ref,
        # scored once in the first iteration and reused by later ones
        cache: dict[int, _MicroBatch] = {}
        for iteration in range(settings.num_iterations):
            stats = self._one_step(batches, cache)
            stats["iterations"] = float(iteration + 1)
        stats["learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return stats

    def skip(self) -> dict[str, float]:
        """A step with nothing to learn (every group filtered): the schedule still advances.

        The optimizer step is a no-op (no parameter has a gradient) and keeps torch's scheduler
        from warning that it was stepped first.
        """
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.step()
        self.scheduler.step()
        return {"learning_rate": lr, "update/skipped": 1.0}

    def _micro_batch(
        self, mb: int, chunk: list[TrainSequence], cache: dict[int, _MicroBatch]
    ) -> tuple[_MicroBatch | None, ScoreBatch]:
        """The cached micro-batch, or (first iteration) its batch, with π_old scored now when
        dropout would make the update's own forward differ from it."""
        if mb in cache:
            return cache[mb], cache[mb].batch
        batch = self._batch(
            [s.prompt_ids for s in chunk],
            [s.completion_ids for s in chunk],
            [s.mask for s in chunk],
        )
        if dropout_active(self.policy.model):
            ref = self._score(self.reference, batch) if self.kl_in_loss else None
            cache[mb] = _MicroBatch(batch, self._score(self.policy.model, batch), ref)
            return cache[mb], batch
        return None, batch

    def _one_step(
        self,
        batches: list[tuple[list[TrainSequence], list[torch.Tensor]]],
        cache: dict[int, _MicroBatch],
    ) -> dict[str, float]:
        """One optimizer step over the micro-batches (sequences and their token weights)."""
        model = self.policy.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(_SUMS, 0.0)
        for mb, (chunk, weights) in enumerate(batches):
            self._backward(mb, chunk, weights, cache, sums)
        if self.learners.distributed:
            self._sum_over_processes(model, sums)
        max_norm = self.settings.max_grad_norm if self.settings.max_grad_norm else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if isinstance(grad_norm, DTensor):  # sharded gradients: the norm of the whole
            grad_norm = grad_norm.full_tensor()
        self.optimizer.step()
        per_tok = max(sums["tokens"], 1.0)
        off_tok = max(sums["off"], 1.0)
        return {
            "loss": sums["loss"],
            "clip_ratio/low_mean": sums["low"] / per_tok,
            "clip_ratio/high_mean": sums["high"] / per_tok,
            "clip_ratio/region_mean": (sums["low"] + sums["high"]) / per_tok,
            "ratio/mean": sums["ratio"] / per_tok,
            "entropy": sums["entropy"] / per_tok,
            "kl": sums["kl"] / per_tok,
            "grad_norm": float(grad_norm),
            "tokens/trained": sums["tokens"],
            "is/off_policy_frac": sums["off"] / per_tok,
            "is/capped_frac": sums["capped"] / off_tok,
            "is/weight_mean": sums["is_weight"] / off_tok if sums["off"] else 1.0,
        }

    def _sum_over_processes(self, model: torch.nn.Module, sums: dict[str, float]) -> None:
        """The statistics, and every trainable parameter's gradient, summed over the learner
        processes (a process without a sequence this step contributes zeros); FSDP has summed
        a sharded model's gradients already."""
        params = [] if self.sharded else [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        totals = torch.tensor(
            [sums[k] for k in _SUMS], dtype=torch.float64, device=self.policy.device
        )
        self.learners.sum_([p.grad for p in params] + [totals])
        sums.update(zip(_SUMS, totals.tolist(), strict=True))

    def _backward(
        self,
        mb: int,
        chunk: list[TrainSequence],
        weights: list[torch.Tensor],
        cache: dict[int, _MicroBatch],
        sums: dict[str, float],
    ) -> None:
        """Score one micro-batch, backpropagate its share of the loss and add its statistics
        (token-weighted sums) to `sums`."""
        settings = self.settings
        state, batch = self._micro_batch(mb, chunk, cache)
        width = batch.completion_width
        scores = score(self.policy.model, batch, settings.temperature, with_entropy=True)
        logp, mask = scores.logprobs, scores.mask.float()
        if state is None:
            # no dropout: this first forward is π_old itself, so the ratio is exactly 1
            ref = self._score(self.reference, batch) if self.kl_in_loss else None
            state = cache[mb] = _MicroBatch(batch, logp.detach(), ref)
        device = logp.device
        w = torch.zeros((len(chunk), width), dtype=torch.float32, device="cpu")
        for row, weight in enumerate(weights):
            w[row, : len(weight)] = weight.to(torch.float32)
        w = w.to(device)
        off = torch.as_tensor([s.off_policy for s in chunk], dtype=torch.bool, device=device)
        advantages = [s.advantage for s in chunk]
        out = grpo_loss(
            logp,
            state.old,
            torch.as_tensor(advantages, dtype=torch.float32, device=device),
            w,
            epsilon_low=settings.epsilon,
            epsilon_high=settings.clip_high,
            ref_logp=state.ref,
            beta=settings.beta,
            kl_estimator=settings.kl_estimator,
            kl_bias_correction=settings.use_bias_correction_kl,
            behaviour_logp=_pad([s.old_logprobs for s in chunk], width, device),
            off_policy=off[:, None] & scores.mask.bool(),
            importance_sampling_cap=self.importance_sampling_cap,
        )
        out.loss.backward()
        surr = out.surrogate
        if out.is_weight is not None:
            sums["off"] += float(out.off_policy.sum())
            sums["capped"] += float(out.capped.sum())
            sums["is_weight"] += float((out.is_weight * out.off_policy).sum())
        sums["tokens"] += float(mask.sum())
        sums["loss"] += out.loss.item()
        sums["low"] += float((surr.low_clipped.float() * mask).sum())
        sums["high"] += float((surr.high_clipped.float() * mask).sum())
        sums["ratio"] += float((surr.ratio.detach() * mask).sum())
        sums["entropy"] += float((scores.entropy * mask).sum())
        if out.kl is not None:
            sums["kl"] += float((out.kl.detach() * mask).sum())
