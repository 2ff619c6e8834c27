"""The skill loop's promises to a paying user (issue 36): budgets that hold before each request,
dry-run bounds that bound, nothing paid twice after a crash, interrupts that stop, secrets that
never reach a file, tool calls where text was expected, merges that do not turn their sources
around, failing runs that say so, replies that cannot fill a disk. Every test talks HTTP to the
local servers of `openai_server.py` / `fault_server.py`; `skill_world.py` plays the models."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fault_server import Faults
from openai_server import FakeOpenAIServer, FakeRequest, Reply, completion
from skill_world import INITIAL_SKILL, World, write_config
from test_skill_faults import SHORT, first_line, read, serve, totals, train

import honed
from honed.cli import main
from honed.models.chat import estimate_tokens

PRICED = {
    "target": {"model": "target", "max_tokens": 16, "price": {"input": 1, "output": 2}},
    "reflector": {"model": "reflector", "max_tokens": 400, "price": {"input": 5, "output": 10}},
}
SRC = Path(honed.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _direct_to_localhost(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def spent(summary: dict) -> dict[str, float]:
    """What the run spent, as the budget counts it."""
    return {
        "max_requests": totals(summary, "requests") + totals(summary, "lost"),
        "max_tokens": totals(summary, "total_tokens"),
        "max_usd": totals(summary, "usd"),
    }


def worst_request(server: FakeOpenAIServer) -> dict[str, float]:
    """The largest worst case of one request the server saw, as honed reserves it: one request,
    its estimated prompt and its max_tokens, priced."""
    tokens, usd = 0.0, 0.0
    for req in server.chat_requests:
        price = PRICED[req.body["model"]]["price"]
        prompt, cap = estimate_tokens(req.messages), req.body.get("max_tokens", 0)
        tokens = max(tokens, prompt + cap)
        usd = max(usd, (prompt * price["input"] + cap * price["output"]) / 1e6)
    return {"max_requests": 1, "max_tokens": tokens, "max_usd": usd}


# ---------------------------------------------------------------- 1: budgets are hard limits


@pytest.mark.parametrize(
    ("kind", "cap"), [("max_requests", 60), ("max_tokens", 6000), ("max_usd", 0.02)]
)
def test_each_budget_holds_before_the_request_that_would_pass_it(tmp_path, kind, cap):
    """The cap is checked before every request against its worst case: the run stops inside
    the step (recorded as stopped, not saved), the summary names the cap, and the spend (as the
    server counted it) passes the cap by at most one request's worst case; here, by nothing.
    Resuming with the same cap does nothing; with a larger one, the run goes on."""
    with serve(World()) as server:
        config = write_config(
            tmp_path, server.base_url, train={"max_steps": 4}, budget={kind: cap}, **PRICED, **SHORT
        )
        run = tmp_path / "run"
        assert train(config, run) == 0
        summary = read(run / "summary.json")
        used = spent(summary)
        worst = worst_request(server)
        assert summary["stopped"]["kind"] == "budget"
        assert summary["stopped"]["reason"].startswith(f"budget.{kind} reached")
        assert used[kind] - cap <= worst[kind]  # the promise
        assert used[kind] <= cap  # what this server shows: no overshoot at all
        assert totals(summary, "requests") == len(server.chat_requests)  # what the server saw
        assert summary["eval"] == {} and summary["steps"] < 4
        cut = run / "steps" / f"step_{summary['steps'] + 1:04d}" / "step.json"
        record = read(cut)
        assert record["outcome"] == "stopped" and record["reason"] == summary["stopped"]["reason"]
        assert read(run / "state.json")["step"] == summary["steps"]
        files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        asked = len(server.chat_requests)
        assert train(config, run, "--resume") == 0
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
        assert len(server.chat_requests) == asked
        assert train(config, run, "--resume", "-o", f"budget.{kind}=100000") == 0
    resumed = read(run / "summary.json")
    assert resumed["stopped"] is None and resumed["steps"] == 4 and resumed["eval"]


def test_the_final_evaluation_counts_against_the_budget(tmp_path):
    """A cap the steps fit under but the held-out evaluation does not: the evaluation is cut
    where the cap is, skipped in the summary with the reason, and the run ends within it."""
    with serve(World()) as server:
        (tmp_path / "free").mkdir()
        free = write_config(tmp_path / "free", server.base_url, train={"max_steps": 1}, **SHORT)
        assert train(free, tmp_path / "free" / "run") == 0
        free_summary = read(tmp_path / "free" / "run" / "summary.json")
        before_eval = totals(free_summary, "requests") - free_summary["tokens"]["eval"]["requests"]
        cap = before_eval + free_summary["tokens"]["eval"]["requests"] // 2
        config = write_config(
            tmp_path, server.base_url, train={"max_steps": 1}, budget={"max_requests": cap}, **SHORT
        )
        assert train(config, tmp_path / "run") == 0
    summary = read(tmp_path / "run" / "summary.json")
    assert summary["steps"] == 1 and summary["eval"] == {}
    assert summary["stopped"]["kind"] == "budget"
    assert "budget.max_requests" in summary["eval_skipped"]
    assert summary["tokens"]["eval"]["requests"] > 0 and totals(summary, "requests") <= cap


def without_usage(handler):
    """`handler` on a server that sends no `usage` with its completions."""

    def serve_it(req: FakeRequest):
        out = handler(req)
        if isinstance(out, str):
            out = completion(out)
        if isinstance(out, dict):
            out = {k: v for k, v in out.items() if k != "usage"}
        return out

    return serve_it


def test_a_server_without_usage_is_metered_by_the_estimate_said_once(tmp_path, caplog):
    """No `usage` in the replies: tokens and USD are counted by honed's estimate (one line in
    the log says so), so budget.max_tokens still stops the run."""
    with serve(without_usage(World())) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 4},
            budget={"max_tokens": 5000},
            **PRICED,
            **SHORT,
        )
        with caplog.at_level(logging.WARNING):
            assert train(config, tmp_path / "run") == 0
        worst = worst_request(server)
    said = [r for r in caplog.records if "sends no usage with its replies" in r.getMessage()]
    assert len(said) == 1
    summary = read(tmp_path / "run" / "summary.json")
    assert (
        summary["stopped"]["kind"] == "budget"
        and "budget.max_tokens" in summary["stopped"]["reason"]
    )
    assert totals(summary, "estimated") == totals(summary, "requests") > 0
    assert totals(summary, "usd") > 0
    assert spent(summary)["max_tokens"] - 5000 <= worst["max_tokens"]


def test_require_usage_refuses_a_server_without_usage(tmp_path, capsys):
    with serve(without_usage(World())) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 2},
            budget={"max_tokens": 100_000, "require_usage": True},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "sends no usage with its replies, and budget.require_usage is true" in err


# ---------------------------------------------------------------- 5: secrets


SECRET = "sk-test-echo-5f3a9c1e77"


class Echoing(World):
    """A server (and proxy) that echoes the request's key everywhere it can: in a 401 body that
    quotes the Authorization header (every failure reflection after the first step), in reply
    text, in headers, in a 429 body, in a proxy's HTML page, in a reflection and an edit."""

    def __init__(self) -> None:
        super().__init__()
        self.reflections = 0

    def __call__(self, req: FakeRequest):
        header = req.headers.get("authorization", "")
        echo = {"X-Echo-Authorization": header, "X-Request-Key": SECRET}
        if req.body["model"] == "target":
            question = req.last_user_text
            if "[beta]" in question and "item 11" in question:
                return (
                    Reply(
                        429,
                        {"error": {"message": f"slow down, {header}"}},
                        headers={"Retry-After": "0", **echo},
                    )
                    if self.count("beta11") == 1
                    else self.target(req)
                )
            if "[gamma]" in question and "item 12" in question and self.count("gamma12") == 1:
                page = f"<html>502 upstream said: Authorization: {header}</html>".encode()
                return Reply(200, raw=page, content_type="text/html", headers=echo)
            answer = self.target(req)
            return Reply(200, completion(f"{answer}\n(seen key {SECRET})"), headers=echo)
        if req.body["model"] == "reflector" and "reflect on" in first_line(req):
            self.reflections += 1
            if self.reflections > 1 or "reflect on successes" in first_line(req):
                message = f"Incorrect API key provided in header Authorization: {header}"
                return Reply(401, {"error": {"message": message}}, headers=echo)
            data = json.loads(self.reflect_failures(req.last_user_text))
            data["summary"] += f" (the key is {SECRET})"
            data["edits"].append({"op": "append", "content": f"- Send Authorization: {header}"})
            return Reply(200, completion(json.dumps(data)), headers=echo)
        return super().__call__(req)


