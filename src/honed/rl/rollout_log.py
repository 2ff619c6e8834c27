"""One GRPO step's groups as the trainer saw them, as a JSON record for `honed view`.

For each group: its environment, item, level, whether the zero-spread filter dropped it, the
spread of its signal, and for each trajectory its reward, success, reward components,
advantage, completion length, truncation, prompt and completion text. Two more things appear
when there is something to show:

- `turns`: the conversation turn by turn, from the trajectory's `info["turns"]` or
  `info["messages"]` (OpenAI chat messages: `role`, `content`, `tool_calls`, `name`,
  `tool_call_id`; honed's own keys `segment`, `reward`, `advantage`, `memory`). A turn naming a
  `segment` gets that segment's reward and advantage. The memory environment writes one user
  turn per chunk, the agent's reply with its parsed tool calls, and the tool results with the
  memory after the chunk.
- `segments`: for trajectories of several model calls, or whose tokens are not all trained on
  (tool results spliced into a completion), each segment's token counts, reward, advantage and
  its completion decoded in `spans` of trained and untrained (masked) tokens.

`honed.runs.rollouts` caps the record's size and writes it; docs/view.md has the format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from honed.rewards.units import group_units
from honed.text import valid_values
from honed.types import Group, Segment, Trajectory

Decode = Callable[[Sequence[int]], str]

# Info keys that are shown as turns, not as the info table.
TURN_KEYS = ("turns", "messages")
TURN_NUMBERS = ("reward", "advantage")


def step_record(
    step: int,
    groups: Sequence[Group],
    advantages: Sequence[Sequence[float]],
    stds: Sequence[float],
    filtered: Sequence[bool],
    decode: Decode,
    staleness: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The record of `groups` (a step's first few, with their per-unit advantages, signal
    spread and filter flags, aligned)."""
    staleness = staleness or [0] * len(groups)
    rows = [
        group_record(g, adv, std, drop, decode, lag)
        for g, adv, std, drop, lag in zip(
            groups, advantages, stds, filtered, staleness, strict=True
        )
    ]
    return valid_values({"step": step, "groups": rows})


def group_record(
    group: Group,
    advantages: Sequence[float],
    std: float,
    filtered: bool,
    decode: Decode,
    staleness: int = 0,
) -> dict[str, Any]:
    """One group: every trajectory with its advantage (per segment when the environment
    rewards each segment, as the memory agent does)."""
    members = group_units(group).members
    by_segment: dict[tuple[int, int], float] = {}
    units_of: dict[int, set[int]] = {}
    for u, covered in enumerate(members):
        for ti, si in covered:
            by_segment[(ti, si)] = float(advantages[u])
            units_of.setdefault(ti, set()).add(u)
    trajectories = []
    for ti, traj in enumerate(group.trajectories):
        units = units_of.get(ti, set())
        advantage = float(advantages[next(iter(units))]) if len(units) == 1 else None
        seg_adv = [by_segment.get((ti, si)) for si in range(len(traj.segments))]
        trajectories.append(trajectory_record(traj, advantage, seg_adv, decode))
    return {
        "env": group.env,
        "item": group.item_key,
        "level": group.level,
        "filtered": bool(filtered),
        "signal_std": _number(std),
        "staleness": int(staleness),
        "trajectories": trajectories,
    }


def trajectory_record(
    traj: Trajectory, advantage: float | None, seg_adv: Sequence[float | None], decode: Decode
) -> dict[str, Any]:
    """One trajectory; `advantage` is None when its segments have advantages of their own."""
    record: dict[str, Any] = {
        "reward": _number(traj.reward),
        "success": _number(traj.success),
        "advantage": advantage,
        "components": {k: _number(v) for k, v in traj.components.items()},
        "length": sum(len(s.completion_ids) for s in traj.segments),
        "truncated": traj.truncated,
        "prompt": traj.prompt_text,
        "completion": traj.completion_text,
    }
    turns = conversation(traj.info, traj.segments, seg_adv)
    if turns is not None:
        record["turns"] = turns
    masked = any(0 in s.mask() for s in traj.segments)
    if len(traj.segments) > 1 or masked:
        record["segments"] = [
            segment_record(s, a, decode, text=turns is None or masked)
            for s, a in zip(traj.segments, seg_adv, strict=True)
        ]
    info = {k: _jsonable(v) for k, v in traj.info.items() if k not in TURN_KEYS}
    if info:
        record["info"] = info
    return record


