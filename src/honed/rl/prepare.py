"""From scored groups to what one optimizer step trains on: the reward signal, advantages,
the zero-spread filter and training sequences.

`prepare` turns groups into training sequences (one per segment, each with its group-relative
advantage), dropping zero-spread groups; `honed.rl.update.PolicyUpdate.step` then trains on
them.

One reward signal: the rewards that advantages are computed from (`unit_signal`: the units'
rewards, with the overlong penalty, mapped by the environment's normaliser, less the KL
penalty of `reward_penalties` when `kl_in_reward`) are also the ones that decide whether a
group has any spread, both for dynamic sampling (`zero_spread`) and for the zero-spread filter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from honed.config import TrainerConfig
from honed.distributed.learner import LearnerGroup
from honed.models.batching import build_batch, micro_batches
from honed.models.lora import AdapterFreeReference
from honed.models.policy import Policy
from honed.models.scoring import frozen_logprobs
from honed.rewards.units import group_units, unit_rewards
from honed.rl.advantages import compute_advantages
from honed.rl.loss import kl_reward_penalty
from honed.rl.nonfinite import NonFinite, check_penalties
from honed.types import Group, Segment

# One group's KL reward penalties: per trajectory, per segment, β·Σ k1 over its tokens.
Penalties = list[list[float]]
Normalize = Callable[[str, list[float]], list[float]]


@dataclass
class TrainSequence:
    """One segment as the update trains on it: its tokens, loss mask, behaviour log-probs and
    the advantage of the reward unit it belongs to."""

    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    old_logprobs: list[float]
    advantage: float
    off_policy: bool = False
    group: int = 0  # the index of its group among the step's groups
    # per-token advantages an environment fixed (`Segment.advantages`); `advantage` is then
    # their mean over the loss mask
    token_advantages: list[float] | None = None


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


def reward_penalties(
    policy: Policy,
    reference: torch.nn.Module | AdapterFreeReference | None,
    groups: list[Group],
    settings: TrainerConfig,
    learners: LearnerGroup | None = None,
    sharded: bool = False,
) -> list[Penalties]:
    """The KL reward penalty β·Σ_t (log π_old − log π_ref) of every segment of `groups`.

    π_old is `policy` now, before this step's update, scored by the learner itself; the
    penalty is a fixed part of the reward, so no gradient flows through it. Each learner
    process scores its share of the micro-batches one process would score (the same rows
    together, so the same values) and all processes get them all, with any non-finite
    penalty found on one of them: every process then decides alike (`honed.rl.nonfinite`).
    """
    if reference is None:
        raise ValueError("the KL reward penalty needs a reference model")
    learners = learners or LearnerGroup()
    segments = [
        (gi, ti, si, seg)
        for gi, g in enumerate(groups)
        for ti, t in enumerate(g.trajectories)
        for si, seg in enumerate(t.segments)
    ]
    out: list[Penalties] = [[[0.0] * len(t.segments) for t in g.trajectories] for g in groups]
    scored = [x for x in segments if x[3].completion_ids]
    batches = micro_batches(len(scored), settings.micro_batch_size)

    def penalties(idx: list[int]) -> tuple[list[float], tuple[str, list[str]] | None]:
        chunk = [scored[i][3] for i in idx]
        envs = [groups[scored[i][0]].env for i in idx]
        return _chunk_penalties(policy, reference, chunk, envs, settings)

    mine = [penalties(batches[b]) for b in learners.shard(len(batches))]
    if sharded and batches:  # a sharded model's forwards are collective calls
        for _ in range(learners.largest_share(len(batches)) - len(mine)):
            penalties(batches[0][:1])  # as many on every process, the fewest rows
    for idx, (values, problem) in zip(batches, learners.gather(mine), strict=True):
        if problem is not None:
            raise NonFinite("logprob", *problem)
        for i, value in zip(idx, values, strict=True):
            gi, ti, si, _ = scored[i]
            out[gi][ti][si] = value
    return out


def _chunk_penalties(
    policy: Policy,
    reference: torch.nn.Module | AdapterFreeReference,
    chunk: list[Segment],
    envs: list[str],
    settings: TrainerConfig,
) -> tuple[list[float], tuple[str, list[str]] | None]:
    """The KL reward penalty of each of a micro-batch of segments (`envs`: each one's
    environment), and what was found non-finite in it (where, environments) if anything: the
    caller decides once every process's micro-batches are gathered."""
    batch = build_batch(
        [s.prompt_ids for s in chunk],
        [s.completion_ids for s in chunk],
        [list(s.mask()) for s in chunk],
        policy.pad_id,
    ).to(policy.device)
    logp = frozen_logprobs(policy.model, batch, settings.temperature)
    ref = frozen_logprobs(reference, batch, settings.temperature)
    penalty = kl_reward_penalty(logp, ref, batch.completion_mask.float(), settings.beta)
    penalty_cpu = penalty.cpu()  # one copy from the device, not one per row
    try:
        check_penalties(penalty_cpu, {"the policy's": logp, "the reference's": ref}, envs)
    except NonFinite as found:
        return penalty_cpu.tolist(), (found.where, found.envs)
    return penalty_cpu.tolist(), None


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
    rewards = unit_rewards(
        group, settings.max_completion_length, settings.overlong_buffer, settings.overlong_penalty
    )
    if normalize is not None:
        rewards = normalize(group.env, rewards)
    if penalty is not None:
        members = group_units(group).members
        rewards = [
            r - sum(penalty[ti][si] for ti, si in unit)
            for r, unit in zip(rewards, members, strict=True)
        ]
    return rewards


