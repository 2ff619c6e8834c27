"""Edit operations on a skill document, and their parsing from untrusted LLM output.

An edit is the JSON object the reflector (an LLM) proposes:
`{"op": "append" | "insert_after" | "replace" | "delete", "target": "<exact text>",
"content": "<text>"}`. `target` is unused by `append`, `content` by `delete`. Any other keys
(`rationale`, `support_count`, ...) are kept in `Edit.meta`, so the merge and rank stages can
carry them along.

LLM output is untrusted: it may wrap the JSON in prose or a code fence, break the JSON syntax,
nest the edit list under `patch`, or invent ops. `parse_edits` never raises: it returns the valid
edits and one reason per thing it had to drop, so a bad reflection costs one minibatch's
proposals, not the run, and the reasons end up in the step's record instead of being swallowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from honed.text import RepairBudget, valid_text, valid_values

OPS = ("append", "insert_after", "replace", "delete")
NEEDS_TARGET = ("insert_after", "replace", "delete")
NEEDS_CONTENT = ("append", "insert_after", "replace")

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class InvalidEdit(ValueError):
    """An edit object that cannot be applied; the message is the reason, for the apply report."""


@dataclass(frozen=True)
class Edit:
    """One validated edit. Construct it with `Edit.from_raw` to validate untrusted input."""

    op: str
    target: str = ""
    content: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_raw(cls, raw: Any) -> Edit:
        """Validate one edit object from JSON; raises `InvalidEdit` with the reason."""
        if isinstance(raw, Edit):
            return raw
        if not isinstance(raw, Mapping):
            raise InvalidEdit(f"malformed edit: expected a JSON object, got {type(raw).__name__}")
        op = raw.get("op")
        if not isinstance(op, str) or not op.strip():
            raise InvalidEdit("malformed edit: missing 'op'")
        op = op.strip().lower()
        if op not in OPS:
            raise InvalidEdit(f"unknown op {raw.get('op')!r} (expected one of {', '.join(OPS)})")
        values = {}
        for key in ("target", "content"):
            value = raw.get(key)
            if value is None:
                value = ""
            if not isinstance(value, str):
                raise InvalidEdit(f"malformed edit: '{key}' must be a string")
            values[key] = value
        if op in NEEDS_TARGET and not values["target"].strip():
            raise InvalidEdit(f"'{op}' needs a non-empty target")
        if op in NEEDS_CONTENT and not values["content"].strip():
            hint = " (use 'delete' to remove text)" if op == "replace" else ""
            raise InvalidEdit(f"'{op}' needs non-empty content{hint}")
        meta = {k: v for k, v in raw.items() if k not in ("op", "target", "content")}
        return cls(op, values["target"], values["content"], meta)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: `op`, `target` and `content` where they matter, then the meta keys."""
        out: dict[str, Any] = {"op": self.op}
        if self.op != "append":
            out["target"] = self.target
        if self.op != "delete":
            out["content"] = self.content
        out.update(self.meta)
        return out


@dataclass
class ParsedEdits:
    """The valid edits found in an LLM reply, and why anything else was dropped."""

    edits: list[Edit]
    problems: list[str]
    data: Any = None  # the decoded JSON value, for the other fields a reply carries


def decode_json(text: str) -> Any:
    """JSON from an LLM reply: plain, inside a code fence, or repaired as a last resort
    (`None` when there is none); the rank and consolidation stages read their replies with it.
    Never raises: text is made valid UTF-8, and what cannot be read safely is `None`."""
    text = valid_text(text)
    candidates = [text.strip()]
    fenced = _FENCE.search(text)
    if fenced:
        candidates.insert(0, fenced.group(1).strip())
    for candidate in candidates:
        try:
            return valid_values(json.loads(candidate))
        except (ValueError, RecursionError):  # huge numbers and deep nesting included
            continue
    # repair costs more than linear time: a reply longer than the budget is junk
    repaired = RepairBudget().repair(candidates[0])
    # json_repair turns prose into "" or a bare string; that is no JSON object at all.
    return valid_values(repaired) if isinstance(repaired, dict | list) else None


def edit_list(data: Any) -> list[Any] | None:
    """Where the edits live: a list, `{"edits": [...]}`, `{"patch": {"edits": [...]}}`, or a
    single edit object."""
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        return None
    patch = data.get("patch")
    if isinstance(patch, dict) and isinstance(patch.get("edits"), list):
        return patch["edits"]
    if isinstance(data.get("edits"), list):
        return data["edits"]
    if "op" in data:
        return [data]
    return None


def parse_edits(raw: Any) -> ParsedEdits:
    """Edits from an LLM reply (text) or decoded JSON; never raises.

    Accepts a JSON list of edits, an object with `edits` or `patch.edits`, or one edit object,
    optionally in a Markdown code fence or surrounded by prose; broken JSON is repaired with
    `json_repair` when plain decoding fails. Each dropped edit gets a problem line such as
    `edit 2: unknown op 'rewrite' (...)`; a reply with no edit list at all gets one line.
    """
    data = raw
    if isinstance(raw, str):
        try:
            data = decode_json(raw)
        except Exception as exc:  # json_repair on hostile input: report, never crash
            return ParsedEdits([], [f"could not decode JSON from the reply: {exc}"])
        if data is None:
            return ParsedEdits([], ["no JSON object or list found in the reply"])
    items = edit_list(data)
    if items is None:
        return ParsedEdits(
            [], ["no edit list found (expected a list, 'edits' or 'patch.edits')"], data
        )
    edits, problems = [], []
    for i, item in enumerate(items, start=1):
        try:
            edits.append(Edit.from_raw(item))
        except InvalidEdit as exc:
            problems.append(f"edit {i}: {exc}")
    return ParsedEdits(edits, problems, data)
