"""Batching concurrent requests into honed's sampler, and swapping weights between batches.

One thread owns the model. Requests from the web server's event loop become `Job`s on a queue;
the thread takes the first job that arrives, keeps collecting while more follow within
`window_s` seconds of the last (at most `MAX_WINDOWS` windows, or until `max_batch` rows
wait), and runs what it collected as few calls of
`honed.models.generation.generate` as the requests' sampling settings allow: one per distinct
(temperature, top-p, extra stop tokens), in chunks of at most `max_batch` rows. A request's
rows each carry their own seed, and the sampler draws a row's randomness from its seed alone,
so what a request gets does not depend on which other requests shared its batch. The longest
`max_tokens` of a chunk bounds it; each row is cut at its own.

Weight reloads are jobs on the same queue: the requests collected before a reload arrived are
answered with the old weights, those after it with the new, and no request ever sees both.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from honed.models.dropout import eval_mode
from honed.models.generation import SamplingParams, generate
from honed.models.policy import Policy
from honed.types import Sample

_STOP = object()  # queued by `close`: the engine's thread ends when it reaches it
MAX_WINDOWS = 10  # the longest a batch waits for more requests, in collection windows


@dataclass(frozen=True)
class RowSettings:
    """How a request samples; requests with equal settings share a generation call."""

    temperature: float
    top_p: float
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Job:
    """One request's rows (its `n` completions of each prompt), answered through `future`
    with one `Sample` per row, and with each row's top log-probs when `top_logprobs` > 0."""

    prompts: list[list[int]]
    seeds: list[int]
    max_tokens: list[int]
    settings: RowSettings
    top_logprobs: int = 0
    future: Future = field(default_factory=Future)


@dataclass
class Generated:
    """A row's sample and, when asked, the `k` most likely tokens at each of its positions
    (`(token id, log-prob)` pairs, under the distribution the row was sampled from)."""

    sample: Sample
    top: list[list[tuple[int, float]]] | None = None


@dataclass
class _Call:
    """Work on the model itself (a weight reload), run between batches."""

    fn: Callable[[Policy], Any]
    future: Future = field(default_factory=Future)


@dataclass
class EngineStats:
    """What the engine has done: generation calls, rows in them and the largest call."""

    calls: int = 0
    rows: int = 0
    largest: int = 0


