"""Answering questions from a memory: BM25 retrieval and the two readers.

Retrieval follows Mem-α's frozen RAG step: for each question, BM25 (`bm25s`, lower-cased
`\\w+` tokens, English stop words removed) picks the top-k semantic entries and the top-k
episodic entries; the core text is always included. A store with at most k entries is
returned whole, in its own order.

Readers score one question against a retrieved context, in [0, 1]:

- `IdealReader` (reader `retrieval`, the offline default): 1 when a gold answer occurs in the
  context as whole words (case-insensitive), or the share of keywords found for keyword
  questions, provided each of the question's evidence groups occurs together on one line. It is the *ideal-reader bound*: the score a perfect reader would reach on that
  context. It cannot be fooled by an outdated value sitting next to the new one, so it
  measures what the memory holds, not how well a model reads it.
- `ChatReader` (reader `llm`): a chat model answers from the context; the answer is scored by
  whole-word containment of a gold answer in the reply (exact match included) (keyword share for keyword questions).
  Any object with `chat(messages: list[dict]) -> str` works (an OpenAI-compatible client).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import bm25s
from pydantic import ValidationError

from honed.envs.memory.data import Question
from honed.envs.memory.store import LISTS, Memory
from honed.errors import HonedError, did_you_mean

READERS = ("retrieval", "llm")
_TOKEN = r"(?u)\b\w+\b"


class Chat(Protocol):
    """What the LLM reader and judge need of a chat model."""

    def chat(self, messages: list[dict[str, str]]) -> str: ...


class Reader(Protocol):
    def score(self, question: Question, context: str) -> float: ...


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
        bm25s.tokenize(list(queries), **tokenize), k=k, show_progress=False
    )
    return [[int(i) for i in row] for row in docs]


def memory_contexts(memory: Memory, queries: Sequence[str], top_k: int) -> list[str]:
    """The text a reader sees for each query: the core, then the top-k entries of each store."""
    contexts: list[list[str]] = [[f"core: {memory.core}"] if memory.core else [] for _ in queries]
    for store in LISTS:
        texts = [text for _, text in memory.items(store)]
        for lines, top in zip(contexts, bm25_top(texts, queries, top_k), strict=True):
            lines += [f"{store}: {texts[i]}" for i in top]
    return ["\n".join(lines) for lines in contexts]


def normalise(text: str) -> str:
    """Lower-cased words joined by single spaces: punctuation and spacing do not count."""
    return " ".join(re.findall(r"\w+", text.lower()))


def contains(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs in `haystack` as whole words ("day 1" is not in "day 12")."""
    needle = normalise(needle)
    return bool(needle) and f" {needle} " in f" {normalise(haystack)} "


def keyword_share(text: str, keywords: Sequence[str]) -> float:
    return sum(contains(text, k) for k in keywords) / len(keywords)


class IdealReader:
    """The ideal-reader bound: is the gold answer (and the question's evidence) in the context?"""

    def score(self, question: Question, context: str) -> float:
        lines = context.split("\n")
        for group in question.evidence:
            if not any(all(contains(line, s) for s in group) for line in lines):
                return 0.0
        if question.keywords:
            return keyword_share(context, question.keywords)
        return float(any(contains(context, a) for a in question.answers))


class ChatReader:
    """A chat model answers from the retrieved memory; its answer is matched to the gold."""

    SYSTEM = (
        "Answer the question using only the memory below. Reply with the answer alone, in a "
        "few words; say 'unknown' if the memory does not tell.\n\nMemory:\n{context}"
    )

    def __init__(self, chat: Chat) -> None:
        self.chat = chat

    def score(self, question: Question, context: str) -> float:
        reply = self.chat.chat(
            [
                {"role": "system", "content": self.SYSTEM.format(context=context or "(empty)")},
                {"role": "user", "content": question.question},
            ]
        )
        if question.keywords:
            return keyword_share(reply, question.keywords)
        return float(any(contains(reply, a) for a in question.answers))


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


def make_reader(kind: str, chat: Chat | None = None) -> Reader:
    if kind == "retrieval":
        return IdealReader()
    if kind == "llm":
        if chat is None:
            raise HonedError(
                "memory reader 'llm' needs a chat model: give the environment a 'chat' "
                "argument ({base_url: ..., model: ...}, see ChatModelConfig)"
            )
        return ChatReader(chat)
    raise HonedError(
        f"unknown memory reader {kind!r}{did_you_mean(kind, READERS)}: use one of {', '.join(READERS)}"
    )


def answer_scores(
    memory: Memory, questions: Sequence[Question], reader: Reader, top_k: int
) -> list[float]:
    """The reader's score on each question, each from its own retrieved context."""
    contexts = memory_contexts(memory, [q.question for q in questions], top_k)
    return [reader.score(q, context) for q, context in zip(questions, contexts, strict=True)]
