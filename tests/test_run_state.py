"""A run says what it is doing in `run_state.json`: running with a heartbeat, finished,
interrupted, failed with its error's line; a run killed outright keeps saying `running`, but its
heartbeat stops and readers see it stale. `--resume` refuses a run another process is training
and takes a stale one; `honed view` shows each state (and judges runs from before the file by
their files' times, `test_view_app.py`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_resume import _interrupt_after
from tiny_run import (
    FaultyDigitShareEnv,
    small_config,
    small_config_data,
    spread_env_data,
    write_config,
)

from honed.cli import main
from honed.config import load_config
from honed.rl.trainer import GRPOTrainer
from honed.runs import run_state
from honed.runs.rundir import RunDir
from honed.view.catalog import RunFiles, status
from honed.view.metrics import MetricsCache
from honed.view.summaries import run_summary

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def _record(run: Path) -> dict:
    return json.loads((run / run_state.FILE).read_text())


def _viewed(run: Path) -> dict:
    """The run as the viewer's runs page gets it."""
    return run_summary(RunFiles(run.parent, run.name, run), MetricsCache())


def _faulty(tmp_path: Path, *overrides: str) -> Path:
    data = spread_env_data(tmp_path)
    data["envs"][0]["type"] = "tiny_run:FaultyDigitShareEnv"
    data["checkpoint"] = {"every": 1, "keep_last": 5}
    for override in overrides:
        key, value = override.split("=")
        data["trainer"][key] = int(value)
    return write_config(tmp_path, data)


def test_a_finished_run_says_so_with_its_last_step_and_heartbeat(tmp_path):
    started = time.time()
    GRPOTrainer(small_config(tmp_path), RunDir(tmp_path / "run")).train()
    record = _record(tmp_path / "run")
    assert record["state"] == "finished" and record["error"] is None
    assert (record["pid"], record["host"], record["step"]) == (os.getpid(), socket.gethostname(), 4)
    assert started <= record["started"] <= record["heartbeat"] <= time.time()
    viewed = _viewed(tmp_path / "run")
    assert (viewed["status"], viewed["error"], viewed["updated"]) == (
        "finished",
        None,
        record["heartbeat"],
    )


def test_ctrl_c_leaves_the_run_interrupted_after_the_step_it_saved(tmp_path):
    trainer = GRPOTrainer(small_config(tmp_path, "checkpoint.every=1"), RunDir(tmp_path / "run"))
    _interrupt_after(trainer, 2)
    record = _record(tmp_path / "run")
    assert (record["state"], record["step"]) == ("interrupted", 2)
    assert _viewed(tmp_path / "run")["status"] == "interrupted"


def test_an_error_mid_run_leaves_the_run_failed_with_the_error_s_line(
    tmp_path, monkeypatch, capsys
):
    """Bad input in step 2 (a reward that is not a number): exit code 2, and the run's state
    says failed, with the message the terminal showed; an error that is not honed's own names
    its type."""
    monkeypatch.setattr(FaultyDigitShareEnv, "calls", 0)
    monkeypatch.setenv("HONED_TEST_FAULT", "nan:0:20")  # step 1 scores 16 completions
    config = _faulty(tmp_path)
    assert main(["train", str(config), "--quiet"]) == 2
    said = capsys.readouterr().err.strip().removeprefix("honed: error: ")
    record = _record(tmp_path / "run")
    assert (record["state"], record["step"], record["error"]) == ("failed", 1, said)
    assert "non-finite reward" in said
    viewed = _viewed(tmp_path / "run")
    assert (viewed["status"], viewed["error"]) == ("failed", said)

    monkeypatch.setattr(FaultyDigitShareEnv, "calls", 0)
    monkeypatch.setenv("HONED_TEST_FAULT", "raise:0:20")
    with pytest.raises(ValueError):
        main(["train", str(config), "--resume", "--quiet"])
    record = _record(tmp_path / "run")
    assert record["state"] == "failed"
    assert record["error"] == "ValueError: the test environment failed on call 20"


def _await_heartbeat(run: Path) -> bool:
    """Whether the run's heartbeat moves within ten seconds."""
    first = _record(run)["heartbeat"]
    deadline = time.monotonic() + 10
    while _record(run)["heartbeat"] == first and time.monotonic() < deadline:
        time.sleep(0.01)
    return _record(run)["heartbeat"] > first


