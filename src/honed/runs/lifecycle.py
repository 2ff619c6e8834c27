"""A run's lifecycle, the same for both training loops: open, resume, steps, interruption, close.

GRPO (`honed.rl.trainer`) and the skill loop (`honed.skills.trainer`) differ in what a step
does and what their state holds; everything around the steps is here, so that a behaviour
fixed once is fixed for both:

- **open**: create the run directory (refusing one whose entries link outside it), refuse to
  resume a run another process is training (`run_state.json` says `running` with a live
  heartbeat, exit code 2), read the state to resume from if asked, and say so when there is
  none;
- **resume**: compare the run's config with the one in force (`resume_changes`), refuse a
  change that cannot apply (`refuse`, exit code 2) before anything is written, print each
  change in one line, refuse a state written in a format this honed does not know
  (`check_format`), and drop log lines from steps after the state's (all of them when a run
  starts afresh in a directory that held an unfinished one);
- **steps**: a progress bar, each step's metrics to every sink (`metrics.jsonl` always), a
  checkpoint when the loop says one is due; Ctrl-C or SIGTERM saves the state of the last
  finished step and raises `RunInterrupted`, which the command line turns into exit code 130
  (143 for SIGTERM);
- **stops**: a loop may end the run early. Before and after each step the lifecycle asks it
  for a reason (`stop_reason`: a budget spent, patience run out); a step that cannot finish
  (a misbehaving server) raises `StopRun` and is abandoned. Either way the state of the last
  finished step is what is saved, the reason is returned for the summary, and `--resume`
  continues from there;
- **close**: close the sinks and write `summary.json` atomically;
- **what the run is doing**, in `run_state.json` (`honed.runs.run_state`): `running` from
  `start`, with a heartbeat after every step and, inside `running()`, every half minute;
  `finished` at `close`; `interrupted` or `failed` (with the error's line) when `running()`
  ends by a Ctrl-C or an error. Learner processes other than rank 0 write none of it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, Protocol, TypeVar

from honed.config import config_changes, format_change
from honed.errors import HonedError
from honed.runs import run_state
from honed.runs.progress import Reporter
from honed.runs.rundir import RunDir
from honed.runs.sinks import Sinks

# Where the run is written is not a training setting (and `--run-dir` overrides it).
IGNORED_ON_RESUME = ("run_dir",)

State = TypeVar("State")


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM during a run's steps. `step` is the last step finished; `path` the
    latest saved state (`--resume` continues from it; None when nothing was saved yet);
    `finished` is False when a second signal cut a step short, so the latest saved state may
    be older than `step`; `signum` the signal that stopped the run (the exit code is 128 plus
    it, as a shell reports a process the signal ended: 130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(
        self, step: int, path: Path | None, finished: bool = True, signum: int = signal.SIGINT
    ) -> None:
        super().__init__(f"interrupted after step {step}")
        self.step, self.path, self.finished = step, path, finished
        self.signum = int(signum)


class Stop(NamedTuple):
    """Why a loop ended its run before its last step. `kind` is a short label for the summary
    (`budget`, `patience`, `server`, ...), `reason` one line for a person; `error` marks a stop
    the user must act on (the command then exits with code 2 once the summary is written)."""

    kind: str
    reason: str
    error: bool = False

    def to_dict(self, step: int) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "after_step": step}


class StopRun(Exception):
    """Raised by a loop's `train_step` when the step cannot finish: the step is abandoned and
    nothing it changed is saved, so the saved state stays that of the last finished step."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.reason)
        self.stop = stop


class RunStopped(HonedError):
    """A run that stopped on an error `Stop`, its state saved; the message says how to go on."""

    def __init__(self, stop: Stop, step: int, path: Path | None) -> None:
        saved = f"the state after step {step} is saved in {path}" if path else "nothing saved"
        super().__init__(f"{stop.reason}; {saved}: continue with --resume once it is fixed")
        self.stop, self.step, self.path = stop, step, path


class Change(NamedTuple):
    """One setting that differs between the run's config and the config in force (a tuple,
    so `key, before, after = change` reads it as `honed.config.config_changes` gives it)."""

    key: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return format_change(self.key, self.before, self.after)


