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
  that failed, tokens from each response's `usage` field (estimated, and counted `estimated`,
  when a server sends none), and the cost in USD when the config has a `price`;
- with a `honed.models.journal.Journal` on its meter, every attempt and every usable reply on
  disk before it is used, and a reply the journal already holds for the same request taken from
  it instead of paid again (a resumed run);
- with `honed.models.budget.Caps`, every attempt checked against what is left of a budget
  before it is sent (`BudgetStop` when it does not fit);
- every string a server sends, and every message made from one, passed through
  `honed.text.redact` before anyone logs, writes or reads it: a server that echoes the key does
  not put it into a run directory;
- `abort()` (and `close()`): the requests in flight are cut and those waiting for a slot, a
  pause or a retry are never sent, so a second Ctrl-C ends the process at once.

`ChatReply` keeps the whole message as received, so fields honed does not read yet (tool calls)
reach a caller that wants them. Tool calls are an answer only where the request offered tools:
elsewhere a reply of tool calls alone is empty (retried, then failed), unless the caller says
how to read their arguments as the reply's text (`tool_arguments`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from honed.errors import HonedError, did_you_mean
from honed.models.budget import BudgetStop, Caps, Worst
from honed.models.journal import Journal, request_key
from honed.reach import Endpoint
from honed.text import cut_middle, map_strings, redact, register_secret, valid_text

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

    base_url: Endpoint = Field(
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
        problem = self.base_url.key_refusal(self.api_key_env, self.allow_insecure_http)
        if problem:
            raise ValueError(problem)
        return self


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
    than 429), `empty` (every attempt came back without text), `truncated` (cut at `max_tokens`
    on every attempt the caller allowed) or `invalid` (tool calls whose arguments hold nothing
    the caller can read). The message is redacted: it may quote the server."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(redact(message))
        self.kind = kind


class Aborted(Exception):
    """A request cut (or never sent) because its client was aborted: a second Ctrl-C, or the
    client closed while requests were still waiting."""


USAGE_FIELDS = (
    "requests",
    "retries",
    "truncated",
    "empty",
    "invalid",
    "failed",
    "tool_calls",
    "estimated",
    "lost",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
)


class UsageMeter:
    """Counts per stage label, safe to update from many threads.

    `requests` are completions received (each one billed, empty and truncated ones included),
    `retries` attempts repeated, `truncated` replies cut at `max_tokens`, `empty` replies with no
    text, `invalid` 200s that were no chat completion (or tool calls with nothing readable in
    them), `failed` calls given up on, `tool_calls` replies that sent tool calls where text was
    expected, `estimated` replies whose server sent no `usage` (their tokens are honed's
    estimate), `lost` attempts sent whose reply a crash lost (the server may have billed them);
    then tokens, and `usd` where the client knows its price. One meter may be shared by several
    clients (target and reflector) so that a run's summary has one table.

    With a journal attached (`attach`), every count is written to it before it is added, and
    the meter starts from what the journal holds: usage is counted from the journal, so a
    killed run's spending is known to the run that resumes it. Without one, it checkpoints with
    `state_dict()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, dict[str, float]] = {}
        self.journal: Journal | None = None

    def attach(self, journal: Journal, before: dict[str, dict[str, float]] | None = None) -> None:
        """Count from `journal` from now on: the meter holds what it has counted, plus
        `before` (counts of a run saved before it had a journal)."""
        self.journal = journal
        with self._lock:
            self._stages = {}
        for source in (before or {}, journal.usage()):
            for stage, row in source.items():
                self._add(stage, row)

    def sent(self, stage: str) -> int | None:
        """Journal an attempt about to be sent; its id (None without a journal)."""
        return None if self.journal is None else self.journal.sent(stage)

    def add(self, stage: str, attempt: int | None = None, **counts: float) -> None:
        """Count `counts` for `stage`: an `attempt`'s outcome (its `sent` id), or anything else."""
        if self.journal is not None and (counts or attempt is not None):
            self.journal.done(attempt, stage, counts)
        if counts:
            self._add(stage, counts)

    def _add(self, stage: str, counts: dict[str, float]) -> None:
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
    """The error text an OpenAI-compatible server put in its reply, shortened and redacted (a
    401 may quote the request's `Authorization` header)."""
    try:
        data = response.json()
    except ValueError:
        return redact(valid_text(response.text.strip())[:300] or response.reason_phrase)
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error:
            return redact(valid_text(str(error))[:300])
    return redact(valid_text(str(data))[:300])


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