def test_a_key_echoed_by_the_server_reaches_no_run_file_and_no_output(
    tmp_path, monkeypatch, capsys, caplog
):
    """Issue 36, 5: every string from the server or an exception is redacted before it is
    logged, written or read: the key is in no file of the run and nowhere on the terminal,
    though the server put it in error bodies, replies, headers and edits."""
    monkeypatch.setenv("HONED_TEST_KEY", SECRET)
    world = Echoing()
    keyed = {"api_key_env": "HONED_TEST_KEY"}
    with (
        caplog.at_level(logging.INFO),
        FakeOpenAIServer(world, models=("target", "reflector"), api_key=SECRET) as server,
    ):
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 4, "minibatch_size": 4},
            target={"model": "target", **keyed},
            reflector={"model": "reflector", **keyed},
            **SHORT,
        )
        code = main(["skills", "train", str(config), "--run-dir", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 2 and "every reflection failed in 3 steps in a row" in err
    assert "[REDACTED]" in err and "Incorrect API key" in err
    run = tmp_path / "run"
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(b"[REDACTED]" in p.read_bytes() for p in files)
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in out and SECRET not in err
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert world.reflections > 2  # the 401s were sent and echoed


# ---------------------------------------------------------------- 6: tool calls


def tool_calls(*calls: tuple[str, dict]) -> dict:
    """A completion whose message is tool calls only (`content: null`)."""
    body = completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for i, (name, arguments) in enumerate(calls)
        ],
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


class CallingReflector(World):
    """A reflector served with tool calling: it proposes its edits as calls (one call per edit
    and one with the summary), and ranks in a call too; with `useless`, its calls hold no
    edits at all."""

    def __init__(self, useless: bool = False) -> None:
        super().__init__()
        self.useless = useless

    def __call__(self, req: FakeRequest):
        out = super().__call__(req)
        if req.body["model"] != "reflector" or not isinstance(out, str):
            return out
        data = json.loads(out)
        if self.useless:
            return tool_calls(("lookup", {"query": "what should I change?"}))
        if "edits" in data:
            calls = [("propose_edit", edit) for edit in data["edits"]]
            return tool_calls(("summarise", {"summary": data["summary"]}), *calls)
        return tool_calls(("submit_ranking", data))


def test_a_reflector_answering_in_tool_calls_is_read_from_their_arguments(tmp_path):
    """Issue 36, 6: the edits in the calls' arguments are the reflection's edits, and the step
    record counts the replies read from tool calls."""
    with serve(CallingReflector()) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 2}, **SHORT)
        assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    summary = read(run / "summary.json")
    assert summary["accepted_steps"] and summary["selection"]["best"]["hard"] > 1 / 6
    record = read(run / "steps" / "step_0001" / "step.json")
    assert record["tokens/reflect/tool_calls"] > 0 and record["tokens/rank/tool_calls"] == 1
    assert record["reflections_failed"] == 0 and record["proposed"] > 0
    reflections = read(run / "steps" / "step_0001" / "proposed_edits.json")
    assert any(r["edits"] and r["summary"].startswith("no rule for") for r in reflections)


