"""Question answering from a JSONL file: exact match is the hard score, token F1 the soft one.

Each line holds a question, its answer (a string, or a list of accepted answers) and optionally
a `kind` (a label such as `unit_conversion`, reported per kind in evaluations):

    {"question": "How many metres are in 2.5 km?", "answer": ["2500", "2500 m"], "kind": "units"}

The prompt is the question itself: how to answer (format, units, conventions) is what a skill
document teaches the agent, so the environment adds no instructions of its own.

Scoring follows SQuAD: both sides are normalised (lower case, punctuation removed, the articles
*a*, *an*, *the* removed, whitespace collapsed); `success` (hard) is 1 when the normalised reply
equals a normalised answer, `reward` (soft) is the best token-level F1 over the answers. Models
like to explain themselves, so when the reply contains the marker `Answer:` (any case) only the
text after its last occurrence, up to the end of that line, is scored; `answer_marker: null`
scores the whole reply.

Splits, keys and file errors are those of the `dataset` environment (`JsonlEnv`): disjoint
splits by a hash of the question, malformed lines reported with their line numbers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

from honed.envs.dataset import JsonlEnv
from honed.types import Item, Score

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answer: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(answer))


def token_f1(prediction: str, answer: str) -> float:
    """Harmonic mean of token precision and recall after normalisation (1.0 when both are
    empty, since an empty answer is then matched exactly)."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _answers(value: Any) -> list[str] | None:
    """The accepted answers of a row as strings, or `None` when the value is unusable."""
    values = value if isinstance(value, list) else [value]
    if not values:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            return None
        out.append(str(v))
    return out


class QAEnv(JsonlEnv):
    """Questions with reference answers from a JSONL file (see the module docstring)."""

    type_name = "qa"

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        path: str,
        question_field: str = "question",
        answer_field: str = "answer",
        kind_field: str = "kind",
        answer_marker: str | None = "Answer:",
        test_path: str | None = None,
        validation_path: str | None = None,
        test_fraction: float = 0.2,
        validation_fraction: float = 0.2,
    ) -> None:
        super().__init__(name, seed, question_field)
        self.answer_field = answer_field
        self.kind_field = kind_field
        if answer_marker is not None and not (isinstance(answer_marker, str) and answer_marker):
            raise self._fail(
                f"answer_marker must be a non-empty string or null, got {answer_marker!r}"
            )
        self._marker = (
            None if answer_marker is None else re.compile(re.escape(answer_marker), re.IGNORECASE)
        )
        self._load(
            path, test_path, validation_path, test_fraction, validation_fraction, self._check_row
        )

    def _check_row(self, row: dict[str, Any]) -> str | None:
        if self.answer_field not in row:
            return f"missing the answer field '{self.answer_field}' (fields: {', '.join(row)})"
        if _answers(row[self.answer_field]) is None:
            return (
                f"the answer field '{self.answer_field}' must be a string or number, or a "
                f"non-empty list of them, got {row[self.answer_field]!r}"
            )
        kind = row.get(self.kind_field)
        if kind is not None and not isinstance(kind, str):
            return f"the kind field '{self.kind_field}' must be a string, got {kind!r}"
        return None

    def answers(self, item: Item) -> list[str]:
        return _answers(item.data[self.answer_field]) or []

    def item_kind(self, item: Item) -> str | None:
        """The row's kind label, if it has one (evaluations report accuracy per kind)."""
        return item.data.get(self.kind_field)

    def reference(self, item: Item) -> str | None:
        return self.answers(item)[0]

    def extract(self, reply: str) -> str:
        """The part of a reply that is scored: after the last answer marker, if any."""
        if self._marker is None:
            return reply
        found = list(self._marker.finditer(reply))
        if not found:
            return reply
        return reply[found[-1].end() :].split("\n", 1)[0]

    def score_batch(self, items: Sequence[Item], completions: Sequence[str]) -> list[Score]:
        scores = []
        for item, reply in zip(items, completions, strict=True):
            prediction = self.extract(reply)
            answers = self.answers(item)
            em = max(exact_match(prediction, a) for a in answers)
            f1 = max(token_f1(prediction, a) for a in answers)
            scores.append(Score(reward=f1, success=em, components={"exact_match": em, "f1": f1}))
        return scores
