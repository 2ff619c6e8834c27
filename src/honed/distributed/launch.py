"""`honed train CONFIG --nproc N`: start N learner processes on this machine, as
`torchrun --standalone --nproc-per-node N -m honed train CONFIG` would, and stop them together.

honed starts them itself rather than through torchrun's agent so that a Ctrl-C reaches each
process exactly once, as the single-process run takes it (the step under way finishes, every
process agrees to stop after it, rank 0 saves the checkpoint, exit code 130), and so that one
process failing stops the others at once instead of leaving them waiting at a collective
(the terminal shows that process's error and one line naming it, not the others' echoes of
it: `report_lost_peers`; the checkpoints already written stay as they were). The
processes run in a session of their own (the terminal's Ctrl-C goes to this launcher, which
passes it on once); a SIGTERM to the launcher (`kill`, a job scheduler preempting the job) is
passed on the same way and taken as a Ctrl-C is, with exit code 143; a second SIGTERM stops
them all at once (the checkpoints already written stay).
For several machines, use torchrun: honed reads its environment (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`). A learner process started as `python -m honed`
leaves without Python's shutdown once its run has ended (`run_learner`).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# Seconds the other processes get to stop after one failed, before they are killed.
GRACE_S = 10.0
# Set in the environment of the processes this launcher starts.
LAUNCHED = "HONED_LAUNCHED"
# How long a process that lost contact with the others waits for this launcher to stop it.
LOST_PEERS_WAIT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], nproc: int) -> int:
    """Run `python -m honed *argv` as `nproc` learner processes; their exit code (the first
    failure's, else 143 when stopped by SIGTERM, 130 when interrupted, else 0)."""
    env = {
        **os.environ,
        LAUNCHED: "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "honed", *argv],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            start_new_session=True,
        )
        for rank in range(nproc)
    ]

    terminated = []

    def forward(signum: int, frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def terminate(signum: int, frame: object) -> None:
        if terminated:
            _stop(procs)
            raise SystemExit(128 + signum)
        terminated.append(signum)
        forward(signum, frame)

    previous = signal.signal(signal.SIGINT, forward)
    previous_term = signal.signal(signal.SIGTERM, terminate)
    try:
        return _wait(procs, stopped_by_sigterm=terminated)
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def _wait(procs: list[subprocess.Popen], stopped_by_sigterm: list[int]) -> int:
    """Wait for every process; when one fails, stop the others (SIGTERM, then SIGKILL). Once
    the launcher was sent SIGTERM (`stopped_by_sigterm` not empty), a process the signal
    ended outside its steps (exit code -15: loading the model, say) has not failed."""
    codes: dict[int, int] = {}
    while len(codes) < len(procs):
        for rank, proc in enumerate(procs):
            code = proc.poll()
            if code is None or rank in codes:
                continue
            codes[rank] = code
            if code == -signal.SIGTERM and stopped_by_sigterm:
                codes[rank] = 128 + signal.SIGTERM
            elif code not in (0, 130, 143):
                _stop(procs)
                print(
                    f"honed: learner process {rank} exited with code {code}; stopped the others",
                    file=sys.stderr,
                )
                return code
        time.sleep(0.1)
    return max(codes.values())


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


def run_learner(main: Callable[[], int]) -> NoReturn:
    """Run `main` (the command line) in one of several learner processes, then leave with its
    exit code without the interpreter's finalization.

    gloo's worker threads outlive `destroy_process_group` (FSDP's units and the device mesh
    keep the group, and so its threads, alive), and a worker that lets go of a collective's
    tensors takes the GIL when a tensor's Python object goes with them. A worker that does so
    while the interpreter finalizes (say it was preempted between finishing the collective and
    letting go) is ended by Python in the middle of a C++ destructor, and C++ aborts the
    process: "terminate called without an active exception", exit code -6, after a run that
    ended well. So the process runs what Python's shutdown runs first, while every thread may
    still take the GIL (the atexit handlers: W&B, MLflow, Ray and logging close there), flushes
    its output and leaves with `os._exit`, skipping the finalization (module teardown) that
    holds nothing of honed's: by the time `main` returns everything it writes is closed and the
    processes have met at a last barrier (`LearnerGroup.close`). An error that escapes `main`
    is printed first, as Python prints it, with exit code 1.
    """
    try:
        code = main()
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def report_lost_peers(exc: BaseException) -> None:
    """In a learner process, an error `exc` that came out of a collective call: another
    process failed (or the network between them did), and this one is only its echo.

    Under `honed train --nproc`, the launcher is told of the process that failed (which
    printed its own error) and stops this one within moments: wait for it, silently, so that
    the terminal shows one error and one line naming the process. Under another launcher
    (torchrun) or if none comes, one line says what happened instead of a collective's
    traceback; then exit. Any other error returns, to be reported as it is.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    if not any(Path(f.filename).name == "distributed_c10d.py" for f in frames):
        return
    if os.environ.get(LAUNCHED):
        time.sleep(LOST_PEERS_WAIT_S)  # the launcher's SIGTERM ends this process first
    rank = os.environ.get("RANK", "?")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(
        f"honed: learner process {rank} lost contact with the others ({first[:200]}); "
        "the process that failed first says why",
        file=sys.stderr,
    )
    sys.exit(1)
