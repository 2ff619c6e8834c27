"""The extractive reader (reader `extract`): answers with one sentence of the context, without
the answer key.

The ideal reader (`retrieval`) counts a question answered when the gold answer occurs anywhere
in the retrieved memory, so a memory that keeps everything scores perfectly by construction and
an outdated value beside the new one costs nothing. A real reader must *choose*. This one
chooses the way a BM25 reader does, offline and deterministic:

1. the context (core, retrieved entries, or raw chunks) is split into sentences;
2. BM25 (the same tokens and stop words as retrieval) ranks them against the question and the
   best one is the answer; ties go to the earlier sentence (BM25's order);
3. a two-fact question (type `two-hop`) takes a second hop: the query becomes the words of the
   first answer that the question does not have (the person it names) plus the question's
   words that the first answer does not have (what is asked about that person), and the best
   other sentence is the answer.

The answer is scored like the LLM reader's: correct when a gold answer occurs in it as whole
words (the share of keywords for keyword questions). An outdated fact, a distractor that uses
the question's words, or a missing link of a two-fact question now costs accuracy.
"""

from __future__ import annotations

import re

from honed.envs.memory.data import Question
from honed.envs.memory.retrieval import _TOKEN, bm25_top, contains, keyword_share

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_PREFIX = re.compile(r"^(core|semantic|episodic): ")
_WORD = re.compile(_TOKEN)


def sentences(context: str) -> list[str]:
    """The context's sentences, without the retrieval's store labels."""
    out = []
    for part in _SENTENCE_END.split(context):
        part = _PREFIX.sub("", part.strip())
        if part:
            out.append(part)
    return out


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


class ExtractiveReader:
    """Answers with the context's best-matching sentence (two hops for two-fact questions)."""

    def answer(self, question: Question, context: str) -> str:
        candidates = sentences(context)
        if not candidates:
            return ""
        first = candidates[bm25_top(candidates, [question.question], 1)[0][0]]
        if question.type != "two-hop" or len(candidates) < 2:
            return first
        asked, found = _words(question.question), _words(first)
        query = " ".join(sorted(found - asked) + sorted(asked - found))
        rest = [c for c in candidates if c != first]
        if not rest:  # the same sentence stored several times: no second hop to take
            return first
        return rest[bm25_top(rest, [query], 1)[0][0]]

    def score(self, question: Question, context: str) -> float:
        reply = self.answer(question, context)
        if question.keywords:
            return keyword_share(reply, question.keywords)
        return float(any(contains(reply, a) for a in question.answers))
