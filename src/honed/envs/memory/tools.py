"""The three memory tools: their schemas, the call formats, and their execution.

The tools are described to the model as OpenAI function schemas (`TOOL_SCHEMAS`). A call can
be written in either of two formats, and the parser accepts both, mixed:

- **full**: `{"name": "memory_insert", "arguments": {"memory_type": "semantic", "content":
  "Ann lives in Oslo"}}` (also the OpenAI `{"type": "function", "function": {...}}` wrapper,
  with `arguments` as an object or a JSON string), for chat models;
- **compact**: one short object per call, for small policies that must spend few characters:
  `{"i": "s", "c": "Ann lives in Oslo"}` is `memory_insert(semantic, ...)` (`"e"` for episodic),
  `{"u": "s1", "c": "Ann lives in Lima"}` is `memory_update` of entry `s1` (`"u": "core"` sets
  the core text), `{"d": "s1"}` is `memory_delete`. The store follows from the id's prefix.

A reply is a JSON list of calls; `[]` means "nothing worth keeping".

**Quotes.** In either format, a content that is a whole number `k` (`{"i": "s", "c": 2}`)
stands for the k-th sentence of the chunk being read (1-based; sentences end at `.`, `!` or
`?` followed by a space; the closing `.` is dropped), copied verbatim. A small policy trained
from scratch learns *what* to keep long before it learns to spell a name it has never seen
character by character; quoting lets it store facts exactly while it learns. A quote with no
such sentence fails with that reason. Chat models may use it too; nothing requires it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from honed.envs.memory.store import CORE, ID_PREFIX, Memory, ToolResult, store_name, store_of_id

INSERT, UPDATE, DELETE = "memory_insert", "memory_update", "memory_delete"
TOOLS = (INSERT, UPDATE, DELETE)
SEARCH = "search_memory"  # the official agent's question-answering tool
_TOOL_ALIASES = {"new_memory_insert": INSERT, "insert": INSERT, "update": UPDATE, "delete": DELETE}
_ARG_ALIASES = {"type": "memory_type", "id": "memory_id", "text": "content"}

_TYPE = {"type": "string", "enum": ["core", "semantic", "episodic"]}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": INSERT,
            "description": "Add a new entry: an atomic fact to semantic memory, or an event "
            "with its time to episodic memory. Exact duplicates are skipped.",
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_type": {**_TYPE, "enum": ["semantic", "episodic"]},
                    "content": {"type": "string"},
                },
                "required": ["memory_type", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": UPDATE,
            "description": "Replace the text of entry memory_id, or rewrite the core memory "
            "(no id needed; capped at a token budget).",
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_type": _TYPE,
                    "new_content": {"type": "string"},
                    "memory_id": {"type": "string"},
                },
                "required": ["memory_type", "new_content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": DELETE,
            "description": "Remove entry memory_id (for core: clear it).",
            "parameters": {
                "type": "object",
                "properties": {"memory_type": _TYPE, "memory_id": {"type": "string"}},
                "required": ["memory_type"],
            },
        },
    },
]


# The official agent's tools as it offers them (functions.py of wangyu-ustc/Mem-alpha at 9c0e1f6:
# names, argument names, enums, required arguments; descriptions in our words). The `chat`
# prompt style offers these through the policy's chat template.
_OFFICIAL_TYPE = {"type": "string", "enum": ["core_memory", "semantic_memory", "episodic_memory"]}
OFFICIAL_TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "new_memory_insert",
            "description": "Add a new entry to semantic or episodic memory (the core memory "
            "cannot be inserted into, only updated).",
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_type": {
                        "type": "string",
                        "enum": ["semantic_memory", "episodic_memory"],
                        "description": "semantic_memory for facts, episodic_memory for events",
                    },
                    "content": {"type": "string", "description": "the entry's text"},
                },
                "required": ["memory_type", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": UPDATE,
            "description": "Replace the core memory's paragraph, or the text of the semantic "
            "or episodic entry memory_id.",
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_type": {**_OFFICIAL_TYPE, "description": "the store"},
                    "new_content": {"type": "string", "description": "the new text"},
                    "memory_id": {
                        "type": "string",
                        "description": "the entry's id (not needed for core_memory)",
                    },
                },
                "required": ["memory_type", "new_content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": DELETE,
            "description": "Clear the core memory, or remove the semantic or episodic entry "
            "memory_id.",
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_type": {**_OFFICIAL_TYPE, "description": "the store"},
                    "memory_id": {
                        "type": "string",
                        "description": "the entry's id (not needed for core_memory)",
                    },
                },
                "required": ["memory_type"],
            },
        },
    },
]


def official_call(call: ToolCall) -> dict[str, Any]:
    """A canonical call as the official agent writes it: `new_memory_insert`, `*_memory` types."""
    args = dict(call.arguments)
    store = store_name(args.get("memory_type")) or store_of_id(str(args.get("memory_id", "")))
    if store is not None:
        args["memory_type"] = f"{store}_memory"
    return {"name": "new_memory_insert" if call.name == INSERT else call.name, "arguments": args}


@dataclass
class ToolCall:
    """One call in canonical form: a tool name and its arguments (possibly invalid)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


