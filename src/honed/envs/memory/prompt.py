"""The prompt the memory writer sees for one chunk.

Layout (the `compact` style, for small policies; every line is regular so a character-level
model can learn where to look):

    tools: {"i":"s|e","c":..} insert, {"u":id,"c":..} update, {"d":id} delete; s fact, e event
    core: <core text>
    s1 Kamo lives in Oslo
    e1 Day 4: Kamo visited the zoo
    chunk: Kamo now lives in Lima. It rained all day long.
    calls:

and the reply is a JSON list of calls, e.g. `[{"u":"s1","c":"Kamo now lives in Lima"}]`.
With quotes on (the environment's `quote` argument) the chunk is shown one numbered sentence
a line, `chunk:` / `1 Kamo now lives in Lima` / `2 It rained all day long`, and the reference
reply quotes by number: `[{"u":"s1","c":1}]`. The
`full` style, for chat models, describes the stores in words, lists the OpenAI function
schemas and asks for `{"name": ..., "arguments": ...}` calls. The `chat` style (`chat_messages`)
is the official agent's: the memory in the system message, the chunk as the user's turn, the
official tools offered through the policy's chat template.

As in Mem-α, the whole core is shown but only the most recent entries of each store (at most
`recent` of each). When the prompt does not fit its budget, the entries' contents are shortened
(each to the same number of words, "..." marking the cut; at the limit only the ids are
left), never their ids: an id the model cannot see is an entry it cannot update or delete. The
budget is `max_chars` characters, or `max_tokens` tokens of the policy's tokenizer (`count`, the
environment's `max_prompt_tokens`); only the header, the core and the chunk themselves can
exceed it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from honed.envs.memory.store import LISTS, Memory
from honed.envs.memory.tools import TOOL_SCHEMAS, chunk_sentences
from honed.types import Message

T = TypeVar("T")
STYLES = ("compact", "full", "chat")
LABELS = ("before", "after")  # where a prompt line's number or id goes (`render_prompt`)
# default budgets: the full header is ~1500; the chat style's tools come through the template
PROMPT_CHARS = {"compact": 400, "full": 8000, "chat": 8000}
CHAT_SYSTEM = (
    "You are an assistant with a memory of three stores. Read what the user shares and keep "
    "what will answer later questions, by calling your tools.\n"
    "* core_memory: one short paragraph about the user or what is being read (update only)\n"
    "* semantic_memory: facts and knowledge, one per entry\n"
    "* episodic_memory: events, each with its time\n"
    "Update or delete an entry by its id when what it says has changed; skip small talk.\n\n"
    "Your memory now:"
)
CHAT_USER = (
    "Memorise this chunk: update the core memory if needed, record events with their time in "
    "episodic memory and facts in semantic memory; be brief.\n\n<new_chunk>\n{chunk}\n</new_chunk>"
)
# Short on purpose: a character-level policy pays for every prompt character on every chunk.
COMPACT_HEADER = (
    'tools: {"i":"s|e","c":..} insert, {"u":id,"c":..} update, {"d":id} delete; s fact, e event'
)
FULL_HEADER = (
    "You maintain a memory with three stores: core (one short text, always shown, capped), "
    "semantic (atomic facts) and episodic (events with their time). Read the new chunk and "
    "call tools to keep what will answer later questions: insert new facts and events, update "
    "an entry by its id when a fact changes, skip chatter. Tools: "
    + json.dumps(TOOL_SCHEMAS, separators=(",", ":"))
    + '\nReply with only a JSON list of calls, each {"name": tool, "arguments": {...}}, '
    "or [] when nothing is worth keeping."
)


@dataclass
class Prompt:
    """A rendered prompt and the entry ids it shows (an update can only target those)."""

    text: str
    visible: set[str]


def render_prompt(
    memory: Memory,
    chunk: str,
    style: str = "compact",
    recent: int = 5,
    max_chars: int = 400,
    numbered: bool = False,
    max_tokens: int | None = None,
    count: Callable[[str], int] | None = None,
    labels: str = "before",
) -> Prompt:
    """`numbered`: the chunk's sentences one per line, each with its number (what a quote
    names), instead of the chunk as written. With `max_tokens` and `count` (the policy's token
    counter) the budget is `max_tokens` tokens instead of `max_chars` characters.

    `labels`: where a line's label goes, a sentence's number or an entry's id: `before` its
    text (`2 Kamo lives in Oslo`, `s1 Kamo lives in Oslo`) or `after` it (`Kamo lives in Oslo
    [2]`, `Kamo lives in Oslo [s1]`). A causal model reads a label written after the text with
    the text already in view, so the label's own position can carry what the line says; one
    written before must be found through the text that follows it."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {', '.join(LABELS)}, not {labels!r}")

    def line(label: object, text: str) -> str:
        return f"{text} [{label}]" if labels == "after" else f"{label} {text}"

    header = COMPACT_HEADER if style == "compact" else FULL_HEADER
    chunk_line = f"chunk: {chunk}"
    if numbered:
        sentences = chunk_sentences(chunk)
        chunk_line = "chunk:" + "".join(f"\n{line(i, s)}" for i, s in enumerate(sentences, 1))
    entries = shown_entries(memory, recent)
    visible = {memory_id for memory_id, _ in entries}

    def text(cap: int | None) -> str:
        lines = [header, f"core: {memory.core}"]
        lines += [line(memory_id, _shorten(content, cap)) for memory_id, content in entries]
        return "\n".join([*lines, chunk_line, "calls:"])

    if max_tokens is not None and count is not None:
        fits = lambda t: count(t) <= max_tokens  # noqa: E731
    else:
        fits = lambda t: len(t) <= max_chars  # noqa: E731
    return Prompt(fit(text, fits, entries), visible)


