"""The agent's memory: one capped core text plus semantic facts and episodic events.

Mem-α's three stores. *Core* is a single always-visible text, capped at a token budget and
changed only by updates (a delete clears it). *Semantic* holds atomic facts and *episodic*
holds timestamped events; both are unbounded lists of entries with short ids.

Ids are the store's letter and a per-store counter (`s1`, `s2`, `e1`, ...), never reused after
a delete: short enough for a character-level policy to copy from its prompt, and they name
their store, so an update or delete by id cannot hit the wrong list. Every operation returns
a `ToolResult` instead of raising, because the model's mistakes are data (they are scored),
not errors.

Token counts use a pluggable counter. The default, `word_tokens`, counts regex word tokens
(`\\w+`): model-agnostic and cheap; compression ratios are comparable across policies because
memory and input are counted the same way. Pass a tokenizer-backed counter to report subword
tokens instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TokenCounter = Callable[[str], int]

CORE, SEMANTIC, EPISODIC = "core", "semantic", "episodic"
STORES = (CORE, SEMANTIC, EPISODIC)
LISTS = (SEMANTIC, EPISODIC)
ID_PREFIX = {SEMANTIC: "s", EPISODIC: "e"}

# Names a model may use for a store: ours, the official Mem-α ones, and one-letter aliases.
_STORE_ALIASES = {
    **{name: name for name in STORES},
    **{f"{name}_memory": name for name in STORES},
    "c": CORE,
    "s": SEMANTIC,
    "e": EPISODIC,
}
_WORD = re.compile(r"\w+")


def word_tokens(text: str) -> int:
    """The default token counter: the number of `\\w+` word tokens."""
    return len(_WORD.findall(text))


def store_name(name: object) -> str | None:
    """The canonical store for a name the model wrote (`semantic_memory`, `s`, ...), or None."""
    if not isinstance(name, str):
        return None
    return _STORE_ALIASES.get(name.strip().lower())


def store_of_id(memory_id: str) -> str | None:
    """The store an id belongs to, from its prefix (`s3` -> semantic, `core` -> core)."""
    memory_id = memory_id.strip().lower()
    if memory_id == CORE:
        return CORE
    for store, prefix in ID_PREFIX.items():
        if memory_id[:1] == prefix and memory_id[1:].isdigit():
            return store
    return None


@dataclass
class ToolResult:
    """What one memory operation did: success or the reason it failed, and what it wrote."""

    ok: bool
    message: str
    memory_id: str | None = None
    store: str | None = None
    written: str | None = None


class Memory:
    """Three stores with short stable ids, a capped core and duplicate-skipping inserts."""

    def __init__(
        self, core_tokens: int = 512, count: TokenCounter = word_tokens, budget: int | None = None
    ) -> None:
        self.core_tokens = core_tokens
        self.count = count
        self.budget = budget  # tokens of the whole memory; None: unbounded
        self.core = ""
        self.entries: dict[str, dict[str, str]] = {SEMANTIC: {}, EPISODIC: {}}
        self.next_id: dict[str, int] = {SEMANTIC: 1, EPISODIC: 1}

    def insert(self, store: str, content: str) -> ToolResult:
        content = content.strip()
        if store == CORE:
            return ToolResult(False, "core memory is update-only: use memory_update", store=store)
        if not content:
            return ToolResult(False, "empty content", store=store)
        duplicate = self._find(store, content)
        if duplicate is not None:
            return ToolResult(
                False, f"skipped: duplicate of {duplicate}", memory_id=duplicate, store=store
            )
        full = self._over_budget(self.count(content))
        if full:
            return ToolResult(False, full, store=store)
        memory_id = f"{ID_PREFIX[store]}{self.next_id[store]}"
        self.next_id[store] += 1
        self.entries[store][memory_id] = content
        return ToolResult(True, f"inserted {memory_id}", memory_id, store, content)

    def update(self, store: str, content: str, memory_id: str | None = None) -> ToolResult:
        content = content.strip()
        if not content:
            return ToolResult(False, "empty content", memory_id, store)
        if store == CORE:
            text, truncated = self._cap(content)
            full = self._over_budget(self.count(text) - self.count(self.core))
            if full:
                return ToolResult(False, full, CORE, store)
            self.core = text
            note = f" (truncated to {self.core_tokens} tokens)" if truncated else ""
            return ToolResult(True, f"updated core{note}", CORE, store, text)
        if not memory_id:
            return ToolResult(False, f"memory_id is required to update {store}", None, store)
        if memory_id not in self.entries[store]:
            return ToolResult(False, f"no entry {memory_id} in {store}", memory_id, store)
        duplicate = self._find(store, content)
        if duplicate is not None and duplicate != memory_id:
            return ToolResult(False, f"skipped: duplicate of {duplicate}", memory_id, store)
        full = self._over_budget(self.count(content) - self.count(self.entries[store][memory_id]))
        if full:
            return ToolResult(False, full, memory_id, store)
        self.entries[store][memory_id] = content
        return ToolResult(True, f"updated {memory_id}", memory_id, store, content)

    def delete(self, store: str, memory_id: str | None = None) -> ToolResult:
        if store == CORE:
            self.core = ""
            return ToolResult(True, "cleared core", CORE, store)
        if not memory_id:
            return ToolResult(False, f"memory_id is required to delete from {store}", None, store)
        if memory_id not in self.entries[store]:
            return ToolResult(False, f"no entry {memory_id} in {store}", memory_id, store)
        del self.entries[store][memory_id]
        return ToolResult(True, f"deleted {memory_id}", memory_id, store)

    def items(self, store: str) -> list[tuple[str, str]]:
        """(id, text) pairs of a list store, oldest first."""
        return list(self.entries[store].items())

    def others(self, store: str, memory_id: str | None) -> list[str]:
        """The texts of a store other than entry `memory_id` (the core has no others)."""
        if store == CORE:
            return []
        return [text for i, text in self.entries[store].items() if i != memory_id]

    def texts(self) -> list[str]:
        """Every non-empty text in memory: core first, then semantic, then episodic."""
        core = [self.core] if self.core else []
        return core + [t for store in LISTS for t in self.entries[store].values()]

    def tokens(self) -> int:
        """Tokens held in memory (texts only; ids are addressing, not content)."""
        return sum(self.count(t) for t in self.texts())

    def store_tokens(self) -> dict[str, int]:
        """Tokens held in each store."""
        return {
            CORE: self.count(self.core) if self.core else 0,
            **{store: sum(self.count(t) for t in self.entries[store].values()) for store in LISTS},
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "core": self.core,
            "semantic": dict(self.entries[SEMANTIC]),
            "episodic": dict(self.entries[EPISODIC]),
            "next_id": dict(self.next_id),
            "core_tokens": self.core_tokens,
            "budget": self.budget,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], count: TokenCounter = word_tokens) -> Memory:
        budget = data.get("budget")
        memory = cls(
            core_tokens=int(data.get("core_tokens", 512)),
            count=count,
            budget=None if budget is None else int(budget),
        )
        memory.core = str(data.get("core", ""))
        for store in LISTS:
            memory.entries[store] = {str(k): str(v) for k, v in data.get(store, {}).items()}
        memory.next_id.update({k: int(v) for k, v in data.get("next_id", {}).items()})
        return memory

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, count: TokenCounter = word_tokens) -> Memory:
        return cls.from_dict(json.loads(text), count=count)

    def _over_budget(self, added: int) -> str | None:
        """Why writing `added` more tokens is refused (the memory's budget), or None."""
        if self.budget is None or added <= 0 or self.tokens() + added <= self.budget:
            return None
        return (
            f"memory full: {self.tokens()} of {self.budget} tokens used; delete or shorten an "
            "entry first"
        )

    def _find(self, store: str, content: str) -> str | None:
        for memory_id, text in self.entries[store].items():
            if text == content:
                return memory_id
        return None

    def _cap(self, text: str) -> tuple[str, bool]:
        """The longest word prefix of `text` within the core budget, and whether it was cut."""
        if self.count(text) <= self.core_tokens:
            return text, False
        words = text.split()
        lo, hi = 0, len(words)
        while lo < hi:  # binary search: the counter may be an expensive tokenizer
            mid = (lo + hi + 1) // 2
            if self.count(" ".join(words[:mid])) <= self.core_tokens:
                lo = mid
            else:
                hi = mid - 1
        return " ".join(words[:lo]), True
