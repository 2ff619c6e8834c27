"""Reading the tool calls out of a model's turn, in the format its chat template taught it.

Two formats cover most open tool-calling models:

- `hermes` (Qwen2.5, Qwen3, Hermes, and honed's tiny policy): any number of
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in the turn, with free text
  around them (the text is the turn's content);
- `llama3_json` (Llama 3.1 / 3.2 with JSON tool calls): the whole turn is one JSON object
  `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`), or several separated
  by `;`. A turn that does not start with `{` is a plain answer.

A policy in training writes anything, so parsing never raises. JSON that does not parse is
repaired with `json_repair` (single quotes, a missing brace, a trailing comma) and the call is
counted as repaired; what still cannot be read as `{"name": <string>, "arguments": <object>}`
becomes a format error, which the environment shows the model as an error message (the episode
goes on) and counts. A call is never dropped silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from honed.text import RepairBudget, valid_text, valid_values

ToolFormat = Literal["hermes", "llama3_json"]
TOOL_FORMATS: tuple[str, ...] = get_args(ToolFormat)

_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
# How much of an unreadable call an error message quotes back to the model.
_QUOTED_CHARS = 120


@dataclass
class ToolCall:
    """One call the model asked for: a tool name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def message(self) -> dict[str, Any]:
        """The call as an OpenAI `tool_calls` entry (what chat templates and rewards read)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ParsedTurn:
    """What one model turn says: its text content, the calls it makes, and the calls it tried to
    make but that could not be read (one message each, shown to the model)."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    repaired: int = 0

    @property
    def final(self) -> bool:
        """A turn without any call or attempted call is the episode's answer."""
        return not self.calls and not self.errors


def parse_tool_calls(text: str, tool_format: str) -> ParsedTurn:
    """The calls in a model turn written in `tool_format` (see the module docstring)."""
    text = valid_text(text)
    if tool_format == "hermes":
        return _parse_hermes(text)
    if tool_format == "llama3_json":
        return _parse_llama3_json(text)
    raise ValueError(f"unknown tool format {tool_format!r}; known: {', '.join(TOOL_FORMATS)}")


def _parse_hermes(text: str) -> ParsedTurn:
    blocks = list(_HERMES_BLOCK.finditer(text))
    content = _HERMES_BLOCK.sub("", text).replace("</tool_call>", "").strip()
    turn = ParsedTurn(content)
    budget = RepairBudget()
    for block in blocks:
        _read_calls(block.group(1).strip(), turn, budget)
    return turn


def _parse_llama3_json(text: str) -> ParsedTurn:
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :].lstrip()
    if not body.startswith(("{", "[")):
        return ParsedTurn(text.strip())
    values, rest = _json_sequence(body)
    if values and not rest and not any(_call_shaped(v) for v in _flatten(values)):
        return ParsedTurn(text.strip())  # a plain answer that happens to be JSON
    turn = ParsedTurn("")
    for value in values:
        _add_calls(value, turn, repaired=False)
    if rest:
        _read_calls(rest, turn, RepairBudget())
    return turn


def _json_sequence(body: str) -> tuple[list[Any], str]:
    """Complete JSON values at the start of `body`, separated by `;` or whitespace, and the
    unread remainder (empty when all of it parsed)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while position < len(body):
        try:
            value, end = decoder.raw_decode(body, position)
        except (ValueError, RecursionError):
            break
        values.append(valid_values(value))
        position = end
        while position < len(body) and (body[position].isspace() or body[position] == ";"):
            position += 1
    return values, body[position:].strip()


def _read_calls(body: str, turn: ParsedTurn, budget: RepairBudget) -> None:
    """Add the call(s) written in `body` to `turn`, repairing broken JSON if needed (within
    the reply's `budget`)."""
    try:
        _add_calls(valid_values(json.loads(body)), turn, repaired=False)
        return
    except (ValueError, RecursionError):
        pass
    value = _repair(body, budget)
    if value is None:
        turn.errors.append(_unreadable(body, "it is not valid JSON"))
        return
    _add_calls(value, turn, repaired=True)


def _repair(body: str, budget: RepairBudget) -> Any:
    value = budget.repair(body)
    return valid_values(value) if isinstance(value, dict | list) and value else None


def _flatten(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        out.extend(value if isinstance(value, list) else [value])
    return out


def _call_shaped(value: Any) -> bool:
    return isinstance(value, dict) and "name" in value


def _add_calls(value: Any, turn: ParsedTurn, repaired: bool) -> None:
    """`value` (an object or a list of objects) as calls, or errors for what is not one."""
    for obj in value if isinstance(value, list) else [value]:
        call, problem = _call_from(obj)
        if call is None:
            turn.errors.append(_unreadable(json.dumps(obj, ensure_ascii=False), problem))
        else:
            turn.calls.append(call)
            turn.repaired += int(repaired)


def _call_from(obj: Any) -> tuple[ToolCall | None, str]:
    """A `ToolCall` from a decoded object, or why it is not one.

    Accepts `arguments` or `parameters` (Llama's name), as an object or as a JSON string of one
    (the OpenAI wire format), and `{"function": {...}}` wrappers.
    """
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    if not isinstance(obj, dict):
        return None, "a call must be a JSON object"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, 'it has no "name"'
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = valid_values(json.loads(arguments)) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return None, '"arguments" is a string that is not a JSON object'
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, '"arguments" must be a JSON object'
    return ToolCall(name.strip(), arguments), ""


def openai_call(entry: Any) -> tuple[ToolCall | None, str]:
    """One entry of an OpenAI `tool_calls` list (a server's native tool calling) as a
    `ToolCall` with the server's `id`, or `None` and the error message the model is shown."""
    call, problem = _call_from(entry)
    if call is None:
        return None, _unreadable(json.dumps(valid_values(entry), ensure_ascii=False), problem)
    ident = entry.get("id") if isinstance(entry, dict) else None
    call.id = ident if isinstance(ident, str) else ""
    return call, ""


def _unreadable(body: str, problem: str) -> str:
    shown = body if len(body) <= _QUOTED_CHARS else body[:_QUOTED_CHARS] + "…"
    return f"could not read the tool call {shown!r}: {problem}"


def format_calls(calls: list[ToolCall], tool_format: str) -> str:
    """Calls written the way `tool_format` reads them back: what a reference turn says when the
    chat template itself does not render tool calls."""
    if tool_format == "hermes":
        return "\n".join(
            "<tool_call>\n"
            + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
            + "\n</tool_call>"
            for c in calls
        )
    if tool_format == "llama3_json":
        return "; ".join(
            json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False)
            for c in calls
        )
    raise ValueError(f"unknown tool format {tool_format!r}; known: {', '.join(TOOL_FORMATS)}")
