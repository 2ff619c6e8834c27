"""Baselines for the memory table, scored by the same reader and metrics as the agents.

The paper's baselines (Mem-α §4.1; `long_context_eval.py` in its code), each read by the
environment's reader and scored by each data set's metric:

- `no_memory`: the reader sees nothing (how far guessing or the reader's own knowledge goes).
- `store_everything`: every chunk kept verbatim and shown whole.
- `long_context`: the last `tokens` tokens of the stream (32K by default, Mem-α's Long-Context
  baseline; counted by the environment's token counter, the policy's tokenizer when it has
  one), shown whole.
- `rag_chunks`: every chunk kept, the top-k (default 2) by BM25 shown per question: RAG-Top2.
- `rolling_memory`: MemAgent-style: one paragraph, rewritten by a policy after every chunk from
  the old paragraph and the chunk, capped at `tokens`; the reader sees the paragraph.
- `memories_result`: memories built some other way (the reference plan's, a rule's, an agent's)
  through the agents' retrieval path.
- `rule_memory`: the rule baseline's memory: every sentence of every chunk that is not chatter,
  inserted verbatim, never updated or deleted (a trained writer must beat this rule).
- `RULES`: memory builders without a policy, by row label, each `(Instance) -> Memory`; the
  rule baseline (`rule_memory`: keep every informative sentence verbatim) registers itself here.

A result keeps one `Scored` per instance, so the table can show each data set and their mean.
Memory tokens are the mean per instance, counted like the agents' memory (the raw-chunk
baselines store the whole input), and so is compression (r3, unclipped).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import mean

from honed.envs.base import Generator
from honed.envs.memory.data import Instance
from honed.envs.memory.paperdata import is_chatter
from honed.envs.memory.retrieval import Reader, answer_scores_many, bm25_top, read_all
from honed.envs.memory.rewards import compression
from honed.envs.memory.store import EPISODIC, SEMANTIC, Memory, TokenCounter, word_tokens
from honed.envs.memory.tools import INSERT, ToolCall, chunk_sentences, execute
from honed.types import derive_seed

LONG_CONTEXT_TOKENS = 32_768
ROLLING_TOKENS = 1024  # MemAgent's memory: 1,024 tokens
RULES: dict[str, Callable[[Instance], Memory]] = {}

ROLLING_PROMPT = (
    "You keep a one-paragraph memory of a long text, to answer questions about it later.\n"
    "Memory so far: {memory}\nNew text: {chunk}\n"
    "Write the updated memory: one paragraph with what may be asked about, from the memory so "
    "far and the new text.\nMemory:"
)


@dataclass
class Scored:
    """One instance's outcome: its data set, mean score, memory tokens, compression and the
    answers that could not be scored."""

    source: str
    accuracy: float
    memory_tokens: float
    compression: float
    errors: int = 0


@dataclass
class BaselineResult:
    """One row of the table: the per-instance outcomes and their means."""

    name: str
    scored: list[Scored] = field(default_factory=list)

    def _mean_by_source(self, field_name: str) -> dict[str, float]:
        """The mean of one `Scored` field per data set, in order of first appearance."""
        groups: dict[str, list[float]] = {}
        for s in self.scored:
            groups.setdefault(s.source, []).append(getattr(s, field_name))
        return {source: mean(values) for source, values in groups.items()}

    @property
    def by_source(self) -> dict[str, float]:
        """Mean accuracy per data set, in order of first appearance."""
        return self._mean_by_source("accuracy")

    @property
    def tokens_by_source(self) -> dict[str, float]:
        """Mean memory tokens per data set, in order of first appearance."""
        return self._mean_by_source("memory_tokens")

    @property
    def accuracy(self) -> float:
        """The mean over data sets of their mean accuracy (Mem-α's average column)."""
        return mean(self.by_source.values()) if self.scored else 0.0

    @property
    def memory_tokens(self) -> float:
        return mean(s.memory_tokens for s in self.scored) if self.scored else 0.0

    @property
    def compression(self) -> float:
        return mean(s.compression for s in self.scored) if self.scored else 0.0

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.scored)


def _scored(
    inst: Instance, scores: Sequence[float | None], memory_tokens: float, count: TokenCounter
) -> Scored:
    answered = [s for s in scores if s is not None]
    inputs = sum(count(c) for c in inst.chunks)
    return Scored(
        inst.source,
        mean(answered) if answered else 0.0,
        float(memory_tokens),
        compression(int(memory_tokens), inputs),
        len(scores) - len(answered),
    )


def _read(
    instances: Sequence[Instance], contexts: Sequence[Sequence[str]], reader: Reader
) -> list[list[float | None]]:
    """Each instance's questions read in their contexts, all in one reader call (an LLM
    reader keeps its `concurrency` requests in flight across instances)."""
    questions = [q for inst in instances for q in inst.questions]
    sources = [inst.source for inst in instances for _ in inst.questions]
    flat = read_all(reader, questions, [c for cs in contexts for c in cs], sources)
    out, start = [], 0
    for inst in instances:
        out.append(flat[start : start + len(inst.questions)])
        start += len(inst.questions)
    return out


def _same_context(
    name: str,
    instances: Sequence[Instance],
    reader: Reader,
    contexts: Sequence[str],
    count: TokenCounter,
) -> BaselineResult:
    """A baseline whose reader sees one context per instance for all its questions."""
    per_question = [[c] * len(inst.questions) for inst, c in zip(instances, contexts, strict=True)]
    scores = _read(instances, per_question, reader)
    return BaselineResult(
        name,
        [
            _scored(inst, s, count(c), count)
            for inst, s, c in zip(instances, scores, contexts, strict=True)
        ],
    )