def estimate_text_tokens(text: str) -> int:
    """Tokens of `text` by `BYTES_PER_TOKEN`: a completion's size when its server counts none."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def _metered(usage: Any) -> bool:
    """Whether a response's `usage` holds the server's token counts."""
    return isinstance(usage, dict) and any(
        isinstance(usage.get(k), int | float)
        for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    )


def tool_call_arguments(message: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """The names of a message's tool calls, and the decoded JSON of each one's arguments
    (None where they are not JSON)."""
    calls = message.get("tool_calls")
    names, values = [], []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else {}
        names.append(str(function.get("name", "?")))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        values.append(arguments)
    return names, values


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

    def wait(self, origin: str, abort: threading.Event) -> None:
        """Until the server's pause is over, or the caller is aborted."""
        while not abort.is_set():
            with self._lock:
                left = self._until.get(origin, 0.0) - time.monotonic()
            if left <= 0:
                return
            abort.wait(left)


_PAUSES = _Pauses()


_unmetered_lock = threading.Lock()
_unmetered: set[str] = set()


def _first_unmetered(origin: str) -> bool:
    """Whether `origin` is first found sending no usage now (the log says so once a server)."""
    with _unmetered_lock:
        first = origin not in _unmetered
        _unmetered.add(origin)
        return first


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

    `caps` checks each attempt against a budget before it is sent; `max_reply_chars` cuts every
    string of a reply to that many characters (head and tail, `honed.text.cut_middle`) as it
    arrives, so one runaway reply cannot fill a run directory, and what is journaled, cached,
    scored and shown is the same text.
    """

    def __init__(
        self,
        config: ChatModelConfig,
        usage: UsageMeter | None = None,
        caps: Caps | None = None,
        max_reply_chars: int | None = None,
    ) -> None:
        if not isinstance(config.base_url, Endpoint):
            raise TypeError("ChatClient takes a base_url parsed as an Endpoint (honed.reach)")
        problem = config.base_url.key_refusal(config.api_key_env, config.allow_insecure_http)
        if problem:
            raise HonedError(problem)
        self.config = config
        self.meter = usage or UsageMeter()
        self.caps = caps
        self.max_reply_chars = max_reply_chars
        headers = {"Accept": "application/json"}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "").strip()
            if not key:
                raise HonedError(
                    f"api_key_env is '{config.api_key_env}' but that environment variable is "
                    f"not set (needed for {config.base_url}); export it, or remove api_key_env "
                    "for a local server that needs no key"
                )
            register_secret(key)
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(
            max_connections=config.concurrency, max_keepalive_connections=config.concurrency
        )
        self._http = httpx.AsyncClient(headers=headers, timeout=config.timeout_s, limits=limits)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._rng = random.Random()
        self._origin = config.base_url.origin
        # The largest ratio of the server's prompt-token counts to `estimate_tokens` seen so far.
        self._calibration = 1.0
        self._closed = False
        self._aborted = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: set[concurrent.futures.Future[Any]] = set()

    def abort(self) -> None:
        """Cut every request in flight and send no other: what is waiting for a slot, a pause
        or a retry ends with `Aborted` instead. For a process that must stop now (a second
        Ctrl-C): nothing the client does afterwards reaches the server."""
        self._aborted.set()
        with self._lock:
            futures = list(self._in_flight)
        for future in futures:
            future.cancel()

    def close(self) -> None:
        """Abort what is still in flight (nobody will read it) and close the connections."""
        if not self._closed:
            self._closed = True
            self.abort()
            _run(self._http.aclose())

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def usage(self) -> dict[str, dict[str, float]]:
        """`{stage: {requests, retries, truncated, empty, invalid, failed, tool_calls,
        estimated, lost, prompt_tokens, completion_tokens, total_tokens[, usd]}}`."""
        return self.meter.usage()

    def estimate_tokens(self, messages: Messages) -> int:
        """The prompt tokens `messages` will cost at this server: `estimate_tokens`, scaled up by
        the largest ratio the server's own counts have shown so far."""
        return math.ceil(estimate_tokens(messages) * self._calibration)

    def _key_hint(self) -> str:
        if self.config.api_key_env:
            return f"check the key in the environment variable {self.config.api_key_env}"
        return "set api_key_env to the name of the environment variable that holds the key"

    def _check_aborted(self) -> None:
        if self._aborted.is_set():
            raise Aborted(f"request to {self.config.base_url} not sent: the client was aborted")

    def _wait_for_budget(self) -> None:
        """A short wait for the budget's room held by requests in flight; `Aborted` once the
        client is aborted."""
        self._aborted.wait(0.05)
        self._check_aborted()

    @contextmanager
    def _slot(self) -> Iterator[None]:
        """One of the `concurrency` slots, waited for in short turns so an abort is noticed."""
        while not self._slots.acquire(timeout=0.05):
            self._check_aborted()
        try:
            yield
        finally:
            self._slots.release()

    def _send(self, method: str, url: Endpoint, body: Any, seconds: float) -> httpx.Response:
        """One HTTP request, the whole of it (connect to last byte) within `seconds`; an
        `abort()` cuts it (`Aborted`). Only to a parsed `Endpoint`, and with the key only where
        the endpoint's rule lets it go (`Endpoint.key_refusal`)."""
        if not isinstance(url, Endpoint):
            raise TypeError(f"requests go to an Endpoint (honed.reach), not {type(url).__name__}")
        problem = url.key_refusal(self.config.api_key_env, self.config.allow_insecure_http)
        if problem:
            raise HonedError(problem)
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(self._http.request(method, str(url), json=body), seconds),
            _event_loop(),
        )
        with self._lock:
            self._in_flight.add(future)
        try:
            if self._aborted.is_set():
                future.cancel()
            return future.result()
        except asyncio.TimeoutError:
            raise httpx.TimeoutException(f"no complete reply within {seconds:g}s") from None
        except concurrent.futures.CancelledError:
            raise Aborted(f"request to {url} cut: the client was aborted") from None
        except BaseException:
            future.cancel()  # Ctrl-C in the caller: the request must not outlive it
            raise
        finally:
            with self._lock:
                self._in_flight.discard(future)

    def check(self) -> None:
        """Fail fast, before any work, if the server is unreachable, refuses the credentials,
        has no OpenAI-compatible API at `base_url`, or does not list the configured model.

        Servers whose `/models` reply lists no models skip the model check.
        """
        base, model = self.config.base_url, self.config.model
        try:
            response = self._send(
                "GET", base.child("models"), None, min(self.config.timeout_s, CHECK_TIMEOUT_S)
            )
        except httpx.TransportError as exc:
            raise HonedError(
                redact(
                    f"cannot reach the chat server at {base} ({type(exc).__name__}: {exc}); "
                    "start the server or fix base_url"
                )
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
        if status >= 300:
            # not followed: a redirect is another URL than the config names (and a key would go
            # with it); the config is fixed to name where the API is
            where = redact(response.headers.get("location", "somewhere else")[:200])
            raise HonedError(
                f"the chat server at {base} answered GET /models with a redirect (HTTP "
                f"{status}) to {where!r}; set base_url to where the API is"
            )
        try:
            listed = [m["id"] for m in response.json()["data"] if isinstance(m, dict)]
        except (ValueError, KeyError, TypeError):
            listed = []
        if listed and model not in listed:
            shown = redact(", ".join(listed[:10]) + (", ..." if len(listed) > 10 else ""))
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
        tool_arguments: Callable[[list[Any]], str | None] | None = None,
        **params: Any,
    ) -> ChatReply:
        """One chat completion; `params` override the config's request fields (a `None` value
        leaves the field out).

        Transport problems, 5xx, 429, invalid bodies and empty replies are retried within
        `max_retries`; a reply cut at `max_tokens` is returned as it is (`reply.truncated`),
        unless `truncated_retries` asks for that many more tries first. Raises `ChatFailure`
        when no usable reply came; with `accept_empty`, a reply still empty after every attempt
        is returned instead. Tool calls answer a request that offers `tools`; elsewhere a reply
        of tool calls alone is empty, unless `tool_arguments` reads the calls' decoded
        arguments as the reply's text (None: they hold nothing it can use, and the call fails
        as `invalid`). A reply the journal holds for this very request is taken from it; one
        received is journaled before it is returned.
        """
        url = self.config.base_url.child("chat/completions")
        body = self._body(messages, params)
        journal = self.meter.journal
        options = {
            "accept_empty": accept_empty,
            "truncated_retries": truncated_retries,
            "tool_arguments": tool_arguments is not None,
        }
        key = "" if journal is None else request_key(url, body, options)
        if journal is not None:
            kept = journal.take(key)
            if kept is not None:
                return self._calibrated(messages, _reply_from(kept))
        read = self._reader(url, stage, accept_empty, messages, "tools" in body, tool_arguments)
        for cut in range(truncated_retries + 1):
            reply = self._calibrated(messages, self._attempts(url, body, stage, read))
            if not (reply.truncated and truncated_retries):
                if journal is not None:
                    journal.reply(key, stage, asdict(reply))
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

    def _calibrated(self, messages: Messages, reply: ChatReply) -> ChatReply:
        """`reply`, after raising the estimate's calibration to the ratio its server count
        shows (never lowering it: the estimate stays on the pessimistic side)."""
        if reply.prompt_tokens:
            ratio = reply.prompt_tokens / max(estimate_tokens(messages), 1)
            self._calibration = max(self._calibration, ratio)
        return reply

    def _cleaned(self, message: dict[str, Any]) -> dict[str, Any]:
        """A reply's message with every string valid UTF-8, redacted, and cut to
        `max_reply_chars`."""
        cap = self.max_reply_chars

        def clean(text: str) -> str:
            text = redact(valid_text(text))
            return text if cap is None else cut_middle(text, cap)

        return map_strings(message, clean)

    def _reader(
        self,
        url: Endpoint,
        stage: str,
        accept_empty: bool,
        messages: Messages,
        offered_tools: bool,
        tool_arguments: Callable[[list[Any]], str | None] | None,
    ) -> Callable[[httpx.Response, bool, dict[str, float]], ChatReply]:
        """How a 200 becomes a `ChatReply`, its counts added to the attempt's; what cannot be
        used raises `_Unusable` (on the last attempt, an empty reply is returned when
        `accept_empty`), tool calls with nothing `tool_arguments` can read a `ChatFailure`.

        Long because a reply's parts (choices, content, reasoning, tool calls, finish
        reason, usage) are read in one pass, each with the one check that makes it usable."""

        def read(response: httpx.Response, last: bool, counts: dict[str, float]) -> ChatReply:
            try:
                data = response.json()
                message = data["choices"][0]["message"]
                if not isinstance(message, dict):
                    raise TypeError
                finish = data["choices"][0].get("finish_reason")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                counts["invalid"] = 1
                shown = redact(valid_text(response.text[:200]))
                raise _Unusable(f"sent a reply that is not a chat completion: {shown!r}") from None
            message = self._cleaned(message)
            answer, reasoning = split_reasoning(message)
            names, arguments = tool_call_arguments(message)
            if names and not answer.strip() and tool_arguments is not None:
                counts["tool_calls"] = 1
                read_as = tool_arguments(arguments)
                if read_as is None:
                    counts.update(requests=1, invalid=1)
                    self._count_tokens(data.get("usage"), messages, message, counts)
                    raise ChatFailure(
                        f"the reply from {url} (model '{self.config.model}') held tool calls "
                        f"({', '.join(names)}) instead of text, and their arguments hold "
                        "nothing usable",
                        "invalid",
                    )
                answer = read_as
            prompt, completion = self._count_tokens(data.get("usage"), messages, message, counts)
            reply = ChatReply(
                answer,
                finish if isinstance(finish, str) else None,
                prompt,
                completion,
                reasoning,
                message,
            )
            # tool calls answer only a request that offered tools
            empty = not answer.strip() and not (names and offered_tools)
            if names and not answer.strip() and not offered_tools:
                counts["tool_calls"] = 1
            counts.update(requests=1, truncated=int(reply.truncated), empty=int(empty))
            if empty and not (accept_empty and last):
                what = (
                    f"sent tool calls ({', '.join(names)}) but no text, and the request "
                    "offered no tools"
                    if names
                    else "replied with no text"
                )
                raise _Unusable(
                    f"{what} (finish_reason {reply.finish_reason}, {completion} completion tokens)",
                    "empty",
                )
            return reply

        return read

    def _count_tokens(
        self, usage: Any, messages: Messages, message: dict[str, Any], counts: dict[str, float]
    ) -> tuple[int, int]:
        """A reply's (prompt, completion) tokens, added to `counts` with their price: the
        server's `usage`, or honed's estimate (counted `estimated`, said once) when it sends
        none; a budget that requires the server's counts refuses the estimate (`BudgetStop`)."""
        if _metered(usage):
            prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
            total = _count(usage, "total_tokens") or prompt + completion
        else:
            answer, reasoning = split_reasoning(message)
            calls = json.dumps(message.get("tool_calls") or "")
            prompt = estimate_tokens(messages)
            completion = estimate_text_tokens(answer + reasoning + calls)
            total = prompt + completion
            counts["estimated"] = 1
            if _first_unmetered(self._origin):
                log.warning(
                    "the server at %s sends no usage with its replies: its tokens are counted "
                    "by honed's estimate (%g bytes per token)",
                    self._origin,
                    BYTES_PER_TOKEN,
                )
        counts.update(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)
        if self.config.price is not None:
            counts["usd"] = self.config.price.usd(prompt, completion)
        if not _metered(usage) and self.caps is not None:
            self.caps.unmetered(self._origin)
        return prompt, completion

    def post(self, url: Endpoint, body: dict[str, Any], stage: str = "default") -> httpx.Response:
        """POST `body` as JSON to `url` (any route of the server) with the client's retries,
        concurrency limit, deadline and credentials; the successful response, or a
        `ChatFailure`."""
        return self._attempts(url, body, stage, lambda response, last, counts: response)

    def _worst(self, body: dict[str, Any]) -> Worst:
        """What one attempt of `body` can cost at most: one request, its prompt as estimated
        (tool schemas included) and its `max_tokens`, priced."""
        messages = body.get("messages")
        prompt = self.estimate_tokens(messages) if isinstance(messages, list) else 0
        if body.get("tools"):
            prompt += estimate_text_tokens(json.dumps(body["tools"]))
        completion = body.get("max_tokens")
        completion = completion if isinstance(completion, int) else 0
        price = self.config.price
        usd = 0.0 if price is None else price.usd(prompt, completion)
        return Worst(1, prompt + completion, usd)

    def _attempts(
        self,
        url: Endpoint,
        body: dict[str, Any],
        stage: str,
        read: Callable[[httpx.Response, bool, dict[str, float]], T],
    ) -> T:
        """POST until `read` accepts a 2xx/3xx reply or the attempts are spent.

        Long because the retry policy is one piece: what is retried (429, 5xx, timeouts,
        connection errors, what `read` finds unusable), what is not (other 4xx), the shared
        pause after a 429, the budget's check before each attempt, and the counting (one
        journal line when an attempt is sent, one with what it counted when it ends) and
        logging of each retry and of giving up. An attempt cut by an abort or a Ctrl-C gets no
        second line: it counts as lost.
        """
        attempts = self.config.max_retries + 1
        kind = "gave_up"
        for attempt in range(attempts):
            retry_after, status, last = None, 0, attempt + 1 == attempts
            counts: dict[str, float] = {}
            worst = None
            if self.caps is not None:
                worst = self.caps.reserve(stage, self._worst(body), self._wait_for_budget)
            sent: int | None = None
            try:
                try:
                    with self._slot():
                        _PAUSES.wait(self._origin, self._aborted)
                        self._check_aborted()
                        sent = self.meter.sent(stage)
                        response = self._send("POST", url, body, self.config.timeout_s)
                    status = response.status_code
                    if status < 400:
                        result = read(response, last, counts)
                        self.meter.add(stage, sent, **counts)
                        return result
                    problem = f"HTTP {status}: {_server_message(response)}"
                    if status != 429 and status < 500:
                        hint = f"; {self._key_hint()}" if status in (401, 403) else ""
                        counts["failed"] = 1
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
                    problem = redact(f"connection failed ({type(exc).__name__}: {exc})")
                    kind = "gave_up"
                except _Unusable as exc:
                    problem, kind = str(exc), exc.kind
                except (ChatFailure, BudgetStop):  # refused, or read() gave up on the reply
                    self.meter.add(stage, sent, **counts)
                    raise
                counts["failed" if last else "retries"] = 1
                self.meter.add(stage, sent, **counts)
            finally:
                if worst is not None and self.caps is not None:
                    self.caps.release(worst)
            if last:
                break
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
            self._aborted.wait(delay)
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


