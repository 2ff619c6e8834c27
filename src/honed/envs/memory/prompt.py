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
schemas and asks for `{"name": ..., "arguments": ...}` calls.

As in Mem-α, the whole core is shown but only the most recent entries of each store: at most
`recent` of each, then fewer (the oldest of the store showing more goes first) until the prompt
fits `max_chars`. Characters,
not tokens, measure the budget, so it means the same for every tokenizer; only the header, the
core and the chunk themselves can exceed it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from honed.envs.memory.store import LISTS, Memory
from honed.envs.memory.tools import TOOL_SCHEMAS, chunk_sentences

STYLES = ("compact", "full")
PROMPT_CHARS = {"compact": 400, "full": 8000}  # default budgets: the full header is ~1500
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
) -> Prompt:
    """`numbered`: the chunk's sentences one per line, each after its number (what a quote
    names), instead of the chunk as written."""
    header = COMPACT_HEADER if style == "compact" else FULL_HEADER
    chunk_line = f"chunk: {chunk}"
    if numbered:
        sentences = chunk_sentences(chunk)
        chunk_line = "chunk:" + "".join(f"\n{i} {s}" for i, s in enumerate(sentences, 1))
    shown = {store: min(max(recent, 0), len(memory.items(store))) for store in LISTS}
    while True:
        entries = [pair for store in LISTS for pair in _tail(memory.items(store), shown[store])]
        lines = [header, f"core: {memory.core}"]
        lines += [f"{memory_id} {text}" for memory_id, text in entries]
        lines += [chunk_line, "calls:"]
        text = "\n".join(lines)
        if len(text) <= max_chars or not any(shown.values()):
            return Prompt(text, {memory_id for memory_id, _ in entries})
        # Drop the oldest shown entry of the store showing more (episodic on a tie).
        shown[max(reversed(LISTS), key=shown.__getitem__)] -= 1


def _tail(items: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    return items[len(items) - n :] if n else []
