"""The memory table: baselines and agents side by side on the same instances.

Rows: no memory, store-everything, long-context, RAG over raw chunks (top-2), the registered
rules (the rule baseline), the reference plan (when the data has one: what a perfect
warm-start would write), the MemAgent-style rolling memory (written by the last agent's
policy), then one row per agent, each rolled out once with the generator it is given (greedy
decoding in `honed eval`).

Columns: with instances from more than one data set, one accuracy column and one memory-tokens
column per data set (`accuracy: <source>`, `memory tokens: <source>`) first, as Mem-α's tables
give them; then the mean accuracy (r1; over data sets, as Mem-α's average
column), memory tokens, tool success r2, compression r3, validity r4, the mean chunk reward
r1 + r2 + compression_weight·r3 + validity_weight·r4, and the answers that could not be scored
(reader errors: a judge without a verdict, a server that gave up). The baselines call no tools,
so r2, r4 and the chunk reward do not apply to them (`None`). With two agents or more (`honed
eval` on a run: the warm-start, then the trained agent), two last columns give each later
agent's accuracy gain over the first, instance by instance, and its standard error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import mean, stdev

from honed.envs.base import Table
from honed.envs.memory.baselines import BaselineResult, Scored
from honed.types import Trajectory

COLUMNS = [
    "memory",
    "accuracy (r1)",
    "memory tokens",
    "tool success (r2)",
    "compression (r3)",
    "validity (r4)",
    "chunk reward",
    "reader errors",
]


def agent_result(label: str, trajectories: Sequence[Trajectory]) -> BaselineResult:
    """An agent's trajectories as per-instance outcomes, for the shared columns."""
    return BaselineResult(
        label,
        [
            Scored(
                str(t.info.get("source", "honed")),
                t.success,
                t.components["memory_tokens"],
                t.components["compression"],
                int(t.components.get("reader_errors", 0)),
            )
            for t in trajectories
        ],
    )


def _row(result: BaselineResult, sources: list[str], tools: list[float | None]) -> list[object]:
    per_source, tokens = result.by_source, result.tokens_by_source
    return [
        result.name,
        *([per_source.get(s) for s in sources] if len(sources) > 1 else []),
        *([tokens.get(s) for s in sources] if len(sources) > 1 else []),
        result.accuracy,
        result.memory_tokens,
        tools[0],
        result.compression,
        tools[1],
        tools[2],
        result.errors,
    ]


def memory_report(
    baselines: Sequence[BaselineResult],
    agents: Mapping[str, Sequence[Trajectory]],
    num_instances: int,
) -> Table:
    """The baselines' rows, then one row per agent (its trajectories on the same instances)."""
    results = [(r, [None, None, None]) for r in baselines]
    for label, trajectories in agents.items():
        runs = list(trajectories)
        tools = [
            mean(t.components["tool_success"] for t in runs),
            mean(t.components["validity"] for t in runs),
            mean(t.reward for t in runs),
        ]
        results.append((agent_result(label, runs), tools))
    sources = list(dict.fromkeys(s.source for r, _ in results for s in r.scored))
    several = len(sources) > 1
    columns = [COLUMNS[0], *([f"accuracy: {s}" for s in sources] if several else [])]
    columns += [f"memory tokens: {s}" for s in sources] if several else []
    columns += COLUMNS[1:]
    rows = [_row(r, sources, tools) for r, tools in results]  # type: ignore[arg-type]
    if len(agents) > 1:
        first, *later = agents
        columns += [f"accuracy − {first}", "± (paired SE)"]
        start = [t.success for t in agents[first]]
        for row, (result, _) in zip(rows, results, strict=True):
            gain = [t.success for t in agents[result.name]] if result.name in later else None
            row += paired_gain(start, gain) if gain else [None, None]
    return Table(f"{num_instances} instances", columns, rows)


def paired_gain(before: Sequence[float], after: Sequence[float]) -> list[float]:
    """The mean per-instance gain of `after` over `before` on the same instances, and its
    standard error. Paired, because on the same instances the two agents' accuracies move
    together (an instance one finds hard the other mostly does too): the error of the
    difference is below what the two accuracies' own errors would suggest."""
    gains = [b - a for a, b in zip(before, after, strict=True)]
    spread = stdev(gains) if len(gains) > 1 else 0.0
    return [mean(gains), spread / math.sqrt(len(gains))]
