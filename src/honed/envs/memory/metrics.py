"""Scoring a reader's answer, per data set, as Mem-α's evaluation code does it.

Mem-α picks the metric from an instance's `data_source` (`evaluate_agent_results.py`,
`AgentResultsEvaluator._compute_score`, falling back to `memalpha/llm_agent/metrics.py`,
`evaluate_wrt_source`, for the MemoryAgentBench sources; docs/memory.md, "Scoring", has the
table and the places where honed differs). `metric_for(source)` names the metric and
`score_answer` applies it:

| metric | sources | score |
|---|---|---|
| `keyword_hit` | booksum, infbench_sum* (keyword answers) | share of the gold keywords found in the answer (lower-cased substring) |
| `rouge_l` | infbench_sum* with a whole reference summary (original MemoryAgentBench records) | ROUGE-L F1 (stemmed), best over the references |
| `label` | pubmed-rct, icl_*, ttl_train | the digits inside `\\boxed{}` (or the whole answer) equal the gold label |
| `substring` | squad, hotpotqa | the first gold answer occurs in the answer (lower-cased) |
| `part_share` | perltqa | share of the `;`-separated gold parts found in the answer |
| `llm_judge` | lme_train, longmemeval* | a chat model answers yes or no to "does the response satisfy the rubric" |
| `event_recall` | eventqa* | 1 when every gold element occurs in the answer |
| `normalized_substring` | ruler_* and any other source | a gold answer occurs in the answer after SQuAD normalisation (lower case, no punctuation or articles), best over the whole answer and its `Answer:` line |
| `contains` | honed (generated or JSONL data) | a gold answer occurs as whole words; the share of keywords for keyword questions |

Reasoning in `<think>...</think>` is dropped first; an unfinished `<think>` leaves no answer.
A judge reply that gives no verdict (empty, a refusal, "yes and no") is not scored: the score is
`None`, which the caller counts as an error and leaves out of the mean.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from functools import cache
from typing import Protocol

METRICS = (
    "keyword_hit",
    "rouge_l",
    "label",
    "substring",
    "part_share",
    "llm_judge",
    "event_recall",
    "normalized_substring",
    "contains",
)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^}]*)\}")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANSWER_LINE = re.compile(r"Answer:(.*)(?:\n|$)", re.IGNORECASE)
_JUDGE_WORDS = re.compile(r"\b(yes|no|correct|wrong|incorrect)\b", re.IGNORECASE)

JUDGE_PROMPT = (
    "Decide whether a model's response to a question satisfies the rubric of the desired "
    "answer. The response need not cover every point of the rubric; it is correct when it "
    "recalls and uses the user's information correctly.\n\nQuestion: {question}\n\nRubric: "
    "{rubric}\n\nResponse: {response}\n\nIs the response correct? Answer yes or no only."
)


class Chat(Protocol):
    def chat(self, messages: list[dict[str, str]]) -> str: ...


def metric_for(source: str, keywords: bool = True) -> str:
    """The metric of a data source (`keywords`: whether its summary questions have keywords;
    without them a summary is scored by ROUGE-L against the reference)."""
    s = source.lower()
    if s == "honed":
        return "contains"
    if s == "booksum" or s.startswith("infbench_sum"):
        return "keyword_hit" if keywords else "rouge_l"
    if s == "pubmed-rct" or "icl" in s or "ttl_train" in s:
        return "label"
    if s in ("squad", "hotpotqa"):
        return "substring"
    if s == "perltqa":
        return "part_share"
    if s == "lme_train" or s.startswith("longmemeval"):
        return "llm_judge"
    if "eventqa" in s:
        return "event_recall"
    return "normalized_substring"


def answer_text(reply: str) -> str | None:
    """The answer part of a reply: `<think>` blocks dropped; None when one never closes."""
    text = _THINK.sub(" ", reply or "")
    return None if "<think>" in text.lower() else text.strip()


def normalize(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def contains_words(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs in `haystack` as whole words ("day 1" is not in "day 12")."""
    needle = _words(needle)
    return bool(needle) and f" {needle} " in f" {_words(haystack)} "


def boxed_label(text: str) -> str:
    """The content of the first `\\boxed{...}`, else the text itself, unquoted and stripped."""
    match = _BOXED.search(text)
    return (match.group(1) if match else text).strip().strip("\"'").strip()


@cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L F1 (rouge-score, stemmed), best over the references."""
    try:
        scorer = _rouge()
    except ImportError:
        from honed.errors import HonedError

        raise HonedError(
            "scoring summaries by ROUGE-L needs rouge-score: pip install 'honed[memory]'"
        ) from None
    return max(scorer.score(ref, prediction)["rougeL"].fmeasure for ref in references)


def json_object(text: str) -> dict | None:
    """The JSON object a judge's reply holds between its first `{` and last `}`, if any (a
    judge often wraps it in prose or a code fence)."""
    start, end = text.find("{"), text.rfind("}")
    if not 0 <= start < end:
        return None
    try:
        decoded = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def parse_yes_no(reply: str | None) -> bool | None:
    """Yes (True), no (False) or no verdict (None) from a judge's reply, strictly: a JSON
    object's `answer`/`label`/`verdict`, else the last line that says yes/no (or
    correct/wrong), else the whole reply, when every such word in it agrees."""
    text = answer_text(reply or "")
    if not text:
        return None
    decoded = json_object(text)
    if decoded is not None:
        for key in ("answer", "label", "verdict", "correct"):
            if key in decoded:
                return _agreed(str(decoded[key]))
    for line in reversed([line for line in text.splitlines() if line.strip()]):
        verdict = _agreed(line)
        if verdict is not None:
            return verdict
        if _JUDGE_WORDS.search(line):
            return None
    return _agreed(text)


def _agreed(text: str) -> bool | None:
    said = {w.lower() in ("yes", "correct") for w in _JUDGE_WORDS.findall(text)}
    return said.pop() if len(said) == 1 else None


def score_answer(
    metric: str,
    reply: str,
    answers: Sequence[str],
    keywords: Sequence[str] = (),
    question: str = "",
    judge: Chat | None = None,
) -> float | None:
    """The score in [0, 1] of a reader's `reply` by `metric` (see the module table); None when
    an LLM judge gave no verdict."""
    text = answer_text(reply)
    if metric == "llm_judge":
        if judge is None:
            raise ValueError("the llm_judge metric needs a judge chat model")
        if text is None:
            return 0.0
        prompt = JUDGE_PROMPT.format(question=question, rubric=answers[0], response=text)
        verdict = parse_yes_no(judge.chat([{"role": "user", "content": prompt}]))
        return None if verdict is None else float(verdict)
    if text is None:
        return 0.0
    return _score_text(metric, text, list(answers), list(keywords))


def _score_text(metric: str, text: str, answers: list[str], keywords: list[str]) -> float:
    low = text.lower()
    if metric == "keyword_hit":
        return sum(k.lower() in low for k in keywords) / len(keywords) if keywords else 0.0
    if metric == "contains":
        if keywords:
            return sum(contains_words(text, k) for k in keywords) / len(keywords)
        return float(any(contains_words(text, a) for a in answers))
    if metric == "rouge_l":
        return rouge_l(text, answers)
    if metric == "label":
        label = boxed_label(text)
        return float(label.isdigit() and label == answers[0].strip().strip("\"'").strip())
    if metric == "substring":
        return float(answers[0].lower() in low)
    if metric == "part_share":
        parts = [p.strip().lower() for p in answers[0].split(";") if p.strip()]
        return sum(p in low for p in parts) / len(parts) if parts else 0.0
    if metric == "event_recall":
        return float(all(a.lower() in low for a in answers))
    if metric == "normalized_substring":
        line = _ANSWER_LINE.search(text)
        candidates = [text] + ([line.group(1)] if line else [])
        return float(
            any(normalize(a) in normalize(c) for c in candidates for a in answers if normalize(a))
        )
    raise ValueError(f"unknown metric {metric!r}")


def query_instruction(metric: str) -> str:
    """What the reader is told about the form of its answer, by metric (Mem-α asks for
    `\\boxed{label}` on classification sources and uses the bare question elsewhere)."""
    if metric == "label":
        return (
            "Classify the input below by the labelled examples and rules in memory. Give the "
            "final label, a single number, as \\boxed{label}.\n\n"
        )
    if metric in ("keyword_hit", "rouge_l"):
        return "The memory holds what the user has read. Use it to answer the request.\n\n"
    return ""