def labelled_advantages(groups: list[Group], advantages: list[list[float]]) -> dict[str, float]:
    """`advantage/<env>/<label>`: the mean advantage per labelled thing, for environments that
    label what each segment did (`Trajectory.info["segment_labels"]`: per segment, a mapping
    of label to count, e.g. the memory agent's `answering_writes`). A segment's advantage is
    its reward unit's (`advantages`, per group and unit, as `prepare` computes them) and counts
    once per labelled thing: a chunk with two answering writes weighs twice."""
    totals: dict[str, list[float]] = {}
    for group, unit_advantages in zip(groups, advantages, strict=True):
        for a, members in zip(unit_advantages, group_units(group).members, strict=True):
            for ti, si in members:
                labels = group.trajectories[ti].info.get("segment_labels")
                if not labels:
                    continue
                for label, count in labels[si].items():
                    total = totals.setdefault(f"advantage/{group.env}/{label}", [0.0, 0.0])
                    total[0] += a * count
                    total[1] += count
    return {key: value / count for key, (value, count) in totals.items() if count}


def _fixed_mean(values: list[float], mask: list[int]) -> float:
    kept = [v for v, m in zip(values, mask, strict=True) if m]
    return sum(kept) / len(kept) if kept else 0.0


def fixed_advantages(group: Group, advantages: list[float]) -> tuple[list[float], bool | None]:
    """The group's unit advantages with those its environment fixed (`Segment.advantages`;
    a unit's value is the mean over its tokens) in place of the computed ones; and, when every
    trained segment's advantages are fixed, whether they are all zero (the group then has
    nothing to learn whatever its rewards' spread), else None."""
    out = list(advantages)
    computed, fixed_any, all_zero = False, False, True
    for u, unit in enumerate(group_units(group).members):
        trained = [group.trajectories[ti].segments[si] for ti, si in unit]
        trained = [seg for seg in trained if seg.completion_ids]
        fixed = [seg for seg in trained if seg.advantages is not None]
        computed = computed or len(fixed) < len(trained)
        fixed_any = fixed_any or bool(fixed)
        all_zero = all_zero and not any(any(seg.advantages or ()) for seg in fixed)
        if fixed and len(fixed) == len(trained):
            means = [_fixed_mean(seg.advantages or [], list(seg.mask())) for seg in fixed]
            out[u] = sum(means) / len(means)
    return out, (all_zero if fixed_any and not computed else None)


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
    advantages, stds = compute_advantages(signals, "none")
    return [
        _no_signal(g, a, s, settings.zero_std_tolerance)
        for g, a, s in zip(groups, advantages, stds, strict=True)
    ]


def _no_signal(group: Group, advantages: list[float], std: float, tolerance: float) -> bool:
    """Whether a group has nothing to learn: its rewards do not spread, or every advantage
    its environment fixed is zero."""
    fixed_zero = fixed_advantages(group, advantages)[1]
    return std < tolerance if fixed_zero is None else fixed_zero


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
    zero = [
        _no_signal(g, a, s, settings.zero_std_tolerance)
        for g, a, s in zip(groups, advantages, stds, strict=True)
    ]
    advantages = [fixed_advantages(g, a)[0] for g, a in zip(groups, advantages, strict=True)]
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
                fixed = seg.advantages
                sequences.append(
                    TrainSequence(
                        seg.prompt_ids,
                        seg.completion_ids,
                        mask,
                        seg.logprobs,
                        float(a) if fixed is None else _fixed_mean(fixed, list(seg.mask())),
                        off,
                        index,
                        None if fixed is None else list(fixed),
                    )
                )
    metrics = {
        "frac_reward_zero_std": sum(zero) / len(zero) if zero else 0.0,
        "groups/trained": float(len(kept)),
        "groups/filtered": float(len(groups) - len(kept)),
    }
    return Prepared(sequences, kept, stds, zero, metrics, advantages)
