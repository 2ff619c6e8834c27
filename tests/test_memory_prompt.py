"""The per-chunk prompt: layout, the most recent entries, the budget (contents cut, ids kept)."""

import pytest

from honed.envs.memory import MemoryEnv
from honed.envs.memory.prompt import COMPACT_HEADER, FULL_HEADER, render_prompt
from honed.envs.memory.store import CORE, EPISODIC, SEMANTIC, Memory
from honed.errors import HonedError


def _memory(facts: int, events: int) -> Memory:
    m = Memory()
    m.update(CORE, "Kamo and Tebu")
    for i in range(facts):
        m.insert(SEMANTIC, f"Fact number {i} about Kamo")
    for i in range(events):
        m.insert(EPISODIC, f"Day {i}: Tebu did thing {i}")
    return m


def test_layout_shows_core_entries_and_chunk():
    prompt = render_prompt(_memory(1, 1), "Kamo moved to Lima.", max_chars=1000)
    assert prompt.text.split("\n") == [
        COMPACT_HEADER,
        "core: Kamo and Tebu",
        "s1 Fact number 0 about Kamo",
        "e1 Day 0: Tebu did thing 0",
        "chunk: Kamo moved to Lima.",
        "calls:",
    ]
    assert prompt.visible == {"s1", "e1"}


def test_labels_after_put_numbers_and_ids_at_the_end_of_their_lines():
    """`labels: after`: a quoted chunk's sentence numbers and the entries' ids follow their
    text, the rest of the layout (and what a quote or an update names) unchanged."""
    memory, chunk = _memory(1, 1), "Kamo moved to Lima. It rained."
    before = render_prompt(memory, chunk, max_chars=1000, numbered=True)
    after = render_prompt(memory, chunk, max_chars=1000, numbered=True, labels="after")
    assert after.text.split("\n") == [
        COMPACT_HEADER,
        "core: Kamo and Tebu",
        "Fact number 0 about Kamo [s1]",
        "Day 0: Tebu did thing 0 [e1]",
        "chunk:",
        "Kamo moved to Lima [1]",
        "It rained [2]",
        "calls:",
    ]
    assert before.text.split("\n")[2:7] == [
        "s1 Fact number 0 about Kamo",
        "e1 Day 0: Tebu did thing 0",
        "chunk:",
        "1 Kamo moved to Lima",
        "2 It rained",
    ]
    assert after.visible == before.visible
    cut = render_prompt(_memory(5, 2), "x", max_chars=10, labels="after")
    assert "\n... [s1]\n" in cut.text  # at the limit, the ids alone, still last
    with pytest.raises(HonedError, match=r"labels 'first'.*before, after"):
        MemoryEnv("memory", labels="first")
    env = MemoryEnv("memory", quote=True, labels="after", recent=20, prompt_chars=4000)
    prompt, reply = env.sft_examples(env.items("train")[0])[1]
    assert "\n1 " not in prompt and " [1]\n" in prompt and '"c":' in reply


def test_only_the_most_recent_entries_are_shown():
    prompt = render_prompt(_memory(8, 2), "x", recent=3, max_chars=10_000)
    assert prompt.visible == {"s6", "s7", "s8", "e1", "e2"}
    assert prompt.text.index("s6 ") < prompt.text.index("s8 ")


def test_budget_shortens_contents_and_keeps_every_shown_id():
    memory = _memory(5, 2)
    full = render_prompt(memory, "x", recent=5, max_chars=10_000).text
    prompt = render_prompt(memory, "x", recent=5, max_chars=len(full) - 1)
    assert prompt.visible == {"s1", "s2", "s3", "s4", "s5", "e1", "e2"}
    assert len(prompt.text) <= len(full) - 1 and "..." in prompt.text
    tight = render_prompt(memory, "x", recent=5, max_chars=200)
    assert len(tight.text) <= 200 and tight.visible == prompt.visible
    bare = render_prompt(memory, "x", recent=5, max_chars=10)  # header and chunk always stay
    assert bare.visible == prompt.visible and bare.text.endswith("chunk: x\ncalls:")
    assert "\ns1 ...\n" in bare.text  # at the limit, the ids alone


def test_full_style_describes_the_tool_schemas():
    prompt = render_prompt(Memory(), "x", style="full", max_chars=8000)
    assert prompt.text.startswith(FULL_HEADER)
    for name in ("memory_insert", "memory_update", "memory_delete", "new_content", "memory_id"):
        assert name in prompt.text
