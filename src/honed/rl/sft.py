"""Supervised warm-start on the environments' reference solutions.

A policy built from scratch never samples a correct answer, so every GRPO group would have zero
reward spread and nothing to learn from. A short supervised phase on reference solutions gives
it a foothold; evaluation after it is the baseline GRPO's gain is measured against.

By default only the target's tokens are trained. `prompt_loss_weight > 0` also trains the
prompt's next-token prediction at that weight (the loss is the weighted mean over all tokens):
a model built from scratch then learns the prompts' language, and, where prompts repeat
themselves (a name in a memory entry and again in the new chunk), to copy from its context,
which completion tokens alone teach slowly.

With several learner processes each takes a contiguous share of every batch; the loss is
normalised by the whole batch's token weight and the gradients are summed (by FSDP's
reduce-scatter for a sharded model, `LearnerGroup.sum_` otherwise), so the step is the one a
single process takes on the whole batch, in 1/N of the time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping

import torch

from honed.config import SFTCheckConfig, SFTConfig
from honed.distributed import fsdp
from honed.distributed.learner import LearnerGroup
from honed.envs.base import Environment, TokenReferences
from honed.errors import HonedError
from honed.models.batching import TokenBatch, make_batch, right_pad
from honed.models.policy import Policy
from honed.models.scoring import score
from honed.rl.schedule import build_lr_scheduler, build_optimizer
from honed.rl.sft_check import Example, check_accuracy

MAX_EXAMPLES_PER_ENV = 50_000


def sft_pool(
    policy: Policy, envs: Mapping[str, Environment], split: str = "train", limit: int | None = None
) -> list[Example]:
    """(prompt ids, target ids ending in EOS, mask) for every reference solution of `split`
    (at most `limit` per environment); multi-turn references come token-exact with their mask
    (`TokenReferences`)."""
    cap = MAX_EXAMPLES_PER_ENV if limit is None else limit
    pool: list[Example] = []
    for name, env in envs.items():
        count = 0
        for item in env.items(split):
            if isinstance(env, TokenReferences):
                examples = env.sft_sequences(item, policy)
            else:
                examples = []
                for prompt, target in env.sft_examples(item):
                    ids = policy.encode_target(target)
                    examples.append((policy.encode(prompt), ids, [1] * len(ids)))
            pool += examples if limit is None else examples[: cap - count]
            count += len(examples)
            if count >= cap:
                break
        if count == 0 and split == "train":
            raise HonedError(
                f"sft: environment '{name}' has no reference solutions to warm-start on; "
                "set sft.steps: 0 or give the environment a reference"
            )
        if count == 0:
            raise HonedError(
                f"sft.check: environment '{name}' has no reference solutions in its {split} "
                "split; give it one (e.g. its validation_fraction) or set sft.check.split"
            )
    return pool


def _batch(
    examples: list[Example], pad_id: int, prompt_weight: float
) -> tuple[TokenBatch, torch.Tensor]:
    """A padded batch and the loss weight of each position of its scored window.

    Target tokens weigh 1 where their mask is set; where it is not (tool results inside a
    multi-turn reference) they count as prompt. With a prompt weight, every prompt token but
    the first (nothing predicts it) moves into the scored window at weight `prompt_weight`;
    padding weighs 0.
    """
    weights = [[1.0 if m else prompt_weight for m in mask] for _, _, mask in examples]
    if prompt_weight > 0:
        weights = [
            [prompt_weight] * (len(p) - 1) + w
            for (p, _, _), w in zip(examples, weights, strict=True)
        ]
        examples = [(p[:1], p[1:] + t, []) for p, t, _ in examples]
    batch = make_batch(
        [p for p, _, _ in examples],
        [t for _, t, _ in examples],
        [[1] * len(t) for _, t, _ in examples],
        pad_id,
    )
    return batch, right_pad(weights, 0.0, batch.completion_width, torch.float32)


def _check(
    policy: Policy, held_out: list[Example], check: SFTCheckConfig, batch_size: int
) -> float:
    """The check's metric on the held-out references (on the whole weights, gathered when
    sharded); an error when they hold nothing to measure it on (the check could never pass)."""
    with fsdp.gathered(policy.model):
        value = check_accuracy(policy, held_out, check.metric, batch_size)
    if math.isnan(value):
        raise HonedError(
            f"sft.check: the {check.split} references hold nothing to measure {check.metric} on "
            "(no copied word, no token of the model's own); use the other metric or another split"
        )
    return value


def run_sft(
    policy: Policy,
    envs: Mapping[str, Environment],
    sft: SFTConfig,
    seed: int,
    on_step: Callable[[int, float], None] | None = None,
    on_check: Callable[[int, float], None] | None = None,
    learners: LearnerGroup | None = None,
) -> dict[str, float]:
    """Train on reference solutions for `sft.steps` steps, or until `sft.check` passes (checked
    every `sft.check.every` steps and after the last); returns the loss at start and end and
    the check's history. Long because the step, the check and the summary share its state.

    `learners`: the processes taking shares of each batch; every one draws the same batches
    (the same seeded order) and stops at the same step (rank 0's check decides)."""
    learners = learners or LearnerGroup()
    if sft.batch_size < learners.world_size:
        raise HonedError(
            f"sft.batch_size ({sft.batch_size}) is below the number of learner processes "
            f"({learners.world_size}): each takes a share of every batch"
        )
    summed = learners.distributed and not fsdp.is_sharded(policy.model)
    pool = sft_pool(policy, envs)
    check = sft.check
    held_out = sft_pool(policy, envs, check.split, check.examples) if check.every else []
    rng = random.Random(seed)
    optimizer = build_optimizer(policy.model.parameters(), sft.learning_rate, sft.weight_decay)
    scheduler = build_lr_scheduler(optimizer, sft.lr_scheduler_type, sft.warmup_steps, sft.steps)
    policy.model.train()
    order: list[int] = []
    losses = []
    checks: list[float] = []
    for step in range(1, sft.steps + 1):
        if len(order) < sft.batch_size:
            fresh = list(range(len(pool)))
            rng.shuffle(fresh)
            order += fresh
        idx, order = order[: sft.batch_size], order[sft.batch_size :]
        mine = [pool[idx[i]] for i in learners.shard(len(idx))]
        batch, weights = _batch(mine, policy.pad_id, sft.prompt_loss_weight)
        weights = weights.to(policy.device)
        total = weights.sum()
        learners.sum_([total])  # the whole batch's weight normalises every share
        logp = score(policy.model, batch).logprobs
        loss = -(logp * weights).sum() / total
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if summed:
            learners.sum_([p.grad for p in policy.model.parameters() if p.grad is not None])
        if sft.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(policy.model.parameters(), sft.max_grad_norm)
        optimizer.step()
        scheduler.step()
        whole = loss.detach().clone()
        learners.sum_([whole])
        value = whole.item()
        losses.append(value)
        if on_step:
            on_step(step, value)
        if check.every and (step % check.every == 0 or step == sft.steps):
            checks.append(learners.from_main(_check(policy, held_out, check, sft.batch_size)))
            if on_check:
                on_check(step, checks[-1])
            if checks[-1] >= check.threshold:
                break
    if not losses:
        return {}
    tail = losses[-10:]
    summary = {
        "sft/loss_first": losses[0],
        "sft/loss_last": sum(tail) / len(tail),
        "sft/steps": float(len(losses)),
        "sft/examples": float(len(pool)),
    }
    if checks:
        summary[f"sft/check/{check.metric}"] = checks[-1]
        summary["sft/check/passed"] = float(checks[-1] >= check.threshold)
    return summary
