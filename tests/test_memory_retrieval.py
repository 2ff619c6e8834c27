"""BM25 retrieval over the memory and the two readers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from honed.envs.memory.data import Question
from honed.envs.memory.retrieval import (
    ChatReader,
    IdealReader,
    answer_scores,
    bm25_top,
    contains,
    make_reader,
    memory_contexts,
)
from honed.envs.memory.store import CORE, EPISODIC, SEMANTIC, Memory
from honed.errors import HonedError

ROOT = Path(__file__).resolve().parents[1]


def _memory() -> Memory:
    m = Memory()
    m.update(CORE, "People: Kamo, Tebu")
    for fact in [
        "Kamo lives in Oslo",
        "Tebu lives in Lima",
        "Kamo works as a cook",
        "Tebu has a pet cat",
    ]:
        m.insert(SEMANTIC, fact)
    m.insert(EPISODIC, "Day 4: Kamo visited the zoo")
    m.insert(EPISODIC, "Day 12: Tebu bought a kite")
    return m


def test_bm25_picks_the_matching_entries_and_returns_small_stores_whole():
    texts = [
        "Kamo lives in Oslo",
        "Tebu lives in Lima",
        "Kamo works as a cook",
        "Tebu has a pet cat",
    ]
    assert bm25_top(texts, ["What pet does Tebu have?", "What is Kamo's job? cook"], 1) == [
        [3],
        [2],
    ]
    assert bm25_top(texts, ["anything"], 4) == [[0, 1, 2, 3]]
    assert bm25_top(texts, ["anything"], 0) == [[]]
    assert bm25_top(texts, [], 2) == []


def test_context_has_the_core_and_top_k_of_each_store():
    context, short = memory_contexts(_memory(), ["When did Tebu buy a kite?", "Kamo"], top_k=1)
    core, semantic, episodic = context.splitlines()
    assert core == "core: People: Kamo, Tebu"
    assert semantic.startswith("semantic: Tebu ")
    assert episodic == "episodic: Day 12: Tebu bought a kite"
    assert len(short.splitlines()) == 3
    assert len(memory_contexts(_memory(), ["Kamo"], top_k=2)[0].splitlines()) == 1 + 2 + 2


def test_ideal_reader_answer_in_memory_and_not():
    reader = IdealReader()
    m = _memory()
    inside = Question(
        "When did Kamo visit the zoo?", ["day 4"], "event-time", evidence=[["Kamo", "day 4"]]
    )
    missing = Question("What pet does Kamo have?", ["dog"], "fact", evidence=[["Kamo", "dog"]])
    assert answer_scores(m, [inside, missing], reader, top_k=5) == [1.0, 0.0]
    assert answer_scores(Memory(), [inside], reader, top_k=5) == [0.0]
    # Retrieval matters: with one entry per store the question's own entry must rank first.
    assert answer_scores(m, [inside], reader, top_k=1) == [1.0]


def test_ideal_reader_needs_the_evidence_on_one_line():
    reader = IdealReader()
    q = Question("Where does Tebu live?", ["Oslo"], "fact", evidence=[["Tebu", "Oslo"]])
    assert reader.score(q, "Kamo lives in Oslo\nTebu has a cat") == 0.0  # Oslo is about Kamo
    assert reader.score(q, "Tebu lives in Oslo") == 1.0
    two_hop = Question(
        "Where does Kamo's boss live?",
        ["Lima"],
        "two-hop",
        evidence=[["Kamo", "Tebu"], ["Tebu", "Lima"]],
    )
    assert reader.score(two_hop, "Tebu lives in Lima") == 0.0
    assert reader.score(two_hop, "Kamo works for Tebu\nTebu lives in Lima") == 1.0


def test_whole_word_matching_and_keywords():
    assert contains("Day 12: x", "day 12") and not contains("Day 12: x", "day 1")
    assert contains("It's in OSLO!", "oslo")
    summary = Question("Summarise.", [], "summary", keywords=["war", "ship", "storm"])
    assert IdealReader().score(summary, "a ship in a storm") == pytest.approx(2 / 3)


class _Chat:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.seen: list[list[dict]] = []

    def chat(self, messages):
        self.seen.append(messages)
        return self.reply


def test_chat_reader_scores_exact_and_substring_answers():
    q = Question("Where does Kamo live?", ["Oslo"], "fact")
    chat = _Chat("Kamo lives in Oslo.")
    assert ChatReader(chat).score(q, "semantic: Kamo lives in Oslo") == 1.0
    assert "Kamo lives in Oslo" in chat.seen[0][0]["content"]
    assert chat.seen[0][1] == {"role": "user", "content": "Where does Kamo live?"}
    assert ChatReader(_Chat("oslo")).score(q, "") == 1.0
    assert ChatReader(_Chat("Lima")).score(q, "") == 0.0
    summary = Question("Summarise.", [], "summary", keywords=["war", "ship"])
    assert ChatReader(_Chat("A war.")).score(summary, "") == 0.5


def test_make_reader_checks_its_arguments():
    assert isinstance(make_reader("retrieval"), IdealReader)
    assert isinstance(make_reader("llm", _Chat("x")), ChatReader)
    with pytest.raises(HonedError, match="needs a chat model"):
        make_reader("llm")
    with pytest.raises(HonedError, match="did you mean 'retrieval'"):
        make_reader("retreival")


def test_bm25s_is_loaded_without_jax_so_that_jax_never_takes_the_gpu(tmp_path):
    """bm25s imports and runs JAX at import when JAX is installed, and JAX's first use on a
    GPU reserves most of its memory (a GRPO run of a 3.8 B policy ran out of memory on an H100
    that way). A stand-in `jax` package that records being imported must stay untouched."""
    fake = tmp_path / "jax"
    fake.mkdir()
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (fake / "lax.py").write_text("def top_k(scores, k):\n    raise RuntimeError('jax used')\n")
    code = (
        "from honed.envs.memory.retrieval import bm25_top\n"
        "print(bm25_top(['red apple', 'blue sky', 'green tree'], ['apple'], 1))\n"
    )
    paths = [str(tmp_path), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[[0]]"
    assert not marker.exists()
