"""Answering questions from a memory: BM25 retrieval and the two readers.

Retrieval follows Mem-α's frozen RAG step: for each question, BM25 (`bm25s`, lower-cased
`\\w+` tokens, English stop words removed) picks the top-k semantic entries and the top-k
episodic entries; the core text is always included. A store with at most k entries is
returned whole, in its own order. Mem-α's answering server (`memory_server.py`,
`MemoryProcessor.generate_response`) shows the *whole* memory while it fits 2,048 × 15 = 30,720
tokens and BM25's top 15 of each store beyond that: with `full_tokens` set, a memory within
that many tokens is shown whole. Those are the defaults for data in Mem-α's formats
(`retrieval_defaults`); honed's own data uses top-5 and no whole-memory view.

Readers score each question against its retrieved context, in [0, 1], or None for an answer
that could not be scored (a judge without a verdict, a server that gave up: counted as errors
and left out of the mean):

- `IdealReader` (reader `retrieval`, the offline default): 1 when a gold answer occurs in the
  context as whole words (case-insensitive), or the share of keywords found for keyword
  questions, provided each of the question's evidence groups occurs together on one line. It is
  the *ideal-reader bound*: the score a perfect reader would reach on that context. It reads
  honed's generated data; on Mem-α's data (labels, rubrics) it is not a meaningful bound: use
  the LLM reader there.
- `ChatReader` (reader `llm`): a chat model answers from the context; the answer is scored by
  the metric of the instance's data set (`metrics.py`), an LLM judge where Mem-α uses one. The
  questions of a batch are sent `concurrency` at a time from a thread pool; `ChatClient`
  retries each request (429, 5xx, timeouts, empty replies) within its `max_retries`.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Protocol

from pydantic import ValidationError

from honed.envs.memory.data import Question
from honed.envs.memory.metrics import contains_words as contains
from honed.envs.memory.metrics import metric_for, query_instruction, score_answer
from honed.envs.memory.store import LISTS, Memory
from honed.errors import HonedError, did_you_mean


def _import_bm25s() -> ModuleType:
    """bm25s, imported without JAX unless the program already uses JAX.

    bm25s imports `jax.lax` when JAX is installed and runs a JAX operation at import, and JAX's
    first use on a GPU reserves most of the GPU's memory for itself (XLA's preallocation): a
    full fine-tuning run of a 3.8 B-parameter policy ran out of memory on an 80 GB GPU that way.
    honed picks BM25's top k with numpy (`bm25_top`), so JAX is marked absent while bm25s loads.
    """
    if "jax" in sys.modules:
        return importlib.import_module("bm25s")
    sys.modules["jax"] = None  # type: ignore[assignment]  # `import jax...` raises ImportError
    try:
        return importlib.import_module("bm25s")
    finally:
        del sys.modules["jax"]


bm25s = _import_bm25s()
READERS = ("retrieval", "llm")
_TOKEN = r"(?u)\b\w+\b"
HONED_TOP_K = 5
# memory_server.py: top_k=15 once the prompt passes 2048 * 15 tokens
PAPER_TOP_K = 15
PAPER_FULL_TOKENS = 2048 * 15
_READER_KEYS = ("type", "concurrency", "chat")


def retrieval_defaults(source: str) -> tuple[int, int | None]:
    """(top_k, full_tokens) for a data source: Mem-α's answering setting for its data, top-5
    and no whole-memory view for honed's."""
    return (HONED_TOP_K, None) if source == "honed" else (PAPER_TOP_K, PAPER_FULL_TOKENS)


class Chat(Protocol):
    """What the LLM reader and judge need of a chat model."""

    def chat(self, messages: list[dict[str, str]]) -> str: ...


class Reader(Protocol):
    def score_all(
        self,
        questions: Sequence[Question],
        contexts: Sequence[str],
        sources: str | Sequence[str] = "honed",
    ) -> list[float | None]: ...


def _per_question(sources: str | Sequence[str], n: int) -> list[str]:
    return [sources] * n if isinstance(sources, str) else list(sources)


def read_all(
    reader: Any,
    questions: Sequence[Question],
    contexts: Sequence[str],
    sources: str | Sequence[str] = "honed",
) -> list[float | None]:
    """`reader.score_all`, or, for a reader with only `score(question, context)` (one that
    needs no data-set metric), that question by question."""
    if hasattr(reader, "score_all"):
        return reader.score_all(questions, contexts, sources)
    return [reader.score(q, c) for q, c in zip(questions, contexts, strict=True)]