def test_the_heartbeat_goes_on_while_a_step_is_under_way(tmp_path, monkeypatch):
    monkeypatch.setattr(run_state, "HEARTBEAT_S", 0.02)
    trainer = GRPOTrainer(small_config(tmp_path, "trainer.max_steps=1"), RunDir(tmp_path / "run"))
    real_step, beat = trainer.train_step, []

    def long_step():
        beat.append(_await_heartbeat(tmp_path / "run"))
        return real_step()

    trainer.train_step = long_step
    trainer.train()
    assert beat == [True]
    assert _record(tmp_path / "run")["state"] == "finished"


def test_nothing_is_written_after_the_end_but_an_error_after_the_summary(tmp_path):
    state = run_state.RunStateFile(tmp_path / run_state.FILE, step=3, interval=0.02)
    with state.beating():
        assert _await_heartbeat(tmp_path)
    state.end("finished")
    state.beat(4)
    state.end("interrupted")
    assert (_record(tmp_path)["state"], _record(tmp_path)["step"]) == ("finished", 3)
    state.end("failed", "ValueError: after the summary")
    assert _record(tmp_path)["error"] == "ValueError: after the summary"


def test_a_running_record_is_stale_once_its_heartbeat_stops_or_its_process_is_gone():
    now = time.time()
    alive = {"state": "running", "pid": os.getpid(), "host": socket.gethostname()}
    assert run_state.judge({**alive, "heartbeat": now}, now) == "running"
    assert run_state.judge({**alive, "heartbeat": now}, now + run_state.STALE_S + 1) == "stale"
    # another machine's process cannot be looked up: its heartbeat alone says
    elsewhere = {**alive, "host": "another-machine", "pid": 2**22 + 1, "heartbeat": now}
    assert run_state.judge(elsewhere, now) == "running"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert run_state.judge({**alive, "pid": gone.pid, "heartbeat": now}, now) == "stale"
    assert run_state.judge({**alive, "pid": -1, "heartbeat": now}, now) == "stale"
    for ended in run_state.ENDED:
        assert run_state.judge({**alive, "state": ended, "heartbeat": 0.0}, now) == ended


def test_a_run_this_process_set_up_and_left_may_be_resumed_by_it(tmp_path):
    """Through the Python API: set up, never trained; the same process then resumes it."""
    config = write_config(tmp_path, small_config_data(tmp_path))
    trainer = GRPOTrainer(load_config(config), RunDir(tmp_path / "run"))
    trainer.setup(resume=False)
    trainer.rollouts.close()
    assert _viewed(tmp_path / "run")["status"] == "running"
    assert main(["train", str(config), "--resume", "--quiet"]) == 0
    assert _record(tmp_path / "run")["state"] == "finished"


def _wait_for(condition, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_resume_refuses_a_run_another_process_trains_and_takes_it_once_killed(tmp_path, capsys):
    """`honed train` in another process: while it trains, the viewer shows it running and
    `--resume` (one process or several) refuses with exit code 2, naming the process; after
    kill -9 its file still says running, the viewer shows it stale, and `--resume` continues
    it from its last checkpoint to the end."""
    config = _faulty(tmp_path, "max_steps=100000")
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    other = subprocess.Popen(
        [sys.executable, "-m", "honed", "train", str(config), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for(
            lambda: (
                other.poll() is not None
                or (run_state.read(run / run_state.FILE) or {}).get("step", 0) >= 2
            ),
            "two steps of the other process",
        )
        assert other.poll() is None, other.stderr.read().decode()
        assert _viewed(run)["status"] == "running"
        for more in ([], ["--nproc", "2"]):
            # (a few steps: were it not refused, it would end soon rather than train on)
            few = ["-o", "trainer.max_steps=3", *more]
            assert main(["train", str(config), "--resume", "--quiet", *few]) == 2
            said = capsys.readouterr().err
            assert f"is being trained by process {other.pid} on {socket.gethostname()}" in said
            assert said.count("honed: error:") == 1, said
        assert other.poll() is None  # the refused resume left it alone
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    record = _record(run)
    assert (record["state"], record["pid"]) == ("running", other.pid)
    viewed = _viewed(run)
    assert (viewed["status"], viewed["updated"]) == ("stale", record["heartbeat"])
    saved = max(int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*"))
    more = f"trainer.max_steps={saved + 1}"
    assert main(["train", str(config), "--resume", "--quiet", "-o", more]) == 0
    record = _record(run)
    assert (record["state"], record["step"], record["pid"]) == ("finished", saved + 1, os.getpid())
    assert status(RunFiles(tmp_path, "run", run), []).state == "finished"
