"""One background event loop for the user's `async def` tools and reward functions.

Rollouts and scoring are synchronous code (the trainer, a Ray actor's method, a thread of the
server backend), so coroutines cannot simply be awaited there, and `asyncio.run` per call would
give each batch a new loop: a client the user's module created once (an `httpx.AsyncClient`,
a database pool) is bound to the loop it first ran on and fails on the next. So every coroutine
of a process runs on one long-lived loop in a daemon thread, and callers block on the results,
each with its own time limit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's background loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="honed-async", daemon=True).start()
            _loop = loop
        return _loop


@dataclass
class Outcome:
    """How one coroutine ended: its value, or the exception it raised, or a timeout."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


async def _timed(awaitable: Awaitable[Any], timeout: float | None) -> Outcome:
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        value = await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        return Outcome(timed_out=True, seconds=loop.time() - start)
    except Exception as exc:  # the user's coroutine failing is an outcome, not a crash
        return Outcome(error=exc, seconds=loop.time() - start)
    return Outcome(value=value, seconds=loop.time() - start)


def start_all(awaitables: Sequence[Awaitable[Any]], timeout: float | None) -> Future[list[Outcome]]:
    """Start coroutines concurrently on the background loop, each limited to `timeout` seconds
    (`None`: no limit); the future of their outcomes, in order. The caller may do other work
    (synchronous tools or rewards) before it waits."""

    async def gather() -> list[Outcome]:
        return list(await asyncio.gather(*(_timed(a, timeout) for a in awaitables)))

    return asyncio.run_coroutine_threadsafe(gather(), background_loop())


def run_all(awaitables: Sequence[Awaitable[Any]], timeout: float | None) -> list[Outcome]:
    """`start_all` and wait for the outcomes."""
    return start_all(awaitables, timeout).result() if awaitables else []


def call_in_thread(
    fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float | None
) -> Outcome:
    """Call a synchronous function with a time limit.

    Python cannot stop a running function, so it runs in a daemon thread of its own: past the
    limit the caller gets a timeout and goes on, and the thread finishes (or not) unobserved.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        start = time.perf_counter()
        try:
            box["value"] = fn(**kwargs)
        except Exception as exc:  # the user's function failing is an outcome, not a crash
            box["error"] = exc
        box["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=target, name="honed-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return Outcome(timed_out=True, seconds=float(timeout or 0.0))
    return Outcome(box.get("value"), box.get("error"), False, box["seconds"])
