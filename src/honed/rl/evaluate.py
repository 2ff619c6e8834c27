"""Held-out evaluation of a policy on environments' test (or validation) splits.

`accuracy` is the mean over environments of each one's exact-task success rate, so a large
environment does not drown a small one; per-environment and per-level numbers are reported too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from honed.envs.base import Environment, Reporting, Table
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.types import Group

GREEDY = SamplingParams(temperature=0.0)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarise_groups(name: str, groups: list[Group]) -> dict[str, float]:
    trajs = [(g, t) for g in groups for t in g.trajectories]
    out = {
        f"{name}/accuracy": _mean([t.success for _, t in trajs]),
        f"{name}/reward": _mean([t.reward for _, t in trajs]),
        f"{name}/completion_length": _mean(
            [float(sum(len(s.completion_ids) for s in t.segments)) for _, t in trajs]
        ),
    }
    components: dict[str, list[float]] = defaultdict(list)
    levels: dict[int, list[float]] = defaultdict(list)
    for g, t in trajs:
        for key, value in t.components.items():
            components[key].append(float(value))
        if g.level is not None:
            levels[g.level].append(t.success)
    for key, values in components.items():
        out[f"{name}/{key}"] = _mean(values)
    for level, values in sorted(levels.items()):
        out[f"{name}/level_{level}/accuracy"] = _mean(values)
    return out


def evaluate(
    policy: Policy,
    envs: Mapping[str, Environment],
    split: str = "test",
    num_items: int | None = 200,
    temperature: float = 0.0,
    max_tokens: int = 256,
    top_p: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Metric name → value; always includes `accuracy` and `reward`."""
    sampler = PolicySampler(policy, SamplingParams(temperature, top_p, max_tokens))
    results: dict[str, float] = {}
    accuracies, rewards = [], []
    was_training = policy.model.training
    policy.model.eval()
    try:
        for name, env in envs.items():
            items = list(env.items(split))
            if num_items is not None:
                items = items[:num_items]
            if not items:
                continue
            groups = env.rollout(items, sampler, 1, seed)
            stats = summarise_groups(name, groups)
            results.update(stats)
            accuracies.append(stats[f"{name}/accuracy"])
            rewards.append(stats[f"{name}/reward"])
    finally:
        policy.model.train(was_training)
    results["accuracy"] = _mean(accuracies)
    results["reward"] = _mean(rewards)
    return results


def env_reports(
    agents: Mapping[str, Policy],
    envs: Mapping[str, Environment],
    split: str = "test",
    num_items: int | None = 200,
    params: SamplingParams = GREEDY,
    seed: int = 0,
) -> dict[str, Table]:
    """Each reporting environment's table (`Reporting`), with every agent on the same items."""
    reporting = {name: env for name, env in envs.items() if isinstance(env, Reporting)}
    if not reporting:
        return {}
    samplers = {label: PolicySampler(policy, params) for label, policy in agents.items()}
    modes = {label: policy.model.training for label, policy in agents.items()}
    for policy in agents.values():
        policy.model.eval()
    try:
        return {
            name: env.report(samplers, split, num_items, seed) for name, env in reporting.items()
        }
    finally:
        for label, policy in agents.items():
            policy.model.train(modes[label])
