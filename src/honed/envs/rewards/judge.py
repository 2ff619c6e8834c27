"""`llm_judge`: a reward that asks an OpenAI-compatible server to grade each completion against
a rubric.

    reward:
      - type: llm_judge
        base_url: http://127.0.0.1:8000/v1
        model: Qwen/Qwen2.5-7B-Instruct
        rubric: "Full marks for a correct, sourced answer; none for a guess."
        reference_field: answer        # optional: a column shown to the judge as the reference

The judge sees the rubric, the task (the prompt), the reference if any, and the response (for
multi-turn environments, the whole conversation after the prompt, tool calls included), and
must end its verdict with a line `SCORE: <n>`, n between `min_score` and `max_score`; the
reward is n mapped onto [0, 1]. Parsing is strict: a verdict without that line (or with a score
out of range) is asked once more (`parse_retries`), and if it still cannot be read it is an
error, never silently a score: by default the run stops naming the item and quoting the verdict;
with `error_score: x` the completion scores x and the error is counted
(`reward/<env>/<name>/errors`).

Requests go through honed's chat client (retries with back-off on 429/5xx/timeouts, a
concurrency limit, a preflight check of the server and model at construction). Verdicts are
cached in memory, keyed by (rubric, prompt, reference, completion): a GRPO group often repeats
a completion, and evaluation repeats whole batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from honed.errors import HonedError
from honed.models.chat import ChatClient, ChatModelConfig

log = logging.getLogger(__name__)

_SCORE = re.compile(
    r"^[\s*_#>]*score[\s*_]*:[\s*_]*(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?[\s*_.]*$",
    re.IGNORECASE | re.MULTILINE,
)
_SHOWN = 120  # characters of an unreadable verdict quoted in an error


class Verdicts(list):
    """Rewards, one per completion, with `errors[i]` set where the verdict was unreadable and
    `error_score` stood in (what `RewardSet` counts)."""

    def __init__(self, values: list[float], errors: list[bool]) -> None:
        super().__init__(values)
        self.errors = errors


def as_text(value: Any) -> str:
    """A prompt or completion for the judge to read: text as it is, messages one per line."""
    if isinstance(value, str):
        return value
    lines = []
    for message in value or []:
        line = f"{message.get('role', '?')}: {message.get('content') or ''}".rstrip()
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            line += f"\n  calls {function.get('name')}({json.dumps(function.get('arguments'))})"
        lines.append(line)
    return "\n".join(lines)


def parse_score(verdict: str, low: float, high: float) -> float | None:
    """The last `SCORE: n` line of a verdict, if n is within [low, high] (a `n/high` form must
    name the same scale); `None` otherwise."""
    found = list(_SCORE.finditer(verdict))
    if not found:
        return None
    number, scale = found[-1].group(1), found[-1].group(2)
    value = float(number)
    if scale is not None and float(scale) != high:
        return None
    return value if low <= value <= high else None


class LLMJudge:
    """Grades completions with an LLM (see the module docstring)."""

    def __init__(
        self,
        where: str = "llm_judge",
        *,
        base_url: str,
        model: str,
        rubric: str,
        reference_field: str | None = None,
        min_score: float = 0.0,
        max_score: float = 10.0,
        api_key_env: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        concurrency: int = 8,
        parse_retries: int = 1,
        error_score: float | None = None,
        cache_size: int = 100_000,
        check: bool = True,
    ) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise HonedError(f"{where}: 'rubric' must be a non-empty text")
        if not min_score < max_score:
            raise HonedError(f"{where}: min_score must be below max_score")
        try:
            config = ChatModelConfig(
                base_url=base_url,
                model=model,
                api_key_env=api_key_env,
                temperature=temperature,
                max_tokens=max_tokens,
                timeout_s=timeout_s,
                max_retries=max_retries,
                concurrency=concurrency,
            )
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise HonedError(
                f"{where}: invalid '{'.'.join(map(str, problem['loc']))}': {problem['msg']}"
            ) from exc
        self.where = where
        self.rubric = rubric
        self.reference_field = reference_field
        self.low, self.high = float(min_score), float(max_score)
        self.parse_retries = parse_retries
        self.error_score = error_score
        self.cache_size = cache_size
        self._cache: OrderedDict[str, float | None] = OrderedDict()
        self._lock = threading.Lock()
        self.client = ChatClient(config)
        if check:
            self.client.check()

    # ------------------------------------------------------------------ the reward

    def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> Verdicts:
        references = columns.get(self.reference_field) if self.reference_field else None
        if self.reference_field and references is None:
            raise HonedError(
                f"{self.where}: reference_field '{self.reference_field}' is not a column of the "
                "data"
            )
        cases = [
            (
                as_text(p),
                as_text(c),
                None if references is None else as_text(str(references[i])),
            )
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
        ]
        keys = [self._key(*case) for case in cases]
        known: dict[str, float | None] = {}
        with self._lock:
            known.update((k, self._cache[k]) for k in keys if k in self._cache)
        todo = {k: case for k, case in zip(keys, cases, strict=True) if k not in known}
        if todo:
            workers = min(self.client.config.concurrency, len(todo))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                grades = list(pool.map(lambda c: self.grade(*c), todo.values()))
            verdicts = dict(zip(todo, grades, strict=True))
            known.update(verdicts)
            with self._lock:
                for key, score in verdicts.items():
                    self._remember(key, score)
        scores = [known[k] for k in keys]
        return Verdicts(
            [self.error_score if s is None else s for s in scores],  # type: ignore[misc]
            [s is None for s in scores],
        )

    def _key(self, prompt: str, completion: str, reference: str | None) -> str:
        text = json.dumps([self.rubric, prompt, reference, completion], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def _remember(self, key: str, score: float | None) -> None:
        self._cache[key] = score
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    # ------------------------------------------------------------------ one verdict

    def messages(self, prompt: str, completion: str, reference: str | None) -> list[dict]:
        scale = f"{self.low:g} (worst) to {self.high:g} (best)"
        parts = [f"Rubric:\n{self.rubric}", f"Task given to the model:\n{prompt}"]
        if reference is not None:
            parts.append(f"Reference answer:\n{reference}")
        parts.append(f"The model's response:\n{completion}")
        parts.append(f"Grade the response against the rubric. End with a line: SCORE: <{scale}>")
        return [
            {
                "role": "system",
                "content": "You grade a model's response against a rubric, strictly and "
                f"briefly. Your reply ends with one line 'SCORE: <n>', n from {scale}.",
            },
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def grade(self, prompt: str, completion: str, reference: str | None) -> float | None:
        """The normalised score of one completion, or `None` (counted, or an error) when no
        verdict could be read after `parse_retries` reminders."""
        messages = self.messages(prompt, completion, reference)
        reply = self.client.complete(messages, stage="llm_judge")
        for attempt in range(self.parse_retries + 1):
            score = parse_score(reply.text, self.low, self.high)
            if score is not None:
                return (score - self.low) / (self.high - self.low)
            if attempt == self.parse_retries:
                break
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {
                    "role": "user",
                    "content": f"End with the line 'SCORE: <n>', n from {self.low:g} to "
                    f"{self.high:g}. Reply with that line only.",
                },
            ]
            reply = self.client.complete(messages, stage="llm_judge")
        cut = " (the verdict was cut at max_tokens)" if reply.finish_reason == "length" else ""
        shown = reply.text.strip()[:_SHOWN]
        if self.error_score is None:
            raise HonedError(
                f"{self.where}: the judge's verdict has no readable 'SCORE: <n>' line from "
                f"{self.low:g} to {self.high:g}{cut}: {shown!r} (grading the response to "
                f"{prompt[:60]!r}); set error_score to score unreadable verdicts instead "
                "(they are counted)"
            )
        log.warning(
            "%s: unreadable verdict%s: %r; it scores %s", self.where, cut, shown, self.error_score
        )
        return None