def bm25_top(texts: Sequence[str], queries: Sequence[str], k: int) -> list[list[int]]:
    """For each query, the indices of the `k` texts that match it best by BM25.

    One index serves all queries. When `k` covers every text, all of them come back in their
    own order (BM25 would only reorder them).
    """
    if len(texts) <= k:
        return [list(range(len(texts))) for _ in queries]
    if k <= 0 or not queries:
        return [[] for _ in queries]
    tokenize = dict(
        token_pattern=_TOKEN, stopwords="english", show_progress=False, return_ids=False
    )
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(texts), **tokenize), show_progress=False)
    docs, _ = retriever.retrieve(
        bm25s.tokenize(list(queries), **tokenize),
        k=k,
        show_progress=False,
        backend_selection="numpy",  # the same top k whether or not JAX is installed
    )
    return [[int(i) for i in row] for row in docs]


def memory_contexts(
    memory: Memory, queries: Sequence[str], top_k: int, full_tokens: int | None = None
) -> list[str]:
    """The text a reader sees for each query: the core, then the top-k entries of each store
    (every entry when the memory holds at most `full_tokens` tokens)."""
    if full_tokens is not None and memory.tokens() <= full_tokens:
        top_k = max(len(memory.items(store)) for store in LISTS)
    contexts: list[list[str]] = [[f"core: {memory.core}"] if memory.core else [] for _ in queries]
    for store in LISTS:
        texts = [text for _, text in memory.items(store)]
        for lines, top in zip(contexts, bm25_top(texts, queries, top_k), strict=True):
            lines += [f"{store}: {texts[i]}" for i in top]
    return ["\n".join(lines) for lines in contexts]


def keyword_share(text: str, keywords: Sequence[str]) -> float:
    return sum(contains(text, k) for k in keywords) / len(keywords)


class IdealReader:
    """The ideal-reader bound: is the gold answer (and the question's evidence) in the context?"""

    def score_all(
        self,
        questions: Sequence[Question],
        contexts: Sequence[str],
        sources: str | Sequence[str] = "honed",
    ) -> list[float | None]:
        return [self.score(q, c) for q, c in zip(questions, contexts, strict=True)]

    def score(self, question: Question, context: str) -> float:
        lines = context.split("\n")
        for group in question.evidence:
            if not any(all(contains(line, s) for s in group) for line in lines):
                return 0.0
        if question.keywords:
            return keyword_share(context, question.keywords)
        return float(any(contains(context, a) for a in question.answers))


class ChatReader:
    """A chat model answers from the retrieved memory; its answer is scored by the data set's
    metric. `concurrency` questions are in flight at once; `judge` (default: the reader's own
    model) scores the sources Mem-α scores with an LLM judge."""

    SYSTEM = (
        "Answer the question using only the memory below. Be brief: reply with the answer "
        "alone; say 'unknown' if the memory does not tell.\n\nMemory:\n{context}"
    )

    def __init__(self, chat: Chat, concurrency: int = 8, judge: Chat | None = None) -> None:
        if concurrency < 1:
            raise HonedError(f"memory reader: concurrency must be at least 1, not {concurrency}")
        self.chat = chat
        self.judge = judge or chat
        self.concurrency = concurrency
        self.failures = 0  # answers lost to a server that gave up
        self._lock = threading.Lock()

    def score(self, question: Question, context: str, source: str = "honed") -> float | None:
        return self.score_all([question], [context], source)[0]

    def score_all(
        self,
        questions: Sequence[Question],
        contexts: Sequence[str],
        sources: str | Sequence[str] = "honed",
    ) -> list[float | None]:
        """Every question answered and scored (each by its data set's metric), `concurrency`
        at a time, in order."""
        per_question = _per_question(sources, len(questions))
        jobs = list(zip(questions, contexts, per_question, strict=True))
        if not jobs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
            return list(pool.map(lambda job: self._one(*job), jobs))

    def _one(self, question: Question, context: str, source: str) -> float | None:
        metric = metric_for(source, keywords=bool(question.keywords))
        messages = [
            {"role": "system", "content": self.SYSTEM.format(context=context or "(empty)")},
            {"role": "user", "content": query_instruction(metric) + question.question},
        ]
        try:
            reply = self.chat.chat(messages)
            return score_answer(
                metric, reply, question.answers, question.keywords, question.question, self.judge
            )
        except HonedError:  # the server gave up after its retries: an unscored answer
            with self._lock:
                self.failures += 1
            return None


