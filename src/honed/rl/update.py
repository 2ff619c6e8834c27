"""The GRPO optimizer step: `PolicyUpdate.step` runs `num_iterations` optimizer steps over a
step's training sequences (`honed.rl.prepare`), in micro-batches whose losses sum exactly to
the full-batch loss.

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
reference and the KL reward penalty are scored with dropout off (`frozen_logprobs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from honed.config import TrainerConfig
from honed.distributed.learner import LearnerGroup
from honed.errors import HonedError
from honed.models.batching import ScoreBatch, build_batch, micro_batches, right_pad
from honed.models.dropout import dropout_active
from honed.models.lora import AdapterFreeReference
from honed.models.policy import Policy
from honed.models.scoring import frozen_logprobs, score
from honed.rl.loss import StepStats, grpo_loss, token_weights
from honed.rl.nonfinite import NonFinite, check_update, explain_loss
from honed.rl.prepare import TrainSequence


@dataclass
class _MicroBatch:
    """What every iteration of a step reuses for one micro-batch: its batch, π_old, π_ref."""

    batch: ScoreBatch
    old: torch.Tensor
    ref: torch.Tensor | None


class PolicyUpdate:
    """The GRPO optimizer step: clipped surrogate (+ β·KL), global normaliser, micro-batches."""

    def __init__(
        self,
        policy: Policy,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        settings: TrainerConfig,
        reference: PreTrainedModel | AdapterFreeReference | None = None,
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
        self.learners = learners or LearnerGroup()
        self.sharded = sharded
        # what made this process's loss non-finite in the optimizer step under way, if anything
        self._found: NonFinite | None = None

    @property
    def kl_in_loss(self) -> bool:
        return self.settings.beta > 0 and not self.settings.kl_in_reward

    def _reference_logprobs(self, batch: ScoreBatch) -> torch.Tensor | None:
        """π_ref of a batch when the loss has a KL term, else None."""
        if not self.kl_in_loss or self.reference is None:
            return None
        return frozen_logprobs(self.reference, batch, self.settings.temperature)

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
            for idx in micro_batches(len(sequences), settings.micro_batch_size)
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
        """A step with nothing to learn (every group filtered), or dropped for a non-finite
        value (`honed.rl.nonfinite`; its gradients are cleared): the schedule still advances.

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
        """The cached micro-batch, or (first iteration) its batch on the policy's device (moved
        once, reused by every iteration), with π_old scored now when dropout would make the
        update's own forward differ from it."""
        if mb in cache:
            return cache[mb], cache[mb].batch
        batch = build_batch(
            [s.prompt_ids for s in chunk],
            [s.completion_ids for s in chunk],
            [s.mask for s in chunk],
            self.policy.pad_id,
        ).to(self.policy.device)
        if dropout_active(self.policy.model):
            old = frozen_logprobs(self.policy.model, batch, self.settings.temperature)
            cache[mb] = _MicroBatch(batch, old, self._reference_logprobs(batch))
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
        self._found = None
        stats = StepStats()
        for mb, (chunk, weights) in enumerate(batches):
            try:
                self._backward(mb, chunk, weights, cache, stats)
            except torch.OutOfMemoryError as exc:
                raise HonedError(self._out_of_memory(chunk)) from exc
        if self.learners.distributed:
            stats = self._sum_over_processes(model, stats)
        max_norm = self.settings.max_grad_norm if self.settings.max_grad_norm else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if isinstance(grad_norm, DTensor):  # sharded gradients: the norm of the whole
            grad_norm = grad_norm.full_tensor()
        norm = float(grad_norm)
        check_update(stats.loss, norm, self._found)  # the step is applied only if finite
        self.optimizer.step()
        return stats.metrics(norm)

    def _out_of_memory(self, chunk: list[TrainSequence]) -> str:
        """What to change when one micro-batch's forward and backward do not fit the device:
        by default (`micro_batch_size: null`) the update takes the whole step in one pass."""
        size = self.settings.micro_batch_size
        longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in chunk)
        now = f"{size}" if size else "null, the whole step at once"
        return (
            f"the update ran out of memory on {self.policy.device} scoring {len(chunk)} sequences "
            f"of up to {longest} tokens in one pass (trainer.micro_batch_size: {now}): set "
            "trainer.micro_batch_size lower, or policy.gradient_checkpointing: true; the gradient "
            "is the same either way"
        )

    def _sum_over_processes(self, model: torch.nn.Module, stats: StepStats) -> StepStats:
        """The statistics, and every trainable parameter's gradient, summed over the learner
        processes (a process without a sequence this step contributes zeros); FSDP has summed
        a sharded model's gradients already."""
        params = [] if self.sharded else [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        totals = stats.as_tensor(self.policy.device)
        self.learners.sum_([p.grad for p in params] + [totals])
        return StepStats.from_tensor(totals)

    def _backward(
        self,
        mb: int,
        chunk: list[TrainSequence],
        weights: list[torch.Tensor],
        cache: dict[int, _MicroBatch],
        stats: StepStats,
    ) -> None:
        """Score one micro-batch, backpropagate its share of the loss and add its statistics
        to `stats`."""
        settings = self.settings
        state, batch = self._micro_batch(mb, chunk, cache)
        width = batch.completion_width
        scores = score(self.policy.model, batch, settings.temperature, with_entropy=True)
        logp, mask = scores.logprobs, scores.mask.float()
        if state is None:
            # no dropout: this first forward is π_old itself, so the ratio is exactly 1
            state = cache[mb] = _MicroBatch(batch, logp.detach(), self._reference_logprobs(batch))
        device = logp.device
        off = torch.as_tensor([s.off_policy for s in chunk], dtype=torch.bool, device=device)
        out = grpo_loss(
            logp,
            state.old,
            _advantages(chunk, width, device),
            right_pad(weights, 0.0, width, torch.float32, device),
            epsilon_low=settings.epsilon,
            epsilon_high=settings.clip_high,
            ref_logp=state.ref,
            beta=settings.beta,
            kl_estimator=settings.kl_estimator,
            kl_bias_correction=settings.use_bias_correction_kl,
            behaviour_logp=right_pad(
                [s.old_logprobs for s in chunk], 0.0, width, torch.float32, device
            ),
            off_policy=off[:, None] & scores.mask.bool(),
            importance_sampling_cap=settings.importance_sampling_cap,
        )
        out.loss.backward()
        loss = stats.add(out, mask, scores.entropy)
        self._found = self._found or explain_loss(
            loss,
            {"the policy's": logp, "π_old's": state.old, "the reference's": state.ref},
            [s.group for s in chunk],
        )


def _advantages(chunk: list[TrainSequence], width: int, device: torch.device) -> torch.Tensor:
    """The micro-batch's advantages: one per sequence ([B]), or per token ([B, C]) when an
    environment fixed some sequences' (the others' then repeated over their tokens)."""
    if all(s.token_advantages is None for s in chunk):
        return torch.as_tensor([s.advantage for s in chunk], dtype=torch.float32, device=device)
    rows = [
        s.token_advantages if s.token_advantages is not None else [s.advantage] * len(s.mask)
        for s in chunk
    ]
    return right_pad(rows, 0.0, width, torch.float32, device)
