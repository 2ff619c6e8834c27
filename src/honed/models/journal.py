"""The reply journal: every request sent and every reply received, on disk before it is used.

A run that pays a server per request must not pay twice for the same answer, and must know what
it has spent even when it is killed (`kill -9`, a power cut of the machine's process, a second
Ctrl-C). The chat client writes one JSON line per event to an append-only file, flushed at once
(no `fsync`: a killed process loses nothing the kernel already has):

    {"sent": 7, "stage": "reflect"}                               an attempt about to go out
    {"done": 7, "stage": "reflect", "counts": {...}}              its outcome, counted
    {"stage": "reflect", "counts": {...}}                         a count outside attempts
    {"reply": "<request key>", "stage": "reflect", "payload": {...}}   a call's usable reply

Usage is the sum of the `counts` (`UsageMeter`'s counters); an attempt `sent` without its `done`
line was in flight when the process died: the server may have billed it, honed never saw its
reply, and it is counted as `lost`. A call's reply is journaled before the caller sees it, under
a key made of the whole request, so a resumed run that asks the same thing again takes the reply
from the journal instead of the server (`take`): only replies journaled since the run's last
saved state are offered (`replay_from`), each once, so a resumed step replays exactly what the
crashed one had received, and a later step asking an identical question still asks the server.

A line cut short by a crash is dropped when the journal is opened (and the file cut back to the
last whole line, so that the next line starts clean).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

# an `opener` for `open()`: (path, flags) -> file descriptor
Opener = Callable[[str, int], int]


def request_key(url: str, body: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """A hash of everything that decides a call's reply: where it goes, what it sends, and how
    the client judges the answer (`options`: what counts as empty, how often a cut reply is
    asked again)."""
    text = json.dumps({"url": url, "body": body, "options": options}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Journal:
    """An append-only JSONL journal of requests and replies (see the module's docstring)."""

    def __init__(self, path: str | Path, opener: Opener | None = None) -> None:
        """`opener` opens the journal's file (a run's refuses a link in its place:
        `honed.runs.files.no_follow`)."""
        self.path = Path(path)
        self.opener = opener
        self._lock = threading.Lock()
        self._next_attempt = 0
        self._usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._open_attempts: dict[int, str] = {}
        self._replies: list[tuple[int, str, dict[str, Any]]] = []  # (offset, key, payload)
        self._pool: dict[str, deque[dict[str, Any]]] = {}
        self._size = 0
        self._file: BinaryIO | None = None  # opened at the first line written
        self._load()

    def _load(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path, "rb", opener=self.opener) as fh:
            data = fh.read()
        whole = data.rfind(b"\n") + 1
        if whole < len(data):  # a line cut short by a crash: no one can use it
            with open(self.path, "r+b", opener=self.opener) as fh:
                fh.truncate(whole)
        self._size = whole
        offset = 0
        for raw in data[:whole].splitlines(keepends=True):
            start, offset = offset, offset + len(raw)
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                self._read(line, start)

    def _read(self, line: dict[str, Any], offset: int) -> None:
        stage = str(line.get("stage", "default"))
        if "sent" in line:
            self._open_attempts[int(line["sent"])] = stage
            self._next_attempt = max(self._next_attempt, int(line["sent"]) + 1)
        if "done" in line:
            self._open_attempts.pop(int(line["done"]), None)
        counts = line.get("counts")
        if isinstance(counts, dict):
            row = self._usage[stage]
            for key, value in counts.items():
                if isinstance(value, int | float):
                    row[key] += value
        if "reply" in line and isinstance(line.get("payload"), dict):
            self._replies.append((offset, str(line["reply"]), line["payload"]))

    def usage(self) -> dict[str, dict[str, float]]:
        """What the journal has counted, per stage, with `lost`: the attempts that were sent and
        never came back (in flight when the process that sent them died)."""
        out = {stage: dict(row) for stage, row in self._usage.items()}
        for stage in self._open_attempts.values():
            row = out.setdefault(stage, {})
            row["lost"] = row.get("lost", 0) + 1
        return out

    @property
    def size(self) -> int:
        """The journal's length in bytes: where a saved state's replay starts."""
        with self._lock:
            return self._size

    def replay_from(self, offset: int) -> None:
        """Offer the replies journaled at or after byte `offset` (the run's last saved state)
        to `take`, each once, oldest first."""
        pool: dict[str, deque[dict[str, Any]]] = {}
        for start, key, payload in self._replies:
            if start >= offset:
                pool.setdefault(key, deque()).append(payload)
        with self._lock:
            self._pool = pool

    def take(self, key: str) -> dict[str, Any] | None:
        """The oldest reply not yet taken for a request with this key, or None."""
        with self._lock:
            queue = self._pool.get(key)
            if not queue:
                return None
            return queue.popleft()

    def _write(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "ab", opener=self.opener)  # noqa: SIM115
            self._file.write(data)
            self._file.flush()
            self._size += len(data)

    def sent(self, stage: str) -> int:
        """Record an attempt about to be sent; its id, for `done`."""
        with self._lock:
            attempt = self._next_attempt
            self._next_attempt += 1
        self._write({"sent": attempt, "stage": stage})
        return attempt

    def done(self, attempt: int | None, stage: str, counts: Mapping[str, float]) -> None:
        """Record what an attempt (or, with `attempt` None, anything else) counted."""
        line: dict[str, Any] = {"stage": stage, "counts": dict(counts)}
        if attempt is not None:
            line = {"done": attempt, **line}
        self._write(line)

    def reply(self, key: str, stage: str, payload: Mapping[str, Any]) -> None:
        """Record a call's usable reply, before its caller uses it."""
        self._write({"reply": key, "stage": stage, "payload": dict(payload)})

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