def resume_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[Change]:
    """The settings that differ between the run's resolved config (None: unknown, nothing is
    reported) and the one in force, both as `model_dump(mode="json")`."""
    if not isinstance(before, Mapping):
        return []
    return [Change(*c) for c in config_changes(before, after) if c[0] not in IGNORED_ON_RESUME]


def refuse(cause: Change | str, reason: str) -> NoReturn:
    """Stop a resume (exit code 2) over a change that cannot apply to the run in progress."""
    what = (
        f"{cause.key} cannot change when resuming ({cause})"
        if isinstance(cause, Change)
        else f"{cause} cannot change when resuming"
    )
    raise HonedError(
        f"{what}: {reason}; start a new run (--overwrite or another --run-dir) instead"
    )


def changes_environments(key: str) -> bool:
    """Whether the changed setting `key` adds, removes or replaces an environment: a run's
    sampler state and statistics belong to the environments it started with."""
    return key == "envs" or (key.startswith("envs.") and key.endswith((".name", ".type")))


def check_format(state: Mapping[str, Any], where: Path, current: int) -> None:
    """Refuse a state written in a format this honed does not read. A state without a format
    predates the field and is format 1, which every honed reads."""
    found = state.get("format", 1)
    if found != current:
        raise HonedError(
            f"{where} has state format {found!r}, this honed reads format {current}; resume it "
            "with the honed that wrote it, or start a new run"
        )


class Loop(Protocol):
    """What a training loop gives the lifecycle."""

    step: int

    def done(self) -> bool:
        """Whether the loop has no step left to run."""

    def train_step(self) -> dict[str, Any]:
        """Run one step and return its record (numbers go to the metric sinks)."""

    def after_step(self, record: dict[str, Any]) -> None:
        """What follows a step before it is logged (an evaluation, an epoch's end)."""

    def checkpoint_due(self) -> bool:
        """Whether the state is saved after this step."""

    def save(self) -> Path:
        """Save the state `--resume` continues from, atomically; return where."""

    def saved(self) -> Path | None:
        """Where the latest saved state is, if any."""

    def describe(self, record: dict[str, Any]) -> str:
        """The progress bar's text after a step."""

    def stop_reason(self) -> Stop | None:
        """Why the run must end before its last step (a budget spent, a server that keeps
        failing), or None; asked before the first step and after every step."""

    def agree_to_stop(self, requested: bool) -> bool:
        """Whether to stop after this step, given whether this process was asked to (Ctrl-C):
        the processes of a multi-process learner answer together, so that all stop after the
        same step; a single process answers `requested`."""


