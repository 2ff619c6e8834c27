"""Text that came from a model or a server, made safe before honed hashes, tokenises, parses or
writes it.

Two things in such text can end a run: code points that are not valid UTF-8 (a JSON escape like
`"\\ud800"` decodes to a lone surrogate, which `str.encode` refuses), and sheer size handed to a
repair routine whose cost grows faster than linearly. `valid_text` replaces the first with
U+FFFD; `MAX_REPAIR_CHARS` bounds the second, and longer spans count as unreadable.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")

# Longest text handed to json_repair. Tool-call and edit replies are far shorter; junk longer
# than this is counted as invalid instead of repaired.
MAX_REPAIR_CHARS = 8_000


def valid_text(text: str) -> str:
    """`text` with every code point that cannot be encoded as UTF-8 (in a Python string, only
    the surrogates U+D800..U+DFFF) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def valid_values(value: Any) -> Any:
    """Decoded JSON with every string (keys included) made `valid_text`, without recursion (a
    reply may nest thousands of levels)."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = valid_text(item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
        elif isinstance(item, dict):
            cleaned = {valid_text(k) if isinstance(k, str) else k: v for k, v in item.items()}
            item.clear()
            item.update(cleaned)
            stack.extend((item, k) for k in item)
    return root[0]
