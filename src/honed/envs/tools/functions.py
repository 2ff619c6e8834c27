"""Plain Python functions as tools: their JSON schemas, their arguments checked, their results
as text.

A tool is a typed function with a Google-style docstring; `transformers.utils.get_json_schema`
turns the signature and docstring into the schema the chat template renders, so the model sees
the same description a user reads in the code:

    def lookup(name: str) -> str:
        \"\"\"The row of the table for one product.

        Args:
            name: the product's name, e.g. "kx7"
        \"\"\"

`async def` tools are allowed (they run concurrently, `ToolBox`). Arguments the model sends are
checked against the signature and the schema's basic types before the call, so that a wrong
argument is an error message the model can learn from rather than an exception deep inside the
user's code.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from transformers.utils import get_json_schema

from honed.errors import HonedError
from honed.reach import ImportSpec
from honed.user_code import load_object

# JSON-schema basic types and the Python values that satisfy them (bool is not a number here).
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class Tool:
    """One tool: the function, its name and JSON schema, and how to check a call's arguments."""

    def __init__(self, fn: Callable[..., Any], spec: str = "") -> None:
        self.fn = fn
        self.spec = spec or getattr(fn, "__qualname__", repr(fn))
        self.name = getattr(fn, "__name__", "")
        try:
            self.schema: dict[str, Any] = get_json_schema(fn)
        except Exception as exc:  # transformers' docstring and type-hint parsing errors
            raise HonedError(
                f"tool '{self.spec}': cannot build its JSON schema ({exc}); a tool needs type "
                "hints on every argument and a docstring with an 'Args:' section describing each"
            ) from exc
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self.properties: dict[str, Any] = self.schema["function"]["parameters"].get(
            "properties", {}
        )

    def argument_problem(self, arguments: dict[str, Any]) -> str | None:
        """Why `arguments` cannot be passed to the tool, or `None` if they can."""
        try:
            self.signature.bind(**arguments)
        except TypeError as exc:
            return str(exc)
        for key, value in arguments.items():
            allowed = _allowed(self.properties.get(key, {}))
            if allowed and not _matches(value, allowed):
                return f"'{key}' must be {' or '.join(allowed)}, got {json.dumps(value)[:60]}"
        return None


def _allowed(schema: dict[str, Any]) -> list[str]:
    """The basic JSON types a property's schema accepts (none: anything goes)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    return [k for k in kinds if k in _TYPES or k == "null"]


def _matches(value: Any, allowed: list[str]) -> bool:
    if value is None:
        return "null" in allowed
    if isinstance(value, bool):
        return "boolean" in allowed
    return any(k != "null" and isinstance(value, _TYPES[k]) for k in allowed)


def load_tools(specs: Sequence[Any], where: str) -> list[Tool]:
    """The tools named by `specs` (`module:function`, `path/to/file.py:function`, or the
    functions themselves); names must be unique. An empty list is allowed: the same task
    without tools (no tool description in the prompt, every call answered by an error) is the
    baseline that says what the tools are worth."""
    if isinstance(specs, str) or not isinstance(specs, Sequence):
        raise HonedError(f"{where}: tools must be a list of 'module:function' names")
    tools: list[Tool] = []
    for spec in specs:
        fn = load_object(ImportSpec.named(spec, "tool"), "tool") if isinstance(spec, str) else spec
        if not callable(fn):
            raise HonedError(f"{where}: tool '{spec}' is not callable")
        tool = Tool(fn, spec if isinstance(spec, str) else "")
        if any(t.name == tool.name for t in tools):
            raise HonedError(f"{where}: two tools are named '{tool.name}'; tool names must differ")
        tools.append(tool)
    return tools


def result_text(value: Any, limit: int) -> str:
    """A tool's return value as the text the model reads: strings as they are, anything else
    as JSON; cut at `limit` characters with a note saying so."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = str(value)
    if len(text) > limit:
        text = text[:limit] + f"… (cut at {limit} characters)"
    return text