def no_memory(
    instances: Sequence[Instance], reader: Reader, count: TokenCounter = word_tokens
) -> BaselineResult:
    return _same_context("no memory", instances, reader, [""] * len(instances), count)


def store_everything(
    instances: Sequence[Instance], reader: Reader, count: TokenCounter = word_tokens
) -> BaselineResult:
    contexts = ["\n".join(inst.chunks) for inst in instances]
    return _same_context("store everything", instances, reader, contexts, count)


def tail_tokens(text: str, tokens: int, count: TokenCounter = word_tokens) -> str:
    """The longest run of whole words at the end of `text` that is at most `tokens` tokens."""
    if count(text) <= tokens:
        return text
    starts = [m.start() for m in re.finditer(r"\S+", text)]  # where each word begins
    lo, hi = 0, len(starts)  # the last lo words fit; binary search, the counter may be slow
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[starts[-mid] :]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[starts[-lo] :] if lo else ""


def long_context(
    instances: Sequence[Instance],
    reader: Reader,
    tokens: int = LONG_CONTEXT_TOKENS,
    count: TokenCounter = word_tokens,
) -> BaselineResult:
    contexts = [tail_tokens("\n".join(inst.chunks), tokens, count) for inst in instances]
    label = (
        f"long-context (last {tokens // 1024}K tokens)"
        if tokens >= 1024
        else f"long-context (last {tokens} tokens)"
    )
    return _same_context(label, instances, reader, contexts, count)


def rag_chunks(
    instances: Sequence[Instance], reader: Reader, k: int = 2, count: TokenCounter = word_tokens
) -> BaselineResult:
    contexts = []
    for inst in instances:
        tops = bm25_top(inst.chunks, [q.question for q in inst.questions], k)
        contexts.append(["\n".join(inst.chunks[i] for i in sorted(top)) for top in tops])
    scores = _read(instances, contexts, reader)
    return BaselineResult(
        f"RAG top-{k} chunks",
        [  # the whole input is kept
            _scored(inst, s, sum(count(c) for c in inst.chunks), count)
            for inst, s in zip(instances, scores, strict=True)
        ],
    )


def rolling_memory(
    instances: Sequence[Instance],
    reader: Reader,
    generator: Generator,
    label: str = "policy",
    tokens: int = ROLLING_TOKENS,
    count: TokenCounter = word_tokens,
    seed: int = 0,
) -> BaselineResult:
    """MemAgent-style: the policy rewrites one paragraph after every chunk (all instances'
    chunk t in one batch), cut to its last `tokens` tokens; the reader sees the paragraph."""
    memories = [""] * len(instances)
    for t in range(max((len(inst.chunks) for inst in instances), default=0)):
        live = [i for i, inst in enumerate(instances) if t < len(inst.chunks)]
        prompts = [
            ROLLING_PROMPT.format(memory=memories[i] or "(empty)", chunk=instances[i].chunks[t])
            for i in live
        ]
        seeds = [derive_seed(seed, "rolling", instances[i].id, t) for i in live]
        for i, sample in zip(live, generator.generate(prompts, seeds), strict=True):
            memories[i] = tail_tokens(sample.text.strip(), tokens, count)
    return _same_context(
        f"MemAgent-style rolling memory ({label})", instances, reader, memories, count
    )


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
        for call in rule_calls(chunk, chatter):
            execute(memory, call)
    return memory


def rule_calls(chunk: str, chatter: Callable[[str], bool] = is_chatter) -> list[ToolCall]:
    """The rule's calls for one chunk: an insert of each sentence that is not `chatter`,
    verbatim, into episodic when it has a time (`day N`), else semantic. The memory's budget
    decides which of them succeed; `sft_target: rule` warm-starts a policy on them."""
    return [
        ToolCall(
            INSERT,
            {"memory_type": EPISODIC if _TIME.search(sentence) else SEMANTIC, "content": sentence},
        )
        for sentence in chunk_sentences(chunk)
        if not chatter(sentence)
    ]


def memories_result(
    name: str,
    instances: Sequence[Instance],
    memories: Sequence[Memory],
    reader: Reader,
    top_k: int | None,
    count: TokenCounter = word_tokens,
) -> BaselineResult:
    """Built memories through the agents' retrieval path (`top_k` None: the source's default)."""
    cases = [(m, inst.questions, inst.source) for inst, m in zip(instances, memories, strict=True)]
    scores = answer_scores_many(cases, reader, top_k)
    return BaselineResult(
        name,
        [
            _scored(inst, s, m.tokens(), count)
            for inst, s, m in zip(instances, scores, memories, strict=True)
        ],
    )


def rule_results(
    instances: Sequence[Instance],
    reader: Reader,
    top_k: int | None,
    count: TokenCounter = word_tokens,
) -> list[BaselineResult]:
    """One row per registered rule (`RULES`), each memory built from the instance alone."""
    return [
        memories_result(name, instances, [rule(inst) for inst in instances], reader, top_k, count)
        for name, rule in RULES.items()
    ]


def run_baselines(
    instances: Sequence[Instance],
    reader: Reader,
    rag_k: int = 2,
    count: TokenCounter = word_tokens,
    long_context_tokens: int = LONG_CONTEXT_TOKENS,
) -> list[BaselineResult]:
    """No memory, store-everything, long-context and RAG over raw chunks, in that order."""
    return [
        no_memory(instances, reader, count),
        store_everything(instances, reader, count),
        long_context(instances, reader, long_context_tokens, count),
        rag_chunks(instances, reader, rag_k, count),
    ]