class RunLifecycle:
    """One run directory through open → (resume) → steps → close, for either loop."""

    def __init__(self, run: RunDir, reporter: Reporter) -> None:
        self.run = run
        self.reporter = reporter
        self.started = time.perf_counter()
        self.sinks: Sinks | None = None
        self.state: run_state.RunStateFile | None = None

    @property
    def seconds(self) -> float:
        """Seconds since the run was opened in this process."""
        return time.perf_counter() - self.started

    def open(self, resume: bool, read_state: Callable[[], State | None]) -> State | None:
        """Create the run directory and return the state to resume from, if asked for and
        there is one."""
        self.run.create()
        if resume:
            run_state.refuse_if_running(self.run.file(run_state.FILE), self.run.path)
        state = read_state() if resume else None
        if resume and state is None:
            self.reporter.note(f"nothing to resume in {self.run.path}: starting a new run")
        return state

    def resumed(self, where: Path, step: int, changes: list[str]) -> None:
        """Say where the run resumes from and what the config in force changes, a line each."""
        self.reporter.note(f"resumed from {where} (step {step})")
        for line in changes:
            self.reporter.note(line)

    def start(self, config_text: str, sinks: Sinks, resumed_step: int | None) -> None:
        """Write the resolved config, keep the logs of the steps being resumed from (none for a
        new run) and open the metric sinks: the run is under way."""
        self.run.write_config(config_text)
        self.run.truncate_logs(resumed_step or 0, keep_start=resumed_step is not None)
        self.sinks = sinks
        if not self.run.read_only:
            self.state = run_state.RunStateFile(
                self.run.claim(self.run.file(run_state.FILE)), resumed_step or 0
            )

    @contextmanager
    def running(self) -> Iterator[None]:
        """The run at work: a heartbeat every half minute for the duration (whatever a step or
        an evaluation is doing), and a Ctrl-C or an error that ends it written as the run's
        state (`interrupted`, `failed` with its line) before it goes on up. Several in turn
        are one run (the skill loop's set-up, then its steps)."""
        if self.state is None:
            yield
            return
        try:
            with self.state.beating():
                yield
        except (RunInterrupted, KeyboardInterrupt):
            self.state.end("interrupted")
            raise
        except Exception as exc:
            self.state.end("failed", run_state.error_line(exc))
            raise

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        assert self.sinks is not None, "start() opens the sinks"
        self.sinks.log(step, dict(metrics))

    def steps(self, loop: Loop, label: str, total: int) -> Stop | None:
        """Run the loop's steps under a progress bar, logging and checkpointing each; the
        `Stop` that ended the run early, or None when it ran to its end.

        A first Ctrl-C lets the step under way finish, saves its state and raises
        `RunInterrupted`: a step cut in the middle would leave the sampler, the optimizer or
        the edit budget advanced past what was saved. A second Ctrl-C stops at once, saving
        nothing; the run then resumes from its last saved state. A SIGTERM (`kill`, a job
        scheduler preempting the run) is taken the same way, so a scheduler's grace period
        that outlasts the step keeps it. A stop the loop asks for
        (`stop_reason`) is taken after the step's state is saved; a `StopRun` abandons the
        step, unsaved. Several learner processes stop when any of them was asked to
        (`agree_to_stop`).
        """
        stop_reason = loop.stop_reason
        halt, stopping = None, False
        with _deferred_interrupt(self.reporter) as stop:
            try:
                with self.reporter.task(label, total, start=loop.step) as advance:
                    halt = None if loop.done() else stop_reason()
                    while halt is None and not loop.done() and not stopping:
                        try:
                            record = loop.train_step()
                        except StopRun as exc:
                            halt = exc.stop
                            break
                        loop.after_step(record)
                        self.log(loop.step, record)
                        halt = None if loop.done() else stop_reason()
                        stopping = loop.agree_to_stop(stop.requested)
                        if loop.checkpoint_due() or stopping or halt is not None:
                            loop.save()
                        if self.state is not None:
                            self.state.beat(loop.step)
                        advance(loop.describe(record))
            except KeyboardInterrupt:
                self.close_sinks()
                raise RunInterrupted(
                    loop.step, loop.saved(), finished=False, signum=stop.signum
                ) from None
        if stopping:
            self.close_sinks()
            raise RunInterrupted(loop.step, loop.saved(), signum=stop.signum)
        if halt is not None:
            self.reporter.note(f"stopped after step {loop.step}: {halt.reason}")
        return halt

    def close_sinks(self) -> None:
        if self.sinks is not None:
            self.sinks.close()
            self.sinks = None

    def close(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Close the sinks and write `summary.json` atomically: the run has finished."""
        self.close_sinks()
        self.run.write_summary(summary)
        if self.state is not None:
            self.state.end("finished")
        return summary


class _Stop:
    """A request to stop after the step under way, and the signal that made it (SIGINT when
    the request came from another learner process, which stops because this one was asked)."""

    requested = False
    signum: int = signal.SIGINT


@contextmanager
def _deferred_interrupt(reporter: Reporter) -> Iterator[_Stop]:
    """Turn the first SIGINT or SIGTERM into a request to stop after the current step; a
    second one raises `KeyboardInterrupt` as usual. Outside the main thread, where Python
    delivers no signals, nothing changes."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: Any) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested, stop.signum = True, signum
        what, again = ("interrupt", "Ctrl-C") if signum == signal.SIGINT else ("SIGTERM",) * 2
        reporter.note(f"{what}: saving after this step ({again} again to stop now, unsaved)")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