def _reply_from(payload: dict[str, Any]) -> ChatReply:
    """A `ChatReply` from its journaled form (a run directory's file: every field checked)."""

    def number(name: str) -> int:
        value = payload.get(name)
        return int(value) if isinstance(value, int | float) and math.isfinite(value) else 0

    def text(name: str) -> str:
        value = payload.get(name)
        return redact(valid_text(value)) if isinstance(value, str) else ""

    finish = payload.get("finish_reason")
    message = payload.get("message")
    return ChatReply(
        text("text"),
        finish if isinstance(finish, str) else None,
        number("prompt_tokens"),
        number("completion_tokens"),
        text("reasoning"),
        map_strings(message, lambda s: redact(valid_text(s))) if isinstance(message, dict) else {},
    )


class Replies:
    """The completions of a batch, sent up to the client's `concurrency` at a time and iterated
    as each ends: (its index in the batch, its `ChatReply` or the `ChatFailure` it ended with),
    so a caller keeps every answer that arrived whatever happens to the others. `cancel()`
    keeps the requests not yet started from being sent; those in flight still arrive.

    A request the budget has no room for stops the batch: nothing more is sent, the replies in
    flight are still given, then the `BudgetStop` is raised. A Ctrl-C while the batch runs
    aborts the client, so that nothing in flight or waiting holds the process.
    """

    def __init__(
        self, client: ChatClient, batch: list[Messages], stage: str, params: dict[str, Any]
    ) -> None:
        self._client = client
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
        stopped: BudgetStop | None = None
        finished = False
        try:
            for future in as_completed(self._futures):
                if future.cancelled():
                    continue
                error = future.exception()
                if isinstance(error, ChatFailure):
                    yield self._futures[future], error
                elif isinstance(error, BudgetStop):
                    stopped = stopped or error
                    self.cancel()
                elif not isinstance(error, Aborted):
                    yield self._futures[future], future.result()  # a bug in honed raises here
            finished = True
        except KeyboardInterrupt:
            self._client.abort()
            raise
        finally:
            # cut short (an error, a Ctrl-C, a caller that stopped reading): wait for nothing
            self._pool.shutdown(wait=finished, cancel_futures=True)
        if stopped is not None:
            raise stopped
