"""The `tools` environment's evaluation table: what the tools are worth, and to whom.

On the same held-out items: the reference solver (the data's reference conversations replayed
through the tools), the `baselines` rules (answers computed from a row without the policy: the
simplest rules that could solve the task), and every agent twice: with its tools, and with
every call answered by an error ("tools disabled", same prompt), so the gap is what the tools
are worth to that agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from statistics import mean
from typing import Any, Protocol

from honed.envs.base import Generator, Table
from honed.envs.multiturn import ChatFormat
from honed.envs.multiturn.episode import ANSWER, MAX_TURNS, Episode, Turn
from honed.types import Group, Item, Message, Trajectory


class Reported(Protocol):
    """What the table needs of a tools environment (`ToolEnv`), so that this module sits below
    the environment it reports on instead of importing it back."""

    reference_field: str | None
    baselines: Mapping[str, Callable[[dict[str, Any]], Any]]

    def prompt(self, item: Item) -> list[Message]: ...

    def chat(self, generator: object) -> ChatFormat: ...

    def reference_episode(self, item: Item, chat: ChatFormat) -> Episode | None: ...

    def trajectories(self, items: Sequence[Item], episodes: list[Episode]) -> list[Trajectory]: ...

    def rollout(
        self,
        items: Sequence[Item],
        generator: Generator,
        num_generations: int,
        seed: int,
        *,
        tools_disabled: bool = False,
    ) -> list[Group]: ...


COLUMNS = [
    "agent",
    "accuracy",
    "reward",
    "turns",
    "tool calls",
    "used tools",
    "tool errors",
    "truncated",
]


def episode_row(episodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per-episode averages of `Episode.trajectory()` records (zeros for none)."""
    count = max(1, len(episodes))
    calls = [sum(len(t["tool_calls"]) for t in e["turns"]) for e in episodes]
    unreadable = [sum(len(t["format_errors"]) for t in e["turns"]) for e in episodes]
    failed = [sum(r["error"] for t in e["turns"] for r in t["tool_results"]) for e in episodes]
    attempted = sum(calls) + sum(unreadable)
    return {
        "turns": sum(len(e["turns"]) for e in episodes) / count,
        "tool_calls": sum(calls) / count,
        "used_tools": sum(c > 0 for c in calls) / count,
        "tool_error_rate": (sum(failed) + sum(unreadable)) / attempted if attempted else 0.0,
        "format_errors": sum(unreadable) / count,
        "truncated": sum(bool(e["truncated"]) for e in episodes) / count,
        "max_turns": sum(e["stop"] == MAX_TURNS for e in episodes) / count,
    }


def table_row(label: str, trajectories: Sequence[Trajectory]) -> list[Any]:
    stats = episode_row([t.info["episode"] for t in trajectories])
    return [
        label,
        mean(t.success for t in trajectories),
        mean(t.reward for t in trajectories),
        stats["turns"],
        stats["tool_calls"],
        stats["used_tools"],
        stats["tool_error_rate"],
        stats["truncated"],
    ]


def answered(env: Reported, items: Sequence[Item], answers: Sequence[str]) -> list[Trajectory]:
    """Trajectories of one final answer per item, with no tool call, scored as any other."""
    episodes = []
    for item, answer in zip(items, answers, strict=True):
        episode = Episode(env.prompt(item), [])
        episode.turns.append(Turn(answer, content=answer))
        episode.messages.append({"role": "assistant", "content": answer})
        episode.stop = ANSWER
        episodes.append(episode)
    return env.trajectories(items, episodes)


def tool_report(
    env: Reported, agents: Mapping[str, Generator], items: list[Item], seed: int
) -> Table:
    rows = []
    if agents and env.reference_field is not None:
        chat = env.chat(next(iter(agents.values())))
        replayed = [(item, env.reference_episode(item, chat)) for item in items]
        kept = [(item, e) for item, e in replayed if e is not None]
        if kept:
            trajectories = env.trajectories([i for i, _ in kept], [e for _, e in kept])
            rows.append(table_row("reference solver", trajectories))
    for label, rule in env.baselines.items():
        answers = [str(rule(dict(item.data))) for item in items]
        rows.append(table_row(f"rule: {label}", answered(env, items, answers)))
    for label, generator in agents.items():
        for disabled in (False, True):
            groups = env.rollout(items, generator, 1, seed, tools_disabled=disabled)
            name = f"{label}, tools disabled" if disabled else label
            rows.append(table_row(name, [g.trajectories[0] for g in groups]))
    return Table("tools: reference, rules and agents", COLUMNS, rows)
