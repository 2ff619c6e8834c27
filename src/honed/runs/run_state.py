"""What a run is doing, said by the run itself in `run_state.json` (the run lifecycle writes it,
`honed view` and `--resume` read it):

    {"format": 1, "state": "running", "pid": 4242, "host": "gpu-3", "started": 1767000000.0,
     "heartbeat": 1767000312.5, "step": 12, "error": null}

- `running`: written when the run starts, then again after every step and every
  `HEARTBEAT_S` seconds in between (a step, an evaluation, may take far longer than that), each
  time with a fresh `heartbeat` (Unix seconds) and the last step finished;
- `finished`: the summary is written;
- `interrupted`: Ctrl-C; `--resume` continues from the state saved;
- `failed`: an error ended the run; `error` is its line.

A process killed outright (kill -9, the machine lost) cannot say so: its file still says
`running`, but its heartbeat stops. A reader then takes it as `stale` (stopped without saying
why) once the heartbeat is `STALE_S` old, or at once on the run's own host when its process is
gone; a stale run may be resumed. The file is small and written atomically, so a reader sees
one whole record or the one before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from honed.errors import HonedError
from honed.runs.files import atomic_write_json, read_text

FILE = "run_state.json"
FORMAT = 1
# Seconds between two heartbeats while nothing else rewrites the file.
HEARTBEAT_S = 30.0
# A heartbeat older than this (four missed beats) is a run that stopped without saying.
STALE_S = 120.0
# States the file holds; `stale` is a reader's judgement, never written.
ENDED = ("finished", "interrupted", "failed")
# An error's line is kept short: the terminal and the log have the whole of it.
MAX_ERROR_CHARS = 500


def error_line(exc: BaseException) -> str:
    """One line saying what ended a run: honed's own message as it is, any other error with
    its type."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    line = first if isinstance(exc, HonedError) else f"{type(exc).__name__}: {first}".rstrip(": ")
    return line[:MAX_ERROR_CHARS]


def read(path: Path) -> dict[str, Any] | None:
    """The record in `path`, or None when there is none (a run from before this file, or one
    not started yet) or it is not a record."""
    try:
        record = json.loads(read_text(path))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("state"), str) else None


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (one of another user's counts)."""
    if pid <= 0:  # 0 and -1 name groups of processes to os.kill, not one
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def judge(record: dict[str, Any], now: float | None = None) -> str:
    """The state a reader shows: the record's own, or `stale` for a `running` one whose
    heartbeat stopped (too old, or its process gone from this machine, which it names)."""
    state = record["state"]
    if state != "running":
        return state
    now = time.time() if now is None else now
    heartbeat = record.get("heartbeat")
    if not isinstance(heartbeat, int | float) or now - heartbeat > STALE_S:
        return "stale"
    pid = record.get("pid")
    if record.get("host") == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
        return "stale"
    return "running"


def refuse_if_running(path: Path, run: Path) -> None:
    """Stop (exit code 2) before a second process trains the run whose state file is `path`:
    one whose state is `running` with a live heartbeat. A stale one may be resumed, and so may
    one this very process set up and left (through the Python API)."""
    record = read(path)
    if record is None or judge(record) != "running":
        return
    if (record.get("pid"), record.get("host")) == (os.getpid(), socket.gethostname()):
        return
    age = max(0.0, time.time() - float(record["heartbeat"]))
    raise HonedError(
        f"{run} is being trained by process {record.get('pid')} on {record.get('host')} (its "
        f"heartbeat {age:.0f} s ago, at step {record.get('step')}); resuming it now would train "
        "it twice: wait for that run to end, or stop it (Ctrl-C) and then --resume"
    )


class RunStateFile:
    """The writer of one session of a run: `running` at once, a heartbeat on demand (`beat`)
    and, inside `beating()`, from a background thread every `interval` seconds; then one end
    state (`end`), after which nothing more is written."""

    def __init__(self, path: Path, step: int, interval: float | None = None) -> None:
        self.path = path
        self.interval = HEARTBEAT_S if interval is None else interval
        now = time.time()
        self.record: dict[str, Any] = {
            "format": FORMAT,
            "state": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": now,
            "heartbeat": now,
            "step": step,
            "error": None,
        }
        # the thread and the trainer both write: one at a time, and never after the end
        self._lock = threading.Lock()
        self._write()

    def _write(self) -> None:
        atomic_write_json(self.path, self.record)

    @property
    def ended(self) -> bool:
        return self.record["state"] in ENDED

    def beat(self, step: int | None = None) -> None:
        """A fresh heartbeat (with the last step finished, when given)."""
        with self._lock:
            if self.ended:
                return
            self.record["heartbeat"] = time.time()
            if step is not None:
                self.record["step"] = step
            self._write()

    def end(self, state: str, error: str | None = None) -> None:
        """Write the end state (one of `ENDED`); the last word: later calls change nothing but
        a `failed` that follows `finished` (an error after the summary was written)."""
        assert state in ENDED, state
        with self._lock:
            if self.ended and not (state == "failed" and self.record["state"] == "finished"):
                return
            self.record.update(state=state, heartbeat=time.time(), error=error)
            self._write()

    @contextlib.contextmanager
    def beating(self) -> Iterator[None]:
        """Heartbeats every `interval` seconds from a daemon thread for the duration."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(self.interval):
                # a full disk or a moved folder: the next beat tries again
                with contextlib.suppress(OSError):
                    self.beat()

        thread = threading.Thread(target=run, name="honed-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
