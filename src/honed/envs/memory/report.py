"""The memory table: baselines and agents side by side on the same instances.

Rows: no memory, store-everything, RAG over raw chunks (top-2), the reference plan (when the
data has one: what a perfect warm-start would write), then one row per agent, each rolled
out once with the generator it is given (greedy decoding in `honed eval`). Columns are the
reward's parts as the agents are scored: accuracy r1, memory tokens, tool success r2,
compression r3, validity r4 and the mean chunk reward r1 + r2 + compression_weight·r3 +
validity_weight·r4. The baselines call no tools, so r2, r4 and the chunk reward do not apply
to them (`None`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean

from honed.envs.base import Table
from honed.envs.memory.baselines import BaselineResult
from honed.types import Trajectory

COLUMNS = [
    "memory",
    "accuracy (r1)",
    "memory tokens",
    "tool success (r2)",
    "compression (r3)",
    "validity (r4)",
    "chunk reward",
]


def baseline_row(result: BaselineResult) -> list[object]:
    return [
        result.name,
        result.accuracy,
        result.memory_tokens,
        None,
        result.compression,
        None,
        None,
    ]


def agent_row(label: str, trajectories: Sequence[Trajectory]) -> list[object]:
    def avg(key: str) -> float:
        return mean(t.components[key] for t in trajectories)

    return [
        label,
        mean(t.success for t in trajectories),
        avg("memory_tokens"),
        avg("tool_success"),
        avg("compression"),
        avg("validity"),
        mean(t.reward for t in trajectories),
    ]


def memory_report(
    baselines: Sequence[BaselineResult],
    agents: Mapping[str, Sequence[Trajectory]],
    num_instances: int,
) -> Table:
    """The baselines' rows, then one row per agent (its trajectories on the same instances)."""
    rows = [baseline_row(r) for r in baselines]
    rows += [agent_row(label, list(trajectories)) for label, trajectories in agents.items()]
    return Table(f"{num_instances} instances", list(COLUMNS), rows)
