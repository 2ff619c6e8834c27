"""An OpenAI-compatible chat-completions client: the skill loop's target and reflector, and LLM
readers and judges.

It speaks plain HTTP (`POST {base_url}/chat/completions`, `GET {base_url}/models`) with httpx, so
it works with vLLM, SGLang, Ollama, llama.cpp's server and hosted OpenAI-compatible APIs alike,
without a vendor SDK. What it adds over a bare POST is what a long unattended run against a real
server on a bad day needs:

- a preflight `check()` that fails in seconds, naming the server and what is wrong, instead of
  an hour later in the middle of a step;
- a concurrency limit shared by every caller of one client (`complete_many` and any threads that
  call `complete` directly);
- retries with exponential back-off and jitter, within `max_retries`, on 429, 5xx, timeouts,
  connection errors, a 200 whose body is not a chat completion (an HTML page from a proxy, a cut
  connection) and a completion with no text (a reasoning model that spent its tokens thinking,
  an overloaded server); an immediate, readable error on any other 4xx (a bad request does not
  get better by repeating it); every retry is logged, never silent;
- a 429 pauses every request to that server (all clients of this process), not only the one that
  got it, until its `Retry-After` (or back-off) has passed;
- `timeout_s` bounds each request as a whole, connect to last byte: httpx's own timeouts bound
  each socket operation, so a server that trickles bytes would hold a request forever. The
  requests run on one event loop per process, where `asyncio.wait_for` can cut them;
- every reply says why generation stopped (`finish_reason`, `length` meaning cut at
  `max_tokens`), with the reasoning of a reasoning model (a `reasoning_content` or `reasoning`
  field, `<think>` blocks) kept apart from the answer;
- counts per stage (`usage()`): requests, retries, truncated, empty and invalid replies, calls
  that failed, tokens from each response's `usage` field, and the cost in USD when the config
  has a `price`.

`ChatReply` keeps the whole message as received, so fields honed does not read yet (tool calls)
reach a caller that wants them.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from honed.config import key_over_plain_http
from honed.errors import HonedError, did_you_mean
from honed.text import valid_text, valid_values

log = logging.getLogger(__name__)

MAX_DELAY_S = 60.0  # longest wait between attempts, Retry-After included
CHECK_TIMEOUT_S = 10.0  # the preflight must fail fast even when timeout_s is long
# Prompt tokens are estimated before sending (dry runs, prompt caps) at this many UTF-8 bytes per
# token, on the pessimistic side of BPE tokenizers on English text, plus a few tokens per message
# for the chat template; the server's own counts correct the estimate upward as they come.
BYTES_PER_TOKEN = 3.0
TOKENS_PER_MESSAGE = 4

Messages = list[dict[str, Any]]
T = TypeVar("T")


class Price(BaseModel):
    """What a model costs, in USD per million tokens (as providers list it)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="USD per million prompt tokens.")
    output: float = Field(ge=0, description="USD per million completion tokens.")

    def usd(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


class ChatModelConfig(BaseModel):
    """Where and how to call one chat model (the skill loop has one for each role; judges and
    readers of environments take one too)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        description="The API root including its prefix: `http://127.0.0.1:8000/v1` (vLLM, "
        "SGLang), `http://127.0.0.1:11434/v1` (Ollama), `https://api.openai.com/v1`."
    )
    model: str = Field(min_length=1, description="The model name the server knows.")
    api_key_env: str | None = Field(
        default=None,
        description="The name of the environment variable holding the key, so that keys never "
        "sit in config files or run directories (sent only over https://, or plain http:// to "
        "this machine); `null`: no key, for local servers.",
    )
    temperature: float | None = Field(
        default=0.0, description="Sampling temperature; `null`: left to the server."
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens per completion; `null`: left to the server.",
    )
    timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Seconds per attempt, the whole of it: connect to last byte.",
    )
    max_retries: int = Field(
        default=4,
        ge=0,
        description="Retries on 429, 5xx, timeouts, connection errors, 200s that are no chat "
        "completion, and empty replies.",
    )
    concurrency: int = Field(default=8, ge=1, description="Requests in flight at once.")
    backoff_s: float = Field(
        default=1.0,
        ge=0,
        description="The first retry's wait in seconds, doubled on each further retry "
        "(`Retry-After` wins).",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Merged into every request, e.g. `{top_p: 0.9, seed: 0}`.",
    )
    price: Price | None = Field(
        default=None,
        description="What the model costs, `{input: X, output: Y}` in USD per million prompt "
        "and completion tokens: costs in `summary.json` and `--dry-run`, and `budget.max_usd`; "
        "`null`: unknown.",
    )
    allow_insecure_http: bool = Field(
        default=False,
        description="Also send the key over plain http:// to another machine (a network of "
        "your own).",
    )

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
    """One completion: the answer, why generation stopped (`length`: cut at `max_tokens`), the
    tokens, the reasoning a reasoning model sent apart from the answer, and the message as the
    server sent it (its strings made valid text), for fields a caller reads itself."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    reasoning: str = ""
    message: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def empty(self) -> bool:
        """No answer text (blank counts as none) and no tool calls."""
        return not self.text.strip() and not self.message.get("tool_calls")


class ChatFailure(HonedError):
    """A chat request that did not give a usable reply. `kind` says how: `gave_up` (retries
    spent on 429, 5xx, timeouts, dropped connections or invalid bodies), `refused` (a 4xx other
    than 429), `empty` (every attempt came back without text) or `truncated` (cut at
    `max_tokens` on every attempt the caller allowed)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


USAGE_FIELDS = (
    "requests",
    "retries",
    "truncated",
    "empty",
    "invalid",
    "failed",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
)


class UsageMeter:
    """Counts per stage label, safe to update from many threads.

    `requests` are completions received (each one billed, empty and truncated ones included),
    `retries` attempts repeated, `truncated` replies cut at `max_tokens`, `empty` replies with no
    text, `invalid` 200s that were no chat completion, `failed` calls given up on; then tokens,
    and `usd` where the client knows its price. One meter may be shared by several clients
    (target and reflector) so that a run's summary has one table; it checkpoints with
    `state_dict()` so a resumed run keeps counting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, dict[str, float]] = {}

    def add(self, stage: str, **counts: float) -> None:
        with self._lock:
            row = self._stages.setdefault(stage, dict.fromkeys(USAGE_FIELDS, 0))
            for key, value in counts.items():
                row[key] = row.get(key, 0) + value

    def usage(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {stage: dict(row) for stage, row in self._stages.items()}

    def totals(self) -> dict[str, float]:
        """Every counter summed over the stages."""
        out: dict[str, float] = dict.fromkeys(USAGE_FIELDS, 0)
        for row in self.usage().values():
            for key, value in row.items():
                out[key] = out.get(key, 0) + value
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"stages": self.usage()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Counts saved by any honed: counters it did not have yet start at 0."""
        with self._lock:
            self._stages = {}
            for stage, row in state["stages"].items():
                counts: dict[str, float] = {k: int(row.get(k, 0)) for k in USAGE_FIELDS}
                if "usd" in row:
                    counts["usd"] = float(row["usd"])
                self._stages[stage] = counts


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


_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)


def split_reasoning(message: dict[str, Any]) -> tuple[str, str]:
    """(answer, reasoning) of a chat message.

    Reasoning models send their thinking in a `reasoning_content` field (DeepSeek, vLLM, SGLang),
    a `reasoning` field (newer vLLM, OpenRouter, Ollama) or inline in `<think>...</think>` blocks;
    the answer is what is left. A `</think>` without its `<think>` (templates that open the block
    in the prompt) ends reasoning that began with the content; a `<think>` never closed (cut at
    `max_tokens`) is reasoning to the end, leaving no answer.
    """
    content = _message_text(message.get("content"))
    parts = []
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            parts.append(valid_text(value.strip()))
            break  # servers that send both send the same text twice
    if "<think>" not in content and "</think>" not in content:
        return content, "\n\n".join(parts)
    head, closing, tail = content.partition("</think>")
    if closing and "<think>" not in head:
        parts.append(head.strip())
        content = tail
    parts += [m.group(1).strip() for m in _THINK.finditer(content)]
    answer = _THINK.sub("", content).strip()
    return answer, "\n\n".join(p for p in parts if p)


def _count(usage: dict[str, Any], key: str) -> int:
    """A token count from a response's `usage`; servers that omit or garble it count 0."""
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0


def estimate_tokens(messages: Messages) -> int:
    """Prompt tokens of `messages` by `BYTES_PER_TOKEN`, before any server has counted them."""
    total = 0.0
    for m in messages:
        total += len(_message_text(m.get("content")).encode("utf-8")) / BYTES_PER_TOKEN
        total += TOKENS_PER_MESSAGE
    return math.ceil(total)


# ---------------------------------------------------------------- the event loop and pauses

_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for HTTP, on a daemon thread, started at first use (and again
    in a forked child, which does not inherit the thread)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="honed-http", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def _run(coro: Any, seconds: float | None = None) -> Any:
    """Run `coro` on the HTTP loop and wait for it, cut after `seconds` (asyncio.TimeoutError)."""
    if seconds is not None:
        coro = asyncio.wait_for(coro, seconds)
    future = asyncio.run_coroutine_threadsafe(coro, _event_loop())
    try:
        return future.result()
    except BaseException:
        future.cancel()  # Ctrl-C in the caller: the request must not outlive it
        raise


class _Pauses:
    """Until when each server (scheme, host and port) asked every caller to wait (a 429)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def pause(self, origin: str, seconds: float) -> None:
        with self._lock:
            until = time.monotonic() + seconds
            self._until[origin] = max(self._until.get(origin, 0.0), until)

    def wait(self, origin: str) -> None:
        while True:
            with self._lock:
                left = self._until.get(origin, 0.0) - time.monotonic()
            if left <= 0:
                return
            time.sleep(left)


_PAUSES = _Pauses()


class _Unusable(Exception):
    """A 200 whose reply cannot be used (no chat completion, no text): retried like a 5xx.
    `kind` is what giving up on it is called (`ChatFailure.kind`)."""

    def __init__(self, problem: str, kind: str = "gave_up") -> None:
        super().__init__(problem)
        self.kind = kind


class ChatClient:
    """Chat completions against one OpenAI-compatible server and model.

    Thread-safe: share one client between threads; at most `config.concurrency` requests are in
    flight at once. Call `check()` before starting work. `chat(messages)` is the duck-typed
    interface other components rely on (the memory environment's LLM reader calls it);
    `complete` gives the whole `ChatReply`.
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
        self._http = httpx.AsyncClient(headers=headers, timeout=config.timeout_s, limits=limits)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._rng = random.Random()
        parts = urlsplit(config.base_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        # The largest ratio of the server's prompt-token counts to `estimate_tokens` seen so far.
        self._calibration = 1.0
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _run(self._http.aclose())

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def usage(self) -> dict[str, dict[str, float]]:
        """`{stage: {requests, retries, truncated, empty, invalid, failed, prompt_tokens,
        completion_tokens, total_tokens[, usd]}}`."""
        return self.meter.usage()

    def estimate_tokens(self, messages: Messages) -> int:
        """The prompt tokens `messages` will cost at this server: `estimate_tokens`, scaled up by
        the largest ratio the server's own counts have shown so far."""
        return math.ceil(estimate_tokens(messages) * self._calibration)

    def _key_hint(self) -> str:
        if self.config.api_key_env:
            return f"check the key in the environment variable {self.config.api_key_env}"
        return "set api_key_env to the name of the environment variable that holds the key"

    def _send(self, method: str, url: str, body: Any, seconds: float) -> httpx.Response:
        """One HTTP request, the whole of it (connect to last byte) within `seconds`."""
        try:
            return _run(self._http.request(method, url, json=body), seconds)
        except asyncio.TimeoutError:
            raise httpx.TimeoutException(f"no complete reply within {seconds:g}s") from None

    def check(self) -> None:
        """Fail fast, before any work, if the server is unreachable, refuses the credentials,
        has no OpenAI-compatible API at `base_url`, or does not list the configured model.

        Servers whose `/models` reply lists no models skip the model check.
        """
        base, model = self.config.base_url, self.config.model
        try:
            response = self._send(
                "GET", f"{base}/models", None, min(self.config.timeout_s, CHECK_TIMEOUT_S)
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

    def complete(
        self,
        messages: Messages,
        stage: str = "default",
        *,
        accept_empty: bool = False,
        truncated_retries: int = 0,
        **params: Any,
    ) -> ChatReply:
        """One chat completion; `params` override the config's request fields (a `None` value
        leaves the field out).

        Transport problems, 5xx, 429, invalid bodies and empty replies are retried within
        `max_retries`; a reply cut at `max_tokens` is returned as it is (`reply.truncated`),
        unless `truncated_retries` asks for that many more tries first. Raises `ChatFailure`
        when no usable reply came; with `accept_empty`, a reply still empty after every attempt
        is returned instead.
        """
        url = f"{self.config.base_url}/chat/completions"
        body = self._body(messages, params)
        for cut in range(truncated_retries + 1):
            reply = self._attempts(url, body, stage, self._reader(url, stage, accept_empty))
            if reply.prompt_tokens:
                ratio = reply.prompt_tokens / max(estimate_tokens(messages), 1)
                self._calibration = max(self._calibration, ratio)
            if not (reply.truncated and truncated_retries):
                return reply
            if cut < truncated_retries:
                log.warning(
                    "reply from %s (model '%s') was cut at max_tokens (finish_reason length); "
                    "asking again (%d/%d)",
                    url,
                    self.config.model,
                    cut + 1,
                    truncated_retries,
                )
                self.meter.add(stage, retries=1)
        self.meter.add(stage, failed=1)
        raise ChatFailure(
            f"the reply from {url} (model '{self.config.model}') was cut at max_tokens "
            f"({self.config.max_tokens}) on all {truncated_retries + 1} attempts",
            "truncated",
        )

    def _reader(
        self, url: str, stage: str, accept_empty: bool
    ) -> Callable[[httpx.Response, bool], ChatReply]:
        """How a 200 becomes a `ChatReply`, counted; what cannot be used raises `_Unusable`
        (on the last attempt, an empty reply is returned when `accept_empty`)."""

        def read(response: httpx.Response, last: bool) -> ChatReply:
            try:
                data = response.json()
                message = data["choices"][0]["message"]
                if not isinstance(message, dict):
                    raise TypeError
                finish = data["choices"][0].get("finish_reason")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                self.meter.add(stage, invalid=1)
                raise _Unusable(
                    f"sent a reply that is not a chat completion: {response.text[:200]!r}"
                ) from None
            answer, reasoning = split_reasoning(message)
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
            reply = ChatReply(
                answer,
                finish if isinstance(finish, str) else None,
                prompt,
                completion,
                reasoning,
                valid_values(message),
            )
            counts: dict[str, float] = {
                "requests": 1,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": _count(usage, "total_tokens") or prompt + completion,
                "truncated": int(reply.truncated),
                "empty": int(reply.empty),
            }
            if self.config.price is not None:
                counts["usd"] = self.config.price.usd(prompt, completion)
            self.meter.add(stage, **counts)
            if reply.empty and not (accept_empty and last):
                raise _Unusable(
                    f"replied with no text (finish_reason {reply.finish_reason}, "
                    f"{completion} completion tokens)",
                    "empty",
                )
            return reply

        return read

    def post(self, url: str, body: dict[str, Any], stage: str = "default") -> httpx.Response:
        """POST `body` as JSON to `url` (any route of the server) with the client's retries,
        concurrency limit, deadline and credentials; the successful response, or a
        `ChatFailure`."""
        return self._attempts(url, body, stage, lambda response, last: response)

    def _attempts(
        self, url: str, body: dict[str, Any], stage: str, read: Callable[[httpx.Response, bool], T]
    ) -> T:
        """POST until `read` accepts a 2xx/3xx reply or the attempts are spent.

        Long because the retry policy is one piece: what is retried (429, 5xx, timeouts,
        connection errors, what `read` finds unusable), what is not (other 4xx), the shared
        pause after a 429, and the counting and logging of each retry and of giving up.
        """
        attempts = self.config.max_retries + 1
        kind = "gave_up"
        for attempt in range(attempts):
            retry_after, status = None, 0
            try:
                with self._slots:
                    _PAUSES.wait(self._origin)
                    response = self._send("POST", url, body, self.config.timeout_s)
                status = response.status_code
                if status < 400:
                    return read(response, attempt + 1 == attempts)
                problem = f"HTTP {status}: {_server_message(response)}"
                if status != 429 and status < 500:
                    hint = f"; {self._key_hint()}" if status in (401, 403) else ""
                    self.meter.add(stage, failed=1)
                    raise ChatFailure(
                        f"request to {url} (model '{self.config.model}') failed with "
                        f"{problem}{hint}",
                        "refused",
                    )
                retry_after = response.headers.get("retry-after")
                kind = "gave_up"
            except httpx.TimeoutException:
                problem, kind = f"timed out after {self.config.timeout_s:g}s", "gave_up"
            except httpx.TransportError as exc:
                problem = f"connection failed ({type(exc).__name__}: {exc})"
                kind = "gave_up"
            except _Unusable as exc:
                problem, kind = str(exc), exc.kind
            if attempt + 1 < attempts:
                delay = retry_delay(attempt, self.config.backoff_s, retry_after, self._rng)
                if status == 429:  # the server is full for everyone, not only for this request
                    _PAUSES.pause(self._origin, delay)
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
        self.meter.add(stage, failed=1)
        raise ChatFailure(
            f"request to {url} (model '{self.config.model}') {problem}; gave up after "
            f"{attempts} attempt(s)",
            kind,
        )

    def chat(self, messages: Messages, stage: str = "default", **params: Any) -> str:
        """The answer text of one chat completion (see `complete`); `""` when the server kept
        replying with nothing, which a reader or judge scores as a wrong answer."""
        return self.complete(messages, stage, accept_empty=True, **params).text

    def complete_many(
        self, batch: list[Messages], stage: str = "default", **params: Any
    ) -> Replies:
        """Completions for many conversations, up to `concurrency` at a time, given as each one
        ends (see `Replies`). `params` go to `complete`."""
        return Replies(self, batch, stage, params)


class Replies:
    """The completions of a batch, sent up to the client's `concurrency` at a time and iterated
    as each ends: (its index in the batch, its `ChatReply` or the `ChatFailure` it ended with),
    so a caller keeps every answer that arrived whatever happens to the others. `cancel()`
    keeps the requests not yet started from being sent; those in flight still arrive.
    """

    def __init__(
        self, client: ChatClient, batch: list[Messages], stage: str, params: dict[str, Any]
    ) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(client.config.concurrency, len(batch)))
        )
        self._futures: dict[Future[ChatReply], int] = {
            self._pool.submit(client.complete, messages, stage, **params): i
            for i, messages in enumerate(batch)
        }

    def cancel(self) -> None:
        for future in self._futures:
            future.cancel()

    def __iter__(self) -> Iterator[tuple[int, ChatReply | ChatFailure]]:
        try:
            for future in as_completed(self._futures):
                if future.cancelled():
                    continue
                error = future.exception()
                if isinstance(error, ChatFailure):
                    yield self._futures[future], error
                else:
                    yield self._futures[future], future.result()  # a bug in honed raises here
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