def test_a_reflector_whose_tool_calls_hold_no_edits_fails_loudly(tmp_path, capsys):
    """Calls with nothing usable in their arguments are invalid, each with its reason, not an
    empty reply: the steps are skipped, and the run stops with exit code 2 saying why (before:
    every step 'unchanged', counters 0, exit 0)."""
    with serve(CallingReflector(useless=True)) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 3}, **SHORT)
        assert train(config, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "held tool calls (lookup) instead of text" in err
    record = read(tmp_path / "run" / "steps" / "step_0001" / "step.json")
    assert record["outcome"] == "skipped" and record["reflections_failed"] > 0
    assert record["tokens/reflect/invalid"] == record["tokens/reflect/tool_calls"] > 0
    assert all("tool calls (lookup)" in e for e in record["reflection_errors"])


class CallingTarget(World):
    """A target that answers every [gamma] question with a tool call and no text, though the
    qa environment offers no tools."""

    def __call__(self, req: FakeRequest):
        if req.body["model"] == "target" and req.last_user_text.startswith("[gamma]"):
            self.count("gamma")
            return tool_calls(("calculator", {"expression": "6*7"}))
        return super().__call__(req)


def test_a_target_answering_a_text_task_with_tool_calls_only_is_empty_and_not_cached(tmp_path):
    """Issue 36, 6: such a reply is no answer: counted empty (and as tool calls) in the step
    record, retried, then failed and left out of the scores; never cached, so never served
    from the cache as an empty answer (before: scored 0 and cached empty)."""
    world = CallingTarget()
    with serve(world) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1},
            target={"model": "target", "max_failed_fraction": 1.0},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    record = read(run / "steps" / "step_0001" / "step.json")
    assert record["tokens/gate/tool_calls"] == record["tokens/gate/empty"] > 0
    assert record["target_failed"] > 0
    rollouts = read(run / "steps" / "step_0001" / "rollouts.json")
    gamma = [r for r in rollouts if r["kind"] == "gamma"]
    assert gamma and all("sent tool calls (calculator) but no text" in r["error"] for r in gamma)
    cached = [
        json.loads(x)["rollout"]
        for x in (run / "cache" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert cached and all(r["kind"] != "gamma" and r["reply"] for r in cached)
    summary = read(run / "summary.json")
    assert summary["selection"]["initial"]["failed"] == 2  # both gamma items, not scored 0


# ---------------------------------------------------------------- 8: a run that ends failing


def test_a_run_whose_last_three_steps_all_failed_exits_2_at_its_last_step(tmp_path, capsys):
    """Issue 36, 8: the reflector breaks after step 1 and the run ends at max_steps = 4 with
    three skipped steps: exit code 2 with the reason, as a longer run stops there (before:
    exit 0)."""
    faults = Faults(World())
    with serve(faults) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 4}, **SHORT)
        assert train(config, tmp_path / "run", "-o", "train.max_steps=1") == 0
        faults.force("error", times=None, model="reflector")
        assert train(config, tmp_path / "run", "--resume") == 2
    err = capsys.readouterr().err
    assert "every reflection failed in 3 steps in a row" in err and "overloaded" in err
    summary = read(tmp_path / "run" / "summary.json")
    assert summary["steps"] == 4 and summary["skipped_steps"] == [2, 3, 4]
    assert summary["stopped"]["kind"] == "reflector" and summary["eval_skipped"]


