"""Baselines for the memory table, scored by the same reader as the agents.

- `no_memory`: the reader sees nothing (how far guessing or the reader's own knowledge goes).
- `store_everything`: every chunk kept verbatim and shown whole, like a long context.
- `rag_chunks`: every chunk kept verbatim, the top-k (default 2) by BM25 shown per question,
  the paper's RAG-Top2.
- `rule_memory`: the rule baseline's memory: every sentence of every chunk that is not chatter,
  inserted verbatim, never updated or deleted (a trained writer must beat this rule).
- `memories_result`: any built memories (the reference plan's, or an agent's) through the
  agents' retrieval path.

Memory tokens are the mean per instance, counted like the agents' memory (both raw-chunk
baselines store all of the input), and so is compression (r3, unclipped).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import mean

from honed.envs.memory.data import Instance
from honed.envs.memory.paperdata import is_chatter
from honed.envs.memory.retrieval import Reader, answer_scores, bm25_top
from honed.envs.memory.rewards import compression
from honed.envs.memory.store import EPISODIC, SEMANTIC, Memory, TokenCounter, word_tokens
from honed.envs.memory.tools import chunk_sentences


@dataclass
class BaselineResult:
    """One row of the table: mean accuracy, memory tokens and compression over the instances."""

    name: str
    accuracy: float
    memory_tokens: float
    compression: float


def _accuracy(per_instance: list[list[float]]) -> float:
    return mean(mean(scores) for scores in per_instance) if per_instance else 0.0


def no_memory(instances: Sequence[Instance], reader: Reader) -> BaselineResult:
    scores = [[reader.score(q, "") for q in inst.questions] for inst in instances]
    return BaselineResult("no memory", _accuracy(scores), 0.0, 1.0)


def _input_tokens(instances: Sequence[Instance], count: TokenCounter) -> float:
    return mean(sum(count(c) for c in inst.chunks) for inst in instances) if instances else 0.0


def _raw(name: str, scores: list[list[float]], instances, count: TokenCounter) -> BaselineResult:
    """A baseline that keeps every chunk: its memory is the input, compression 0."""
    return BaselineResult(name, _accuracy(scores), _input_tokens(instances, count), 0.0)


def store_everything(
    instances: Sequence[Instance], reader: Reader, count: TokenCounter = word_tokens
) -> BaselineResult:
    scores = [
        [reader.score(q, "\n".join(inst.chunks)) for q in inst.questions] for inst in instances
    ]
    return _raw("store everything", scores, instances, count)


def rag_chunks(
    instances: Sequence[Instance], reader: Reader, k: int = 2, count: TokenCounter = word_tokens
) -> BaselineResult:
    scores = []
    for inst in instances:
        tops = bm25_top(inst.chunks, [q.question for q in inst.questions], k)
        contexts = ["\n".join(inst.chunks[i] for i in sorted(top)) for top in tops]
        scores.append([reader.score(q, c) for q, c in zip(inst.questions, contexts, strict=True)])
    return _raw(f"RAG top-{k} chunks", scores, instances, count)


_TIME = re.compile(r"\bday \d+\b", re.IGNORECASE)


def rule_memory(
    instance: Instance,
    chatter: Callable[[str], bool] = is_chatter,
    core_tokens: int = 512,
    count: TokenCounter = word_tokens,
    budget: int | None = None,
) -> Memory:
    """The rule baseline: insert every sentence of every chunk that is not `chatter`, verbatim
    (a sentence with a time, `day N`, into episodic, any other into semantic), never update or
    delete. The instance's memory budget applies (`budget` when it has none): once it is full,
    later inserts fail, as an agent's would. Sentences are the chunk's as a quote copies them
    (`chunk_sentences`)."""
    memory = Memory(core_tokens, count, instance.budget if instance.budget is not None else budget)
    for chunk in instance.chunks:
        for sentence in chunk_sentences(chunk):
            if not chatter(sentence):
                memory.insert(EPISODIC if _TIME.search(sentence) else SEMANTIC, sentence)
    return memory


def memories_result(
    name: str,
    instances: Sequence[Instance],
    memories: Sequence[Memory],
    reader: Reader,
    top_k: int,
    count: TokenCounter = word_tokens,
) -> BaselineResult:
    scores = [
        answer_scores(m, inst.questions, reader, top_k)
        for inst, m in zip(instances, memories, strict=True)
    ]
    tokens = [m.tokens() for m in memories]
    inputs = [sum(count(c) for c in inst.chunks) for inst in instances]
    return BaselineResult(
        name,
        _accuracy(scores),
        mean(tokens) if tokens else 0.0,
        mean(compression(m, i) for m, i in zip(tokens, inputs, strict=True)) if tokens else 0.0,
    )


def run_baselines(
    instances: Sequence[Instance], reader: Reader, rag_k: int = 2, count: TokenCounter = word_tokens
) -> list[BaselineResult]:
    """No memory, store-everything and RAG over raw chunks (top-`rag_k`), in that order."""
    return [
        no_memory(instances, reader),
        store_everything(instances, reader, count),
        rag_chunks(instances, reader, rag_k, count),
    ]