class Engine:
    """The model's one owner: batches requests into the sampler and applies weight reloads."""

    def __init__(self, policy: Policy, max_batch: int = 32, window_s: float = 0.01) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.policy = policy
        self.max_batch = max_batch
        self.window_s = window_s
        self.stats = EngineStats()
        self._queue: queue.Queue[Job | _Call | object] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="honed-serve-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the web server's side

    def submit(self, job: Job) -> Future:
        """Queue a request; its future gets one `Generated` per row, in row order."""
        self._queue.put(job)
        return job.future

    def call(self, fn: Callable[[Policy], Any]) -> Future:
        """Run `fn(policy)` on the engine's thread between batches; what it returns (a new
        `Policy`, to swap the weights) becomes the served policy."""
        work = _Call(fn)
        self._queue.put(work)
        return work.future

    def close(self) -> None:
        """Stop after the work already queued."""
        self._queue.put(_STOP)
        self._thread.join()

    # ------------------------------------------------------------------ the engine's thread

    def _loop(self) -> None:
        pending: Job | _Call | object | None = None
        while True:
            item = pending if pending is not None else self._queue.get()
            pending = None
            if item is _STOP:
                return
            if isinstance(item, _Call):
                self._apply(item)
                continue
            jobs, pending = self._collect(item)
            self._run(jobs)

    def _collect(self, first: Job) -> tuple[list[Job], _Call | object | None]:
        """The jobs that follow `first` with no gap longer than the window (a burst of
        requests is parsed one after another, so it arrives spread out), for at most
        `MAX_WINDOWS` windows and `max_batch` rows; a reload or the stop marker ends the
        collection and is returned, to come after it."""
        jobs, rows = [first], len(first.prompts)
        now = time.monotonic()
        last_call, deadline = now + MAX_WINDOWS * self.window_s, now + self.window_s
        while rows < self.max_batch:
            left = min(deadline, last_call) - time.monotonic()
            if left <= 0:
                break
            try:
                nxt = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if not isinstance(nxt, Job):
                return jobs, nxt
            jobs.append(nxt)
            rows += len(nxt.prompts)
            deadline = time.monotonic() + self.window_s
        return jobs, None

    def _apply(self, work: _Call) -> None:
        try:
            result = work.fn(self.policy)
        except BaseException as exc:  # the caller decides what a failed reload means
            work.future.set_exception(exc)
            return
        if isinstance(result, Policy):
            self.policy = result
        work.future.set_result(result)

    def _run(self, jobs: list[Job]) -> None:
        """Answer `jobs`: one generation call per settings group and chunk of rows. A job whose
        caller has gone (its future cancelled) is dropped."""
        jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        groups: dict[RowSettings, list[tuple[Job, int]]] = {}
        for job in jobs:
            groups.setdefault(job.settings, []).extend((job, i) for i in range(len(job.prompts)))
        answers: dict[int, list[Generated | None]] = {id(j): [None] * len(j.prompts) for j in jobs}
        failed: dict[int, BaseException] = {}
        for settings, rows in groups.items():
            for start in range(0, len(rows), self.max_batch):
                chunk = [r for r in rows[start : start + self.max_batch] if id(r[0]) not in failed]
                if not chunk:
                    continue
                try:
                    for (job, i), out in zip(chunk, self._generate(settings, chunk), strict=True):
                        answers[id(job)][i] = out
                except Exception as exc:  # the requests of this chunk fail; the server lives
                    for job, _ in chunk:
                        failed[id(job)] = exc
        for job in jobs:
            if id(job) in failed:
                job.future.set_exception(failed[id(job)])
            else:
                job.future.set_result(answers[id(job)])

    def _generate(self, settings: RowSettings, rows: list[tuple[Job, int]]) -> list[Generated]:
        policy = self.policy
        prompts = [job.prompts[i] for job, i in rows]
        limits = [job.max_tokens[i] for job, i in rows]
        params = SamplingParams(settings.temperature, settings.top_p, max(limits))
        stops = sorted(set(policy.stop_ids) | set(settings.stop_token_ids))
        with eval_mode(policy.model):
            samples = generate(
                policy.model,
                prompts,
                [job.seeds[i] for job, i in rows],
                params,
                stops,
                policy.pad_id,
                policy.decode,
            )
        self.stats.calls += 1
        self.stats.rows += len(rows)
        self.stats.largest = max(self.stats.largest, len(rows))
        out = [Generated(_cut(s, n, policy.decode)) for s, n in zip(samples, limits, strict=True)]
        tops = [job.top_logprobs for job, _ in rows]
        if any(tops):
            k = max(tops)
            found = top_logprobs(policy, [g.sample for g in out], settings.temperature, k)
            for g, top, want in zip(out, found, tops, strict=True):
                g.top = [pairs[:want] for pairs in top] if want else None
        return out


def _cut(sample: Sample, limit: int, decode: Callable[[Sequence[int]], str]) -> Sample:
    """`sample` cut to `limit` tokens (its chunk may have let it run longer)."""
    if len(sample.completion_ids) <= limit:
        return sample
    ids = sample.completion_ids[:limit]
    return Sample(sample.prompt_ids, ids, sample.logprobs[:limit], decode(ids), truncated=True)


@torch.inference_mode()
def top_logprobs(
    policy: Policy, samples: Sequence[Sample], temperature: float, k: int
) -> list[list[list[tuple[int, float]]]]:
    """For each sample, the `k` most likely tokens at each completion position with their
    log-probs, under the distribution it was sampled from (`temperature` 0: greedy, read at
    temperature 1, as the sampler reports it)."""
    scale = temperature if temperature > 0 else 1.0
    out = []
    with eval_mode(policy.model):
        for s in samples:
            if not s.completion_ids:
                out.append([])
                continue
            ids = torch.tensor([s.prompt_ids + s.completion_ids], device=policy.device)
            logits = policy.model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].float()
            values, tokens = torch.log_softmax(logits / scale, dim=-1).topk(k, dim=-1)
            out.append(
                [
                    list(zip(t.tolist(), v.tolist(), strict=True))
                    for t, v in zip(tokens, values, strict=True)
                ]
            )
    return out
