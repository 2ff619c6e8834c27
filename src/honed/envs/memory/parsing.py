"""Reading tool calls out of whatever the model wrote, without ever raising.

A policy in training writes anything: a clean JSON list, a single call, several calls spread
through prose, near-JSON (single quotes, missing commas, a list cut off at the length limit),
braces inside quoted strings, or plain garbage. `parse_calls` reads, in order:

0. the official Mem-α agent's calls, Qwen-Agent's function-call format (`agent.py` and
   `memalpha/llm_agent/generation.py` of wangyu-ustc/Mem-alpha at 9c0e1f6):

       ✿FUNCTION✿: new_memory_insert
       ✿ARGS✿: {"memory_type": "semantic_memory", "content": "..."}

   any number of them; as the official loop does, everything from the first `✿RESULT✿` on is
   dropped (results the model imagines), arguments end at the next `✿` marker, text after their
   last `}` is dropped, and broken JSON is repaired;
1. the whole reply (what is left of it) as JSON;
2. every top-level `[...]` / `{...}` span, found by a scanner that skips brackets inside
   double-quoted strings (so Hermes `<tool_call>{...}</tool_call>` blocks, what chat templates
   with tools teach, are read too); a span that is not valid JSON is repaired with
   `json_repair`, and so is an unclosed span at the end (a reply truncated mid-call).

Lists are flattened, `{"calls": [...]}` / `{"tool_calls": [...]}` wrappers are opened, and each
object becomes a `ToolCall`. Objects that look like no call at all (no `name`, `function`, or
compact key) still count as failed calls when a real call sits beside them, so junk in a list
costs tool success; a reply with no call-shaped object at all gives zero calls and
`failed=True`, except the explicit empty list `[]`, which is a valid "nothing to store".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from honed.envs.memory.tools import ToolCall, call_from_object
from honed.text import RepairBudget, valid_text, valid_values

_CALL_KEYS = ("name", "function", "i", "u", "d")
# Qwen-Agent's function-call markers, as the official agent matches them (agent.py).
FN_NAME, FN_ARGS, FN_RESULT, FN_EXIT = "✿FUNCTION✿", "✿ARGS✿", "✿RESULT✿", "✿RETURN✿"
_OFFICIAL = re.compile(
    rf"{FN_NAME}:\s*([^\n]+?)\s*{FN_ARGS}:\s*([^✿]*?)\s*(?={FN_EXIT}|{FN_NAME}|$)", re.DOTALL
)
_OPEN, _CLOSE = "[{", "]}"


@dataclass
class ParseResult:
    """The calls found in a reply; `failed` when nothing in it could be read as calls."""

    calls: list[ToolCall] = field(default_factory=list)
    failed: bool = False
    repaired: bool = False


def parse_calls(text: str) -> ParseResult:
    """The tool calls in a model reply (see the module docstring); never raises.

    Hostile replies are counted as failed, not raised: numbers too long for Python's int
    conversion limit and nesting deeper than the recursion limit (`ValueError`,
    `RecursionError`), spans beyond what the reply's `RepairBudget` has left (not repaired:
    the repair is slower than linear); strings are made valid UTF-8 before anything uses them.
    """
    try:
        return _parse(valid_text(text))
    except (ValueError, RecursionError):
        return ParseResult([], failed=True)


def _parse(text: str) -> ParseResult:
    budget = RepairBudget()
    official, text = _official_calls(text, budget)
    values = [(valid_values(v), r) for v, r in [*official, *_json_values(text, budget)]]
    repaired = any(r for _, r in values)
    objects = [o for value, _ in values for o in _flatten(value)]
    if not any(_call_shaped(o) for o in objects):
        # Only a strictly valid empty list is a deliberate "nothing to store".
        clean_empty = any(not r and not _flatten(v) and isinstance(v, list) for v, r in values)
        return ParseResult([], failed=not (clean_empty and not objects), repaired=repaired)
    return ParseResult([call_from_object(o) for o in objects], failed=False, repaired=repaired)


def _official_calls(text: str, budget: RepairBudget) -> tuple[list[tuple[object, bool]], str]:
    """The `✿FUNCTION✿` calls in `text` as `{"name", "arguments"}` objects, each with whether
    its arguments needed repair, and the text without them (what other formats may hold)."""
    text = text.split(FN_RESULT)[0]
    if FN_NAME not in text:
        return [], text
    calls: list[tuple[object, bool]] = []
    for match in _OFFICIAL.finditer(text):
        raw = match.group(2).strip()
        if raw.startswith("{") and raw.rfind("}") > 0:
            raw = raw[: raw.rfind("}") + 1]  # a trailing comment, as the official agent drops
        arguments, repaired = _arguments(raw, budget)
        calls.append(({"name": match.group(1).strip(), "arguments": arguments}, repaired))
    rest = text[: text.find(FN_NAME)]
    return calls, rest


def _arguments(raw: str, budget: RepairBudget) -> tuple[object, bool]:
    """A call's arguments text as an object (repaired if need be); `{}` when unreadable, so
    the call fails on its missing arguments instead of vanishing."""
    try:
        return json.loads(raw), False
    except (ValueError, RecursionError):
        pass
    value = budget.repair(raw)
    return (value if isinstance(value, dict) else {}), True


def _call_shaped(obj: object) -> bool:
    return isinstance(obj, dict) and any(k in obj for k in _CALL_KEYS)


def _flatten(value: object) -> list[object]:
    if isinstance(value, list):
        return [o for v in value for o in _flatten(v)]
    if isinstance(value, dict):
        for key in ("calls", "tool_calls"):
            if isinstance(value.get(key), list) and len(value) == 1:
                return _flatten(value[key])
    return [value]


def _json_values(text: str, budget: RepairBudget) -> list[tuple[object, bool]]:
    """JSON lists and objects in `text`, each with whether it needed repair."""
    text = text.strip()
    try:
        value = json.loads(text)
        if isinstance(value, list | dict):
            return [(value, False)]
    except (ValueError, RecursionError):
        pass
    values: list[tuple[object, bool]] = []
    for span in _spans(text):
        try:
            values.append((json.loads(span), False))
            continue
        except (ValueError, RecursionError):
            pass
        value = budget.repair(span)
        if isinstance(value, list | dict):
            values.append((value, True))
    return values


def _spans(text: str) -> list[str]:
    """Top-level bracketed spans; brackets inside double-quoted strings do not count."""
    spans, start, depth, in_string, escaped = [], -1, 0, False, False
    for i, ch in enumerate(text):
        if depth and in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch in _OPEN:
            if depth == 0:
                start = i
            depth += 1
        elif depth and ch == '"':
            in_string = True
        elif depth and ch in _CLOSE:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    if depth:
        spans.append(text[start:])  # unclosed at the end: a truncated reply
    return spans
