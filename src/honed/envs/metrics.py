"""Metrics of a step's groups beyond rewards: what environments report of their own
(`StepMetrics`), and every tool's calls, errors and time.

The trainer logs these with each step and `honed eval` reports them, so the same names show the
warm-start and the trained agent side by side. Tool metrics are keyed by the tool's name
(`tools/<tool>/calls`, `errors`, `mean_seconds`), summed over every environment that offers a
tool of that name; they are read from each trajectory's `info["tool_calls"]` records (`tool`,
`error`, `seconds`), which the `tools` environment writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from honed.envs.base import Environment, StepMetrics
from honed.types import Group


def step_metrics(envs: Mapping[str, Environment], groups: Sequence[Group]) -> dict[str, float]:
    """Each environment's own metrics for its groups, and the tool metrics of all of them."""
    by_env: dict[str, list[Group]] = defaultdict(list)
    for group in groups:
        by_env[group.env].append(group)
    out: dict[str, float] = {}
    for name, env_groups in by_env.items():
        env = envs.get(name)
        if isinstance(env, StepMetrics):
            out.update(env.step_metrics(env_groups))
    out.update(tool_metrics(groups))
    return out


def tool_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """`tools/<tool>/calls`, `errors` (counts this step) and `mean_seconds` per tool called."""
    calls: dict[str, int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for group in groups:
        for trajectory in group.trajectories:
            for record in trajectory.info.get("tool_calls", ()):
                tool = record.get("tool")
                if tool is None:  # a name the model made up: counted by the episode metrics
                    continue
                calls[tool] += 1
                errors[tool] += int(bool(record.get("error")))
                seconds[tool] += float(record.get("seconds", 0.0))
    out: dict[str, float] = {}
    for tool in sorted(calls):
        out[f"tools/{tool}/calls"] = float(calls[tool])
        out[f"tools/{tool}/errors"] = float(errors[tool])
        out[f"tools/{tool}/mean_seconds"] = seconds[tool] / calls[tool]
    return out
