"""An OpenAI-compatible chat-completions client: the skill loop's target and reflector, and LLM
readers and judges.

It speaks plain HTTP (`POST {base_url}/chat/completions`, `GET {base_url}/models`) with httpx, so
it works with vLLM, SGLang, Ollama, llama.cpp's server and hosted OpenAI-compatible APIs alike,
without a vendor SDK. What it adds over a bare POST is what a long unattended run needs:

- a preflight `check()` that fails in seconds, naming the server and what is wrong, instead of
  an hour later in the middle of a step;
- a concurrency limit shared by every caller of one client (`chat_many` and any threads that
  call `chat` directly);
- retries with exponential back-off and jitter on 429, 5xx, timeouts and connection errors,
  honouring `Retry-After`, and an immediate, readable `HonedError` on any other 4xx (a bad
  request does not get better by repeating it); every retry is logged, never silent;
- token counts per stage (`usage()`), from the `usage` field of each response.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from honed.config import key_over_plain_http
from honed.errors import HonedError, did_you_mean
from honed.text import valid_text

log = logging.getLogger(__name__)

MAX_DELAY_S = 60.0  # longest wait between attempts, Retry-After included
CHECK_TIMEOUT_S = 10.0  # the preflight must fail fast even when timeout_s is long

Messages = list[dict[str, Any]]


class ChatModelConfig(BaseModel):
    """Where and how to call one chat model (the skill loop has one for each role).

    `base_url` includes the API prefix, e.g. `http://127.0.0.1:8000/v1` (vLLM, SGLang),
    `http://127.0.0.1:11434/v1` (Ollama) or `https://api.openai.com/v1`. `api_key_env` is the
    *name* of the environment variable holding the key, so keys never sit in config files or run
    directories; leave it unset for local servers that need no key. `temperature` and
    `max_tokens` are left out of the request when `None` (the server's default applies);
    `extra_body` is merged into every request (e.g. `{"top_p": 0.9, "seed": 0}`). `backoff_s` is
    the first retry's wait, doubled on each further retry.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    temperature: float | None = 0.0
    max_tokens: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    concurrency: int = Field(default=8, ge=1)
    backoff_s: float = Field(default=1.0, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    # a key goes over plain http:// only to this machine unless this is set
    allow_insecure_http: bool = False

    @model_validator(mode="after")
    def _key_only_over_https(self) -> ChatModelConfig:
        problem = key_over_plain_http(self.base_url, self.api_key_env, self.allow_insecure_http)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        return value


@dataclass
class ChatReply:
    """One completion: its text, why generation stopped (`length` means truncated), tokens."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


class UsageMeter:
    """Requests, retries and tokens per stage label, safe to update from many threads.

    One meter may be shared by several clients (target and reflector) so that a run's summary
    has one table; it checkpoints with `state_dict()` so a resumed run keeps counting.
    """

    _FIELDS = ("requests", "retries", "prompt_tokens", "completion_tokens", "total_tokens")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, dict[str, int]] = {}

    def add(self, stage: str, **counts: int) -> None:
        with self._lock:
            row = self._stages.setdefault(stage, dict.fromkeys(self._FIELDS, 0))
            for key, value in counts.items():
                row[key] += value

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {stage: dict(row) for stage, row in self._stages.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"stages": self.usage()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._stages = {
                stage: {k: int(row.get(k, 0)) for k in self._FIELDS}
                for stage, row in state["stages"].items()
            }


def retry_delay(
    attempt: int, backoff_s: float, retry_after: str | None = None, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number `attempt + 1` (`attempt` counts from 0).

    A `Retry-After` header (seconds or an HTTP date) wins, since the server knows when it will
    have room; otherwise exponential back-off `backoff_s * 2**attempt` scaled by a random factor
    in [0.5, 1] so that parallel callers that failed together do not retry together. Both are
    capped at `MAX_DELAY_S`.
    """
    if retry_after:
        seconds: float | None
        try:
            seconds = float(retry_after)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(retry_after)
                seconds = when.timestamp() - time.time()
            except (TypeError, ValueError):
                seconds = None
        if seconds is not None and math.isfinite(seconds):
            return min(max(seconds, 0.0), MAX_DELAY_S)
    jitter = (rng or random).uniform(0.5, 1.0)
    return min(backoff_s * 2**attempt * jitter, MAX_DELAY_S)


def _server_message(response: httpx.Response) -> str:
    """The error text an OpenAI-compatible server put in its reply, shortened."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error:
            return str(error)[:300]
    return str(data)[:300]


def _message_text(content: Any) -> str:
    """`message.content` as text: a string, `None` (tool calls, refusals) or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return valid_text(str(content))  # a JSON escape like "\ud800" is no text to hash or write


def _count(usage: dict[str, Any], key: str) -> int:
    """A token count from a response's `usage`; servers that omit or garble it count 0."""
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


class ChatClient:
    """Chat completions against one OpenAI-compatible server and model.

    Thread-safe: share one client between threads; at most `config.concurrency` requests are in
    flight at once. Call `check()` before starting work. `chat(messages)` is the duck-typed
    interface other components rely on (the memory environment's LLM reader calls it).
    """

    def __init__(self, config: ChatModelConfig, usage: UsageMeter | None = None) -> None:
        self.config = config
        self.meter = usage or UsageMeter()
        headers = {"Accept": "application/json"}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "").strip()
            if not key:
                raise HonedError(
                    f"api_key_env is '{config.api_key_env}' but that environment variable is "
                    f"not set (needed for {config.base_url}); export it, or remove api_key_env "
                    "for a local server that needs no key"
                )
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(
            max_connections=config.concurrency, max_keepalive_connections=config.concurrency
        )
        self._http = httpx.Client(headers=headers, timeout=config.timeout_s, limits=limits)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._rng = random.Random()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def usage(self) -> dict[str, dict[str, int]]:
        """`{stage: {requests, retries, prompt_tokens, completion_tokens, total_tokens}}`."""
        return self.meter.usage()

    def _key_hint(self) -> str:
        if self.config.api_key_env:
            return f"check the key in the environment variable {self.config.api_key_env}"
        return "set api_key_env to the name of the environment variable that holds the key"

    def check(self) -> None:
        """Fail fast, before any work, if the server is unreachable, refuses the credentials,
        has no OpenAI-compatible API at `base_url`, or does not list the configured model.

        Servers whose `/models` reply lists no models skip the model check.
        """
        base, model = self.config.base_url, self.config.model
        try:
            response = self._http.get(
                f"{base}/models", timeout=min(self.config.timeout_s, CHECK_TIMEOUT_S)
            )
        except httpx.TransportError as exc:
            raise HonedError(
                f"cannot reach the chat server at {base} ({type(exc).__name__}: {exc}); "
                "start the server or fix base_url"
            ) from None
        status = response.status_code
        if status in (401, 403):
            raise HonedError(
                f"the chat server at {base} refused the credentials (HTTP {status}: "
                f"{_server_message(response)}); {self._key_hint()}"
            )
        if status == 404:
            raise HonedError(
                f"no OpenAI-compatible API at {base}: GET {base}/models returned 404; "
                "base_url usually ends in /v1"
            )
        if status >= 400:
            raise HonedError(
                f"the chat server at {base} answered GET /models with HTTP {status}: "
                f"{_server_message(response)}"
            )
        try:
            listed = [m["id"] for m in response.json()["data"] if isinstance(m, dict)]
        except (ValueError, KeyError, TypeError):
            listed = []
        if listed and model not in listed:
            shown = ", ".join(listed[:10]) + (", ..." if len(listed) > 10 else "")
            raise HonedError(
                f"model '{model}' is not served at {base}{did_you_mean(model, listed)}; "
                f"the server lists: {shown}"
            )

    def _body(self, messages: Messages, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            **self.config.extra_body,
            **params,
        }
        return {k: v for k, v in body.items() if v is not None}

    def complete(self, messages: Messages, stage: str = "default", **params: Any) -> ChatReply:
        """One chat completion with retries; `params` override the config's request fields
        (a `None` value leaves the field out). Raises `HonedError` when it cannot succeed."""
        url = f"{self.config.base_url}/chat/completions"
        return self._reply(self.post(url, self._body(messages, params), stage), url, stage)

    def post(self, url: str, body: dict[str, Any], stage: str = "default") -> httpx.Response:
        """POST `body` as JSON to `url` (any route of the server) with the client's retries,
        concurrency limit and credentials; the successful response, or a `HonedError`."""
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            retry_after = None
            try:
                with self._slots:
                    response = self._http.post(url, json=body)
            except httpx.TimeoutException:
                problem = f"timed out after {self.config.timeout_s:g}s"
            except httpx.TransportError as exc:
                problem = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status < 400:
                    return response
                problem = f"HTTP {status}: {_server_message(response)}"
                if status != 429 and status < 500:
                    hint = f"; {self._key_hint()}" if status in (401, 403) else ""
                    raise HonedError(
                        f"request to {url} (model '{self.config.model}') failed with "
                        f"{problem}{hint}"
                    )
                retry_after = response.headers.get("retry-after")
            if attempt + 1 < attempts:
                delay = retry_delay(attempt, self.config.backoff_s, retry_after, self._rng)
                log.warning(
                    "request to %s %s; retry %d/%d in %.1fs",
                    url,
                    problem,
                    attempt + 1,
                    attempts - 1,
                    delay,
                )
                self.meter.add(stage, retries=1)
                time.sleep(delay)
        raise HonedError(
            f"request to {url} (model '{self.config.model}') {problem}; gave up after "
            f"{attempts} attempt(s)"
        )

    def _reply(self, response: httpx.Response, url: str, stage: str) -> ChatReply:
        try:
            data = response.json()
            choice = data["choices"][0]
            text = _message_text(choice.get("message", {}).get("content"))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise HonedError(
                f"chat server at {url} sent a reply that is not a chat completion: "
                f"{response.text[:200]!r}"
            ) from None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        total = _count(usage, "total_tokens") or prompt + completion
        self.meter.add(
            stage,
            requests=1,
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total,
        )
        return ChatReply(text, choice.get("finish_reason"), prompt, completion)

    def chat(self, messages: Messages, stage: str = "default", **params: Any) -> str:
        """The reply text of one chat completion (see `complete`)."""
        return self.complete(messages, stage, **params).text

    def chat_many(self, batch: list[Messages], stage: str = "default", **params: Any) -> list[str]:
        """Reply texts for many conversations, in order, up to `concurrency` at a time.

        The first failure cancels the requests not yet started and is raised.
        """
        if not batch:
            return []
        pool = ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(batch)))
        try:
            futures = [pool.submit(self.chat, messages, stage, **params) for messages in batch]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