# ---------------------------------------------------------------- 9: runaway replies


class Flood(World):
    """A target that answers the first [delta] question with 5 MB before its answer."""

    def __call__(self, req: FakeRequest):
        if req.body["model"] == "target" and req.last_user_text.startswith("[delta]"):
            return "Let me think about this. " * 210_000 + self.target(req)
        return super().__call__(req)


def test_a_runaway_reply_is_stored_cut_to_max_stored_reply_chars(tmp_path):
    """Issue 36, 9: 5 MB replies are cut as they arrive (head, marker, tail) to
    train.max_stored_reply_chars: the cache, the journal and rollouts.json stay small, and the
    answer at the reply's end is still scored."""
    with serve(Flood()) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1, "max_stored_reply_chars": 20_000},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    assert size < 2_000_000, size  # 5 MB a delta reply, several of them asked
    rollouts = read(run / "steps" / "step_0001" / "rollouts.json")
    delta = [r for r in rollouts if r["kind"] == "delta"]
    assert delta and all(len(r["reply"]) <= 20_000 for r in delta)
    assert all("characters left out ...]" in r["reply"] for r in delta)
    for r in delta:  # the bare number: the answer the tail kept, scored for partial credit
        assert r["reply"].endswith(f"Answer: {r['expected'].split()[1]}") and r["soft"] > 0


# ---------------------------------------------------------------- 3, 4: crashes and Ctrl-C


def honed_process(config: Path, run: Path, *flags: str) -> subprocess.Popen:
    """`honed skills train` in a process of its own, to be killed or interrupted."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1,localhost"}
    command = [sys.executable, "-m", "honed", "skills", "train", str(config), "--quiet"]
    return subprocess.Popen(
        [*command, "--run-dir", str(run), *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Holding(World):
    """The world, holding one request (the first `hold` accepts) until `release` is set;
    `held` is set once it arrived."""

    def __init__(self, hold) -> None:
        super().__init__()
        self.hold = hold
        self.held = threading.Event()
        self.release = threading.Event()
        self.after_hold: list[FakeRequest] = []

    def __call__(self, req: FakeRequest):
        if self.held.is_set():
            self.after_hold.append(req)
        elif self.hold(req):
            self.held.set()
            self.release.wait(30)
        return super().__call__(req)


def later_step_reflection(req: FakeRequest) -> bool:
    """A failure reflection of a step after the epoch's first (its prompt shows the step
    buffer's patterns)."""
    return (
        req.body["model"] == "reflector"
        and "reflect on failures" in first_line(req)
        and "Patterns found at earlier steps" in req.last_user_text
    )


