"""Text that came from a model or a server, made safe before honed hashes, tokenises, parses or
writes it.

Secrets first: a server or proxy may echo the request's API key back (in an error body, a reply,
a header). `redact` replaces the keys honed was given (`register_secret`) and anything shaped
like a credential header; the chat client passes every string a server sends, and every error
message it makes from one, through it before anyone logs, writes or reads it.

Two things in such text can end a run: code points that are not valid UTF-8 (a JSON escape like
`"\\ud800"` decodes to a lone surrogate, which `str.encode` refuses), and sheer size handed to a
repair routine whose cost grows faster than linearly. `valid_text` replaces the first with
U+FFFD; `RepairBudget` bounds the second: one reply's spans together get `MAX_REPAIR_CHARS`
characters of repair, and what is beyond counts as unreadable.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import json_repair

_SURROGATE = re.compile("[\ud800-\udfff]")

# Most text handed to json_repair for one reply, all its spans together. Tool-call and edit
# replies are far shorter; junk beyond this is counted as invalid instead of repaired.
MAX_REPAIR_CHARS = 8_000


class RepairBudget:
    """json_repair for one reply: its spans share `MAX_REPAIR_CHARS` characters, so a reply of
    many broken spans costs what one long span does (a cap per span let a 64 k-character reply
    of 8 such spans take 14 s)."""

    def __init__(self, chars: int = MAX_REPAIR_CHARS) -> None:
        self.left = chars

    def repair(self, text: str) -> Any:
        """`text` repaired into JSON, or `None` when it is empty, is more than what is left of
        the budget, or makes json_repair fail (its own failures on hostile input must not
        escape)."""
        if not text or len(text) > self.left:
            return None
        self.left -= len(text)
        try:
            return json_repair.loads(text)
        except Exception:
            return None


def valid_text(text: str) -> str:
    """`text` with every code point that cannot be encoded as UTF-8 (in a Python string, only
    the surrogates U+D800..U+DFFF) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """Decoded JSON with every string (keys included) replaced by `fn(string)`, in place where it
    can be, without recursion (a reply may nest thousands of levels)."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = fn(item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
        elif isinstance(item, dict):
            cleaned = {fn(k) if isinstance(k, str) else k: v for k, v in item.items()}
            item.clear()
            item.update(cleaned)
            stack.extend((item, k) for k in item)
    return root[0]


def valid_values(value: Any) -> Any:
    """Decoded JSON with every string (keys included) made `valid_text`."""
    return map_strings(value, valid_text)


# ---------------------------------------------------------------- secrets

REDACTED = "[REDACTED]"
# Keys shorter than this are placeholders local servers accept ("EMPTY", "none"), not secrets:
# replacing them everywhere would garble ordinary words in replies.
MIN_SECRET_CHARS = 8
# A header or field that carries credentials, as a server or proxy may echo it back:
# `Authorization: Bearer ...`, `"api_key": "..."`, `x-api-key=...`; and a bare `Bearer <token>`
# whose token has a digit (so that "bearer instruments" in a reply is left alone).
_CREDENTIAL = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key|api[-_]?key|access[-_]?token)"
    r"([\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;\\}]+"
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}")
_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Make `redact` replace `value` (an API key read from the environment) wherever it
    appears; values shorter than `MIN_SECRET_CHARS` are placeholders and are ignored."""
    value = value.strip()
    if len(value) >= MIN_SECRET_CHARS:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """`text` with every registered secret and every credential-carrying header or field
    (`Authorization: Bearer ...`, `api_key=...`) replaced by `REDACTED`.

    The one step every string from a server or an exception passes before honed logs it,
    writes it or shows it to a model: a server or proxy that echoes the request's key in an
    error body, a reply or a header must not put it into a run directory or on a terminal.
    """
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _CREDENTIAL.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


# what `str.splitlines` breaks a line at, each as its escape
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """`text` with every line break escaped (`\\n`, `\\u2028`, ...): an error message that
    quotes a value from a config or a server stays the one line the CLI promises."""
    return text.translate(_LINE_BREAKS)


# ---------------------------------------------------------------- long text


def cut_middle(text: str, max_chars: int) -> str:
    """`text` if it is at most `max_chars` long, else its head and tail around a marker that
    says how many characters were left out, all within `max_chars` (the head and tail alone
    when the limit leaves no room for the marker). Answers tend to end a reply and the task's
    framing to begin it, so both ends are what a reader or a scorer needs."""
    if len(text) <= max_chars:
        return text
    marker = f"\n[... {len(text)} characters left out ...]\n"  # the longest it can be
    keep = max(max_chars - len(marker), 0)
    head, tail = keep - keep // 2, keep // 2
    left_out = len(text) - head - tail
    if keep == 0:
        return text[:max_chars]
    return f"{text[:head]}\n[... {left_out} characters left out ...]\n{text[len(text) - tail :]}"