def fit(render: Callable[[int | None], T], fits: Callable[[T], bool], entries: list) -> T:
    """`render(None)` (entries whole) if it fits, else `render(cap)` for the largest number of
    words per entry `cap` that fits (0: ids only, whether that fits or not)."""
    whole = render(None)
    if fits(whole):
        return whole
    lo, hi = 0, max((len(c.split()) for _, c in entries), default=0)
    while lo < hi:  # binary search: `fits` may run a tokenizer
        mid = (lo + hi + 1) // 2
        if fits(render(mid)):
            lo = mid
        else:
            hi = mid - 1
    return render(lo)


def chat_messages(memory: Memory, chunk: str, recent: int, cap: int | None) -> list[Message]:
    """The `chat` style's conversation for one chunk, laid out as the official agent's prompt
    is (`memory.py::render_system_prompt` and `unified_prompt` of wangyu-ustc/Mem-alpha, in our
    words): the stores described and shown in the system message, `<core_memory>`,
    `<semantic_memory>` and `<episodic_memory>` blocks of `[id] content` lines (the `recent`
    newest of each, contents cut to `cap` words), then the chunk inside `<new_chunk>` as the
    user's turn. The tools come through the chat template (`OFFICIAL_TOOL_SCHEMAS`)."""
    blocks = [f"<core_memory>\n{memory.core}\n</core_memory>"]
    for store in LISTS:
        shown = _tail(memory.items(store), max(recent, 0))
        lines = "".join(f"[{i}] {_shorten(c, cap)}\n" for i, c in shown)
        total = len(memory.items(store))
        blocks.append(
            f"<{store}_memory> (the most recent {len(shown)} of {total})\n{lines}</{store}_memory>"
        )
    return [
        {"role": "system", "content": CHAT_SYSTEM + "\n\n" + "\n\n".join(blocks)},
        {"role": "user", "content": CHAT_USER.format(chunk=chunk)},
    ]


def shown_entries(memory: Memory, recent: int) -> list[tuple[str, str]]:
    """The (id, content) pairs a prompt shows: the `recent` newest of each store, in order."""
    return [pair for store in LISTS for pair in _tail(memory.items(store), max(recent, 0))]


def visible_ids(memory: Memory, recent: int) -> set[str]:
    """The ids a prompt shows (whatever its budget: contents are shortened, ids never)."""
    return {memory_id for memory_id, _ in shown_entries(memory, recent)}


def _shorten(content: str, cap: int | None) -> str:
    """`content` cut to its first `cap` words, "..." marking the cut (ASCII: the embedded
    policy has no "…")."""
    words = content.split()
    if cap is None or len(words) <= cap:
        return content
    return " ".join([*words[:cap], "..."])


def _tail(items: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    return items[max(len(items) - n, 0) :] if n else []