def test_kill_9_mid_step_then_resume_pays_for_no_request_twice(tmp_path):
    """Issue 36, 3: killed while a step-2 reflection is in flight and the step's other
    reflections are in, the resumed run takes those from the journal and asks the server only
    what it never answered: the requests of both processes are an uninterrupted run's plus the
    one lost in flight, which the summary counts as `lost`; its usage equals what the server
    saw; and the run ends with the uninterrupted run's skills."""
    with serve(World()) as server:
        (tmp_path / "full").mkdir()
        full = write_config(tmp_path / "full", server.base_url, train={"max_steps": 3}, **SHORT)
        assert train(full, tmp_path / "full" / "run") == 0
        uninterrupted = len(server.chat_requests)
    world = Holding(later_step_reflection)
    with serve(world) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 3}, **SHORT)
        run = tmp_path / "run"
        process = honed_process(config, run)
        try:
            assert world.held.wait(60), process.communicate()
            time.sleep(1.0)  # the step's other reflections come back and are journaled
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            world.release.set()
        assert read(run / "state.json")["step"] == 1
        assert train(config, run, "--resume") == 0
        seen = len(server.chat_requests)
    summary = read(run / "summary.json")
    assert totals(summary, "lost") == 1
    assert seen == uninterrupted + 1  # only the request in flight was asked twice
    assert totals(summary, "requests") + totals(summary, "lost") == seen
    assert (run / "best_skill.md").read_text() == (
        tmp_path / "full" / "run" / "best_skill.md"
    ).read_text()
    full_summary = read(tmp_path / "full" / "run" / "summary.json")
    assert summary["accepted_steps"] == full_summary["accepted_steps"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_second_ctrl_c_exits_at_once_and_sends_nothing_queued(tmp_path, signum):
    """Issue 36, 4: the reflector hangs (its timeout is 30 s) with three reflections queued
    behind the one in flight; a second Ctrl-C ends the process within 2 s, and no queued
    request is sent after it (before: 2x the timeout, queued reflections sent after it). A
    second SIGTERM (a scheduler's, after a first one asked to save) does the same."""
    world = Holding(lambda req: req.body["model"] == "reflector")
    with serve(world) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 2, "minibatch_size": 2},
            reflector={"model": "reflector", "concurrency": 1, "timeout_s": 30},
            **SHORT,
        )
        process = honed_process(config, tmp_path / "run")
        try:
            assert world.held.wait(60), process.communicate()
            process.send_signal(signum)
            time.sleep(0.5)
            process.send_signal(signum)
            interrupted = time.monotonic()
            _, err = process.communicate(timeout=20)
            took = time.monotonic() - interrupted
            time.sleep(1.0)  # time for anything still queued to be sent
        finally:
            world.release.set()
            if process.poll() is None:
                process.kill()
    assert process.returncode == 128 + signum, err
    assert took < 2.0, took
    assert "interrupted during step 1, unsaved" in err
    assert [r for r in world.after_hold if r.body["model"] == "reflector"] == []


# ---------------------------------------------------------------- 2: the dry run's bound


def dry_run_rows(config: Path, run: Path, capsys, monkeypatch) -> dict[str, list[str]]:
    """The dry run's table: stage -> its cells after the stage's name."""
    monkeypatch.setenv("COLUMNS", "240")  # one line per table row
    capsys.readouterr()
    assert main(["skills", "train", str(config), "--run-dir", str(run), "--dry-run"]) == 0
    out = capsys.readouterr().out
    return {
        cells[0]: cells[1:]
        for line in out.splitlines()
        if (cells := [c.strip() for c in line.strip("│┃ ").split("│")]) and len(cells) == 9
    }


# (first attempts broken, reflector replies cut twice, target retries, selection items that
# always fail: one with retries, five without, each re-asked at every gate)
BAD_DAYS = [
    (0.3, 1, ("[beta] What is the code of item 12?",)),
    (
        0.0,
        0,
        tuple(
            f"[{k}] What is the code of item 12?"
            for k in ("alpha", "beta", "gamma", "delta", "epsilon")
        ),
    ),
]


class Wordy(World):
    """A reflector whose rules come with a long reason, so the skill grows step by step far
    past the initial one the expectation is estimated with."""

    REASON = " Keep to this, because the scorer compares the answer word for word." * 20

    def reflect_failures(self, text: str) -> str:
        data = json.loads(super().reflect_failures(text))
        for edit in data["edits"]:
            edit["content"] += self.REASON
        return json.dumps(data)