def segment_record(
    seg: Segment, advantage: float | None, decode: Decode, text: bool = True
) -> dict[str, Any]:
    """A model call's token counts, reward and advantage; with `text`, its completion decoded
    in spans of trained and masked tokens (a masked span is what the environment spliced in:
    tool results, the template's next-turn header)."""
    out: dict[str, Any] = {
        "prompt_tokens": len(seg.prompt_ids),
        "completion_tokens": len(seg.completion_ids),
        "trained_tokens": sum(seg.mask()),
        "reward": None if seg.reward is None else _number(seg.reward),
        "advantage": advantage,
        "truncated": seg.truncated,
    }
    if text:
        spans: list[dict[str, Any]] = []
        for trained, ids in _runs(seg.completion_ids, seg.mask()):
            spans.append({"trained": trained, "text": decode(ids)})
        out["spans"] = spans
    return out


def _runs(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[bool, list[int]]]:
    """`ids` cut where the mask changes: (trained, ids) runs in order."""
    runs: list[tuple[bool, list[int]]] = []
    for token, m in zip(ids, mask, strict=False):
        if runs and runs[-1][0] == bool(m):
            runs[-1][1].append(token)
        else:
            runs.append((bool(m), [token]))
    return runs


def conversation(
    info: Mapping[str, Any], segments: Sequence[Segment], seg_adv: Sequence[float | None]
) -> list[dict[str, Any]] | None:
    """The trajectory's turns from `info["turns"]` or `info["messages"]`, normalised; None when
    it has neither. A turn naming a segment gets that segment's reward and advantage."""
    raw = next((info[k] for k in TURN_KEYS if isinstance(info.get(k), list)), None)
    if raw is None:
        return None
    turns = [_turn(m) for m in raw]
    for turn in turns:
        si = turn.get("segment")
        if isinstance(si, int) and 0 <= si < len(segments):
            if segments[si].reward is not None:
                turn.setdefault("reward", _number(segments[si].reward))
            if seg_adv[si] is not None:
                turn.setdefault("advantage", seg_adv[si])
    return turns


def _turn(message: Any) -> dict[str, Any]:
    """One message in the viewer's form, whatever the environment wrote."""
    if not isinstance(message, Mapping):
        return {"role": "note", "content": _text(message)}
    turn: dict[str, Any] = {
        "role": str(message.get("role", "note")),
        "content": _text(message.get("content")),
    }
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        turn["tool_calls"] = [_call(c) for c in calls]
    for key in ("name", "tool_call_id"):
        if isinstance(message.get(key), str):
            turn[key] = message[key]
    for key in TURN_NUMBERS:
        if isinstance(message.get(key), int | float) and not isinstance(message[key], bool):
            turn[key] = _number(message[key])
    if isinstance(message.get("segment"), int) and not isinstance(message["segment"], bool):
        turn["segment"] = message["segment"]
    if isinstance(message.get("memory"), Mapping):
        turn["memory"] = _jsonable(message["memory"])
    return turn


def _call(call: Any) -> dict[str, Any]:
    """A tool call as {name, arguments (JSON text)}, from OpenAI's wrapper or a flat object."""
    if not isinstance(call, Mapping):
        return {"name": "", "arguments": _text(call)}
    fn = call.get("function") if isinstance(call.get("function"), Mapping) else call
    args = fn.get("arguments", fn.get("parameters", {}))
    out = {"name": _text(fn.get("name", "")), "arguments": _text(args)}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def _text(value: Any) -> str:
    """Message content as text: strings as they are, content parts joined, the rest as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(p, Mapping) for p in value):
        return "".join(_text(p.get("text", "")) for p in value)
    return json.dumps(_jsonable(value), ensure_ascii=False)


def _number(value: Any) -> float | None:
    """A float for the record; None for what JSON cannot hold (NaN, infinities)."""
    f = float(value)
    return f if math.isfinite(f) else None


def _jsonable(value: Any, depth: int = 0) -> Any:
    """Any info value as JSON: containers kept (12 levels deep at most), numbers finite,
    anything else as its text."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return _number(value)
    if depth >= 12:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    return str(value)