def chat_model(chat: Chat | Mapping[str, Any] | None, where: str) -> Chat | None:
    """The chat model an llm reader or judge calls, checked before any work is done.

    A mapping is a `ChatModelConfig` (`base_url`, `model`, `api_key_env`, ...): a `ChatClient`
    is built from it and its `check()` run now, so an unreachable server or an unknown model
    stops the run at start-up with one line instead of failing mid-step. Anything else (an
    object with `chat(messages)`, or `None`) is returned as it is.
    """
    if not isinstance(chat, Mapping):
        return chat
    from honed.models.chat import ChatClient, ChatModelConfig

    try:
        config = ChatModelConfig.model_validate(dict(chat))
    except ValidationError as err:
        # An unknown key explains a missing one ("modle" for "model"): name it first.
        first = min(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
        key = ".".join(str(p) for p in first["loc"])
        hint = did_you_mean(key, list(ChatModelConfig.model_fields))
        raise HonedError(f"{where}: chat.{key}: {first['msg']}{hint}") from None
    client = ChatClient(config)
    client.check()
    return client


def make_reader(
    spec: str | Mapping[str, Any],
    chat: Chat | Mapping[str, Any] | None = None,
    where: str = "memory",
) -> Reader:
    """The reader an environment's `reader` argument names: `retrieval`, `llm`, or a mapping
    `{type: llm, concurrency: 8, chat: {...}}` (its `chat` replaces the environment's)."""
    options: dict[str, Any] = {"type": spec} if isinstance(spec, str) else dict(spec)
    for key in options:
        if key not in _READER_KEYS:
            raise HonedError(
                f"{where}: unknown reader key {key!r}{did_you_mean(key, _READER_KEYS)}: use "
                f"{', '.join(_READER_KEYS)}"
            )
    kind = options.get("type", "retrieval")
    if kind == "retrieval":
        return IdealReader()
    if kind != "llm":
        raise HonedError(
            f"unknown memory reader {kind!r}{did_you_mean(str(kind), READERS)}: use one of "
            f"{', '.join(READERS)}"
        )
    model = chat_model(options.get("chat", chat), where)
    if model is None:
        raise HonedError(
            "memory reader 'llm' needs a chat model: give the environment a 'chat' "
            "argument ({base_url: ..., model: ...}, see ChatModelConfig)"
        )
    default = getattr(getattr(model, "config", None), "concurrency", 8)
    concurrency = options.get("concurrency", default)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise HonedError(f"{where}: reader.concurrency must be a whole number >= 1")
    return ChatReader(model, concurrency)


def answer_scores(
    memory: Memory,
    questions: Sequence[Question],
    reader: Reader,
    top_k: int | None = None,
    source: str = "honed",
    full_tokens: int | None = None,
) -> list[float | None]:
    """The reader's score on each question, each from its own retrieved context (top_k and
    full_tokens: the source's defaults when top_k is None)."""
    if top_k is None:
        top_k, full_tokens = retrieval_defaults(source)
    contexts = memory_contexts(memory, [q.question for q in questions], top_k, full_tokens)
    return read_all(reader, questions, contexts, source)


def answer_scores_many(
    cases: Sequence[tuple[Memory, Sequence[Question], str]],
    reader: Reader,
    top_k: int | None = None,
) -> list[list[float | None]]:
    """`answer_scores` of many (memory, questions, source) cases in one reader call, so an
    LLM reader keeps `concurrency` requests in flight across all of them."""
    questions: list[Question] = []
    contexts: list[str] = []
    sources: list[str] = []
    for memory, asked, source in cases:
        k, full = (top_k, None) if top_k is not None else retrieval_defaults(source)
        contexts += memory_contexts(memory, [q.question for q in asked], k, full)
        questions += asked
        sources += [source] * len(asked)
    flat = read_all(reader, questions, contexts, sources)
    out, start = [], 0
    for _, asked, _ in cases:
        out.append(flat[start : start + len(asked)])
        start += len(asked)
    return out