@pytest.mark.parametrize(("fraction", "retries", "doomed"), BAD_DAYS)
def test_the_dry_runs_bound_holds_on_a_run_against_a_server_on_a_bad_day(
    tmp_path, capsys, monkeypatch, fraction, retries, doomed
):
    """Issue 36, 2: first attempts broken (cut, empty, garbled, 429, 503), a reflector reply
    cut twice, selection items whose requests always fail (re-asked at every gate), the skill
    growing: the calls every stage made (retries included, counted in the journal), its prompt
    and completion tokens (the server's counts) stay within the dry run's bound, and the
    expected column sits below the bound."""
    faults = Faults(Wordy(), fraction=fraction, seed="bound")
    with serve(faults) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 3, "merge": "llm"},
            target={
                "model": "target",
                "max_tokens": 24,
                "max_failed_fraction": 0.5,
                "max_retries": retries,
            },
            reflector={"model": "reflector", "max_tokens": 400},
        )
        rows = dry_run_rows(config, tmp_path / "run", capsys, monkeypatch)
        faults.force("error", times=None, when=lambda req: req.last_user_text in doomed)
        faults.force("truncate", times=2, model="reflector")  # cut, and cut again when re-asked
        assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    sent: dict[str, int] = {}
    largest: dict[str, float] = {}  # the largest prompt of one attempt, by the server's count
    for line in (run / "journal.jsonl").read_text().splitlines():
        entry = json.loads(line)
        stage = entry["stage"]
        if "sent" in entry:
            sent[stage] = sent.get(stage, 0) + 1
        prompt = entry.get("counts", {}).get("prompt_tokens", 0)
        largest[stage] = max(largest.get(stage, 0), prompt)
    summary = read(run / "summary.json")
    assert summary["selection"]["initial"]["failed"] == len(doomed)  # every time
    grown = max(
        len((run / "skills" / f"v{v['version']:04d}.md").read_text()) for v in summary["versions"]
    )
    assert grown > 20 * len(INITIAL_SKILL)
    assert faults.total("truncate", "reflector") == 2
    assert sum(sent.values()) == len(server.chat_requests)
    for stage, calls in sent.items():
        _, usual, most, prompt_usual, prompt_most, completion_most = rows[stage][:6]
        row = summary["tokens"][stage]
        assert int(usual) <= int(most) and int(prompt_usual) <= int(prompt_most), stage
        assert calls <= int(most), stage
        assert row["prompt_tokens"] <= int(prompt_most), stage
        assert largest[stage] <= int(prompt_most) / int(most), stage  # a call's own bound
        assert row["completion_tokens"] <= int(completion_most), stage
    assert sum(sent.values()) <= int(rows["total"][2])


def test_a_budget_met_at_an_epochs_end_leaves_it_to_the_resumed_run(tmp_path):
    """The cap is met after the consolidation's call, while the consolidated skill is gated:
    the epoch's last step stays done and saved, the epoch open; resumed with a larger budget,
    the run closes the epoch taking the consolidation's reply from the journal (asked once in
    all) and ends as an uncapped run."""
    world = World()
    with serve(world) as server:
        (tmp_path / "free").mkdir()
        free = write_config(tmp_path / "free", server.base_url, train={"max_steps": 3})
        assert train(free, tmp_path / "free" / "run") == 0
        used = read(tmp_path / "free" / "run" / "summary.json")
        steps = sum(
            v
            for d in (tmp_path / "free" / "run" / "steps").iterdir()
            for k, v in read(d / "step.json").items()
            if k.endswith("/requests")
        )
        tokens = used["tokens"]
        cap = used["gate"]["items"] + steps + tokens["consolidate_rollout"]["requests"] + 1
        consolidations = world.calls["consolidate"]
        config = write_config(tmp_path, server.base_url, train={"max_steps": 3})
        run = tmp_path / "run"
        assert train(config, run, "-o", f"budget.max_requests={cap}") == 0
        summary = read(run / "summary.json")
        assert summary["steps"] == 3 and summary["epochs"] == 0
        assert summary["stopped"]["kind"] == "budget" and totals(summary, "requests") == cap
        assert world.calls["consolidate"] == consolidations + 1
        assert train(config, run, "--resume") == 0
    resumed = read(run / "summary.json")
    assert resumed["epochs"] == 1 and resumed["stopped"] is None and resumed["eval"]
    assert world.calls["consolidate"] == consolidations + 1  # from the journal, not asked again
    assert totals(resumed, "requests") == totals(used, "requests")
    assert (run / "best_skill.md").read_text() == (
        tmp_path / "free" / "run" / "best_skill.md"
    ).read_text()