def call_from_object(obj: object) -> ToolCall:
    """A parsed JSON value as a call; anything unrecognisable becomes a call that will fail."""
    if not isinstance(obj, dict):
        return ToolCall("", {"value": obj})
    if isinstance(obj.get("function"), dict):  # OpenAI wrapper
        obj = obj["function"]
    if "name" in obj:
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {}
        if not isinstance(args, dict):
            args = {}
        name = str(obj["name"])
        return ToolCall(
            _TOOL_ALIASES.get(name, name), {_ARG_ALIASES.get(k, k): v for k, v in args.items()}
        )
    return _from_compact(obj)


def _from_compact(obj: dict[str, Any]) -> ToolCall:
    content = obj.get("c")
    if "i" in obj:
        return ToolCall(INSERT, {"memory_type": obj["i"], "content": content})
    if "u" in obj:
        return ToolCall(UPDATE, {"memory_id": obj["u"], "new_content": content})
    if "d" in obj:
        return ToolCall(DELETE, {"memory_id": obj["d"]})
    return ToolCall("", dict(obj))


def to_compact(call: ToolCall) -> dict[str, Any]:
    """The compact form of a canonical call (see the module docstring)."""
    args = call.arguments
    if call.name == INSERT:
        store = store_name(args["memory_type"])
        return {"i": ID_PREFIX.get(store or "", args["memory_type"]), "c": args["content"]}
    memory_id = args.get("memory_id") or CORE
    if call.name == UPDATE:
        return {"u": memory_id, "c": args["new_content"]}
    return {"d": memory_id}


def format_calls(calls: list[ToolCall], style: str = "compact") -> str:
    """The reply text for `calls`: a JSON list in the compact or the full format."""
    if style == "compact":
        return json.dumps([to_compact(c) for c in calls], separators=(",", ":"))
    return json.dumps(
        [{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False
    )


def execute(memory: Memory, call: ToolCall) -> ToolResult:
    """Run one call against `memory`; a malformed call fails with the reason, never raises."""
    args = call.arguments
    if call.name == SEARCH:
        return ToolResult(
            False, f"{SEARCH} answers questions; it is not available while memorising"
        )
    if call.name not in TOOLS:
        return ToolResult(False, f"unknown tool {call.name!r}" if call.name else "not a tool call")
    memory_id = args.get("memory_id")
    if memory_id is not None and not isinstance(memory_id, str | int):
        return ToolResult(False, "memory_id must be text")
    memory_id = str(memory_id).strip().lower() if memory_id is not None else None
    raw_type = args.get("memory_type")
    store = store_name(raw_type) if raw_type is not None else None
    if store is None and raw_type is None and memory_id:
        store = store_of_id(memory_id)
    if store is None:
        return ToolResult(False, f"unknown memory_type {raw_type!r}")
    if call.name == DELETE:
        return memory.delete(store, memory_id)
    key = "content" if call.name == INSERT else "new_content"
    content = args.get(key, args.get("content"))  # an update written with "content" is clear
    if not isinstance(content, str):
        return ToolResult(False, f"{key} must be text", memory_id, store)
    if call.name == INSERT:
        return memory.insert(store, content)
    return memory.update(store, content, memory_id)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def chunk_sentences(chunk: str) -> list[str]:
    """The chunk's sentences as a quote copies them: split after `.`/`!`/`?`, final `.` dropped."""
    sentences = [s.strip() for s in _SENTENCE_END.split(chunk.strip())]
    return [s[:-1] if s.endswith(".") else s for s in sentences if s]


def _content_key(call: ToolCall) -> str:
    """The argument holding a call's text: `content` (insert, or an update written that way)."""
    return "content" if "content" in call.arguments else "new_content"


def resolve_quote(call: ToolCall, sentences: list[str]) -> ToolCall | str:
    """`call` with a quoted content replaced by its sentence, or the reason it cannot be.

    Calls whose content is not a whole number come back unchanged.
    """
    key = _content_key(call)
    value = call.arguments.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return call
    if not 1 <= value <= len(sentences):
        return f"quote {value}: the chunk has {len(sentences)} sentence(s)"
    return ToolCall(call.name, {**call.arguments, key: sentences[value - 1]})


def quote_calls(calls: list[ToolCall], sentences: list[str]) -> list[ToolCall]:
    """Each call whose content is a sentence of the chunk rewritten as a quote of it."""
    index = {sentence: i + 1 for i, sentence in reversed(list(enumerate(sentences)))}
    out = []
    for call in calls:
        key = _content_key(call)
        quoted = index.get(call.arguments.get(key))  # type: ignore[arg-type]
        out.append(call if quoted is None else ToolCall(call.name, {**call.arguments, key: quoted}))
    return out
