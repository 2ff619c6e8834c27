"""Non-finite values in a GRPO step: found where they arise, named, never trained on.

A NaN or an infinity anywhere in a step spreads to everything computed from it: one NaN weight
makes every logit NaN, the sampler then draws garbage whose rewards are all equal, every group
is filtered and each update is skipped, and the run "trains" on with nothing said. So each
quantity is checked where it is made, before anything that would keep it:

- the sampler's log-prob of each sampled token (a NaN or +inf logit makes its whole row NaN
  under log-softmax) and each reward, per group, before the curricula and the reward
  normalisers observe the group;
- the KL reward penalty (`kl_in_reward`), that is the policy's and the reference's log-probs;
- the advantages;
- the loss (π_old's, the reference's and the current log-probs all reach it) and the gradient
  norm, before the optimizer step;
- the weights of every model a run starts or resumes from.

A check costs one reduction per tensor, where the value is already on the CPU (the
rewards, advantages, sampled log-probs, the KL penalty and the loss are, for other reasons);
the gradient norm is read before the optimizer step instead of after it. Only once a check has
failed does finding which tensor and which rows were at fault cost more.

What a failed check does is `trainer.on_nonfinite`: `stop` ends the run at that step (exit code
2, one line naming the quantity, the step and the environments; nothing of the step is saved,
so the latest checkpoint stays that of the last good step), `skip_step` drops the step: no
optimizer step (with `num_iterations` > 1, each iteration is one: those before the bad one
stay applied), no statistic takes in its groups, the learning-rate schedule advances as on a step whose groups were all filtered
(so that a resumed run, which positions the schedule at its step, agrees), and the step is
logged as `nonfinite/skipped` with `nonfinite/<quantity>`. Non-finite weights always stop the
run: every step after them would be skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch

from honed.errors import HonedError
from honed.types import Group

# What each check names, as `nonfinite/<key>` in the metrics and in words in the message.
QUANTITIES = {
    "sampling_logprob": "sampling log-prob",
    "reward": "reward",
    "logprob": "log-prob",
    "advantage": "advantage",
    "loss": "loss",
    "grad_norm": "gradient norm",
}


class NonFinite(Exception):
    """A non-finite value found in a step: which quantity (a key of `QUANTITIES`), where in
    a few words, and the environments involved, given by name or as indices of the step's
    groups (the update knows its sequences' groups, not their environments)."""

    def __init__(
        self,
        quantity: str,
        where: str = "",
        envs: Iterable[str] = (),
        groups: Iterable[int] = (),
    ) -> None:
        super().__init__(quantity)
        self.quantity = quantity
        self.where = where
        self.envs = sorted(set(envs))
        self.groups = sorted(set(groups))

    def among(self, groups: Sequence[Group]) -> NonFinite:
        """Name the environments of the groups found at fault (all of `groups`, the step's,
        when none was singled out), where only their indices were known."""
        if not self.envs:
            found = [groups[i] for i in self.groups] or groups
            self.envs = sorted({g.env for g in found})
        return self

    def message(self, step: int) -> str:
        """One line for a person: the quantity, the step, the environments, where."""
        names = ", ".join(f"'{e}'" for e in self.envs)
        label = "environment" if len(self.envs) == 1 else "environments"
        where = f": {self.where}" if self.where else ""
        return f"non-finite {QUANTITIES[self.quantity]} at step {step} ({label} {names}){where}"


def check_rollouts(groups: Sequence[Group]) -> None:
    """Every sampled token's log-prob and every reward of `groups` is finite, or `NonFinite`
    for the first that is not. The sum of a segment's log-probs is finite exactly when each of
    them is (none is above 0, so none cancels an infinity): one pass in C per segment."""
    for group in groups:
        for t in group.trajectories:
            if not all(math.isfinite(sum(s.logprobs, 0.0)) for s in t.segments):
                raise NonFinite(
                    "sampling_logprob",
                    f"a token sampled for item '{group.item_key}' (a NaN or infinite logit)",
                    [group.env],
                )
        for t in group.trajectories:
            rewards = [t.reward] + [s.reward for s in t.segments if s.reward is not None]
            if not all(math.isfinite(r) for r in rewards):
                parts = [
                    f"{k} {v}"
                    for k, v in t.components.items()
                    if isinstance(v, float) and not math.isfinite(v)
                ]
                what = f" ({', '.join(parts)})" if parts else ""
                raise NonFinite(
                    "reward", f"item '{group.item_key}' scored {t.reward}{what}", [group.env]
                )


def check_advantages(groups: Sequence[Group], advantages: Sequence[Sequence[float]]) -> None:
    """Every group's advantages are finite, or `NonFinite` naming the first group's item."""
    for group, values in zip(groups, advantages, strict=True):
        if not all(math.isfinite(a) for a in values):
            raise NonFinite("advantage", f"item '{group.item_key}'", [group.env])


def check_penalties(
    penalties: torch.Tensor, logprobs: Mapping[str, torch.Tensor], envs: Sequence[str]
) -> None:
    """The KL reward penalties of a micro-batch (on the CPU, one per row, computed from
    `logprobs`: whose they are → [rows, tokens]; `envs` the environment of each row) are
    finite, or `NonFinite` naming whose log-probs were not."""
    if bool(torch.isfinite(penalties).all()):
        return
    found = culprit(logprobs)
    whose, rows = found or ("", (~torch.isfinite(penalties)).nonzero().flatten().tolist())
    where = f"{whose} log-probs, in the KL reward penalty" if whose else "the KL reward penalty"
    raise NonFinite("logprob", where, [envs[r] for r in rows])


def explain_loss(
    loss: float, logprobs: Mapping[str, torch.Tensor | None], groups: Sequence[int]
) -> NonFinite | None:
    """None when a micro-batch's `loss` is finite; else what made it not: the first of its
    `logprobs` (whose they are → [rows, tokens]; `groups` the step's group of each row) with a
    non-finite value, or the loss itself (an advantage or a weight)."""
    if math.isfinite(loss):
        return None
    found = culprit(logprobs)
    if found is None:
        return NonFinite("loss", "the clipped surrogate", groups=groups)
    whose, rows = found
    return NonFinite("logprob", f"{whose} log-probs", groups=[groups[r] for r in rows])


def culprit(logprobs: Mapping[str, torch.Tensor | None]) -> tuple[str, list[int]] | None:
    """The first of `logprobs` (whose they are → [rows, tokens]) with a non-finite value, and
    its rows that have one; None when all are finite. Read once something computed from them
    was not finite: padding positions are finite whenever that is (a NaN times a zero weight
    is NaN), so whole rows are read."""
    for whose, values in logprobs.items():
        if values is None:
            continue
        bad = (~torch.isfinite(values.detach())).flatten(1).any(1).cpu()
        if bool(bad.any()):
            return whose, bad.nonzero().flatten().tolist()
    return None


def check_update(loss: float, grad_norm: float, found: NonFinite | None) -> None:
    """The step's loss and gradient norm (summed over the learner processes, so that every
    process decides alike) are finite, or `NonFinite`: what `found` at fault in this process
    (`explain_loss`), else the loss, else the gradient norm (an overflow in the backward pass)."""
    if not math.isfinite(loss):
        raise found or NonFinite("loss", "the clipped surrogate")
    if not math.isfinite(grad_norm):
        raise NonFinite("grad_norm", "the optimizer step was not applied")


def check_weights(model: torch.nn.Module, what: str) -> None:
    """Every parameter and floating-point buffer of `model` is finite, or a `HonedError`
    naming the first that is not and `what` the model is. One reduction per tensor and one
    copy from the device for the whole model: a tensor's float32 sum is finite exactly when
    each of its values is (weights cannot add up past float32's range), and unlike
    `isfinite(t)` it needs no temporary the size of the tensor."""
    named = [
        (name, t)
        for name, t in [*model.named_parameters(), *model.named_buffers()]
        if t.is_floating_point()
    ]
    sums = torch.stack([t.detach().sum(dtype=torch.float32) for _, t in named])
    finite = torch.isfinite(sums).cpu()
    if bool(finite.all()):
        return
    name = named[int((~finite).nonzero()[0, 0])][0]
    raise HonedError(
        f"non-finite weights in {what}: {name} holds NaN or infinity, so every step would be "
        "NaN; start from other weights (a checkpoint of this run: remove it, and --resume "
        "continues from the one before)"
    )
