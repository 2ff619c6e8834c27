"""The OpenAI-compatible chat client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from email.utils import formatdate

import pytest
from fault_server import Faults
from openai_server import FakeOpenAIServer, FakeRequest, Reply, completion
from pydantic import ValidationError

from honed.errors import HonedError
from honed.models.chat import (
    MAX_DELAY_S,
    Aborted,
    ChatClient,
    ChatFailure,
    ChatModelConfig,
    UsageMeter,
    retry_delay,
)

USER = [{"role": "user", "content": "what is two plus two"}]


def config(server: FakeOpenAIServer | str, **overrides) -> ChatModelConfig:
    base_url = server if isinstance(server, str) else server.base_url
    fields = {"base_url": base_url, "model": "fake-model", "backoff_s": 0.01, **overrides}
    return ChatModelConfig(**fields)


@pytest.fixture(autouse=True)
def _direct_to_localhost(monkeypatch):
    """httpx honours proxy variables; a CI machine's proxy must not see the local server."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def server():
    with FakeOpenAIServer() as s:
        yield s


def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_success_sends_the_configured_request(server, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    cfg = config(
        server, api_key_env="FAKE_KEY", temperature=0.3, max_tokens=64, extra_body={"seed": 7}
    )
    with ChatClient(cfg) as client:
        client.check()
        assert client.chat(USER) == "echo: what is two plus two"
        reply = client.complete(USER, stage="judge", temperature=None, top_p=0.5)
    first, second = server.chat_requests
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body == {
        "model": "fake-model",
        "messages": USER,
        "temperature": 0.3,
        "max_tokens": 64,
        "seed": 7,
    }
    # Per-call params override the config; None leaves a field out.
    assert "temperature" not in second.body and second.body["top_p"] == 0.5
    assert reply.finish_reason == "stop" and reply.prompt_tokens == 5


def test_retries_after_429_and_500_then_succeeds(caplog):
    def flaky(req: FakeRequest):
        if req.index == 0:
            return Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "0"})
        if req.index == 1:
            return Reply(500, {"error": {"message": "internal error"}})
        if req.index == 2:
            return Reply(drop=True)  # the connection closes without a response
        return "fine"

    with FakeOpenAIServer(flaky) as server, ChatClient(config(server, max_retries=3)) as client:
        assert client.chat(USER, stage="rollout") == "fine"
        assert len(server.chat_requests) == 4
        assert client.usage()["rollout"]["retries"] == 3
        assert client.usage()["rollout"]["requests"] == 1
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 3 and "HTTP 429: rate limited" in retries[0]


def test_gives_up_after_max_retries_with_the_last_problem():
    always_503 = lambda req: Reply(503, {"error": {"message": "overloaded"}})  # noqa: E731
    with (
        FakeOpenAIServer(always_503) as server,
        ChatClient(config(server, max_retries=2)) as client,
    ):
        with pytest.raises(HonedError) as info:
            client.chat(USER)
        assert len(server.chat_requests) == 3
    message = str(info.value)
    assert "HTTP 503: overloaded" in message and "gave up after 3 attempt(s)" in message
    assert server.base_url in message


def test_no_retry_on_400_and_the_servers_message_is_shown():
    def bad(req):
        return Reply(400, {"error": {"message": "max_tokens is too large: 999999"}})

    with FakeOpenAIServer(bad) as server, ChatClient(config(server, max_retries=5)) as client:
        with pytest.raises(HonedError) as info:
            client.chat(USER)
        assert len(server.chat_requests) == 1
    assert "HTTP 400: max_tokens is too large: 999999" in str(info.value)
    assert "model 'fake-model'" in str(info.value)


def test_401_on_chat_names_the_key_variable(monkeypatch):
    monkeypatch.setenv("WRONG_KEY", "nope")
    with FakeOpenAIServer(api_key="right") as server:
        client = ChatClient(config(server, api_key_env="WRONG_KEY"))
        with pytest.raises(HonedError, match="environment variable WRONG_KEY"):
            client.chat(USER)
        assert len(server.chat_requests) == 1


def test_timeout_is_retried_then_reported():
    slow = lambda req: Reply(200, completion("late"), delay_s=5)  # noqa: E731
    with FakeOpenAIServer(slow) as server:
        client = ChatClient(config(server, timeout_s=0.3, max_retries=1))
        start = time.monotonic()
        with pytest.raises(HonedError, match=r"timed out after 0\.3s; gave up after 2 attempt"):
            client.chat(USER)
        assert time.monotonic() - start < 4
        assert len(server.chat_requests) == 2


def test_preflight_fails_fast_on_an_unreachable_server():
    url = closed_port_url()
    client = ChatClient(config(url, max_retries=4, backoff_s=10))
    calls = []

    def run():
        client.check()  # before any work, as the skill loop does
        calls.append(client.chat(USER))

    start = time.monotonic()
    with pytest.raises(HonedError) as info:
        run()
    assert time.monotonic() - start < 3  # no back-off: the preflight does not retry
    assert calls == [] and f"cannot reach the chat server at {url}" in str(info.value)


def test_preflight_reports_bad_key_wrong_url_and_unknown_model(monkeypatch):
    monkeypatch.setenv("KEY", "wrong")
    with FakeOpenAIServer(models=["qwen3-8b", "llama-3.1-8b"], api_key="right") as server:
        with pytest.raises(HonedError, match=r"refused the credentials .*HTTP 401"):
            ChatClient(config(server, model="qwen3-8b", api_key_env="KEY")).check()
        monkeypatch.setenv("KEY", "right")
        with pytest.raises(HonedError) as info:
            ChatClient(config(server, model="qwen3-8", api_key_env="KEY")).check()
        assert "model 'qwen3-8' is not served" in str(info.value)
        assert "did you mean 'qwen3-8b'" in str(info.value)
        ChatClient(config(server, model="qwen3-8b", api_key_env="KEY")).check()
        no_prefix = server.base_url.removesuffix("/v1")
        with pytest.raises(HonedError, match=r"no OpenAI-compatible API at .*usually ends in /v1"):
            ChatClient(config(no_prefix, model="qwen3-8b", api_key_env="KEY")).check()
    with FakeOpenAIServer(models=[]) as server:
        ChatClient(config(server, model="anything")).check()  # lists nothing: no model check


def test_missing_key_variable_is_an_error_at_construction(server, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(HonedError, match=r"NOT_SET_ANYWHERE.*not set"):
        ChatClient(config(server, api_key_env="NOT_SET_ANYWHERE"))


def answers(client: ChatClient, batch, stage: str = "default") -> list[str]:
    """The answers of `complete_many` in batch order (failures raised)."""
    out: dict[int, str] = {}
    for index, result in client.complete_many(batch, stage):
        if isinstance(result, Exception):
            raise result
        out[index] = result.text
    return [out[i] for i in range(len(batch))]


def test_complete_many_respects_the_concurrency_limit():
    def numbered(req: FakeRequest):
        return Reply(200, completion(f"reply to {req.last_user_text}"), delay_s=0.15)

    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(12)]
    with FakeOpenAIServer(numbered) as server:
        client = ChatClient(config(server, concurrency=3))
        assert answers(client, batch) == [f"reply to q{i}" for i in range(12)]
        assert server.max_in_flight == 3
        # The limit holds across callers too: two threads sharing the client.
        server.max_in_flight = 0
        threads = [threading.Thread(target=answers, args=(client, batch[:6])) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.max_in_flight == 3
    assert answers(ChatClient(config(server)), []) == []


def test_waiting_for_a_free_slot_does_not_count_against_the_timeout():
    # Five callers, one slot, 0.25 s per request: the last one waits ~1 s for its turn, longer
    # than timeout_s, yet only the request itself is timed.
    slow = lambda req: Reply(200, completion("ok"), delay_s=0.25)  # noqa: E731
    with FakeOpenAIServer(slow) as server:
        client = ChatClient(config(server, concurrency=1, timeout_s=0.7, max_retries=0))
        results, errors = [], []

        def call():
            try:
                results.append(client.chat(USER))
            except HonedError as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=call) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and results == ["ok"] * 5
        assert server.max_in_flight == 1


def test_abort_cuts_the_request_in_flight_and_sends_none_of_those_waiting():
    """What a second Ctrl-C relies on: callers waiting for a slot, and one waiting out a
    back-off, end at once with `Aborted`; the hanging request is cut; nothing more is sent."""
    release = threading.Event()

    def hang(req: FakeRequest):
        if req.last_user_text == "fail":
            return Reply(503, {"error": {"message": "overloaded"}})
        release.wait(30)
        return "late"

    with FakeOpenAIServer(hang) as server:
        client = ChatClient(config(server, concurrency=1, timeout_s=30, backoff_s=30))
        ended: list[str] = []

        def call(text: str) -> None:
            try:
                client.chat([{"role": "user", "content": text}])
            except Aborted:
                ended.append(text)

        backing_off = threading.Thread(target=call, args=("fail",))
        backing_off.start()
        while len(server.chat_requests) < 1:  # its first attempt failed: 30 s of back-off
            time.sleep(0.01)
        threads = [threading.Thread(target=call, args=(f"q{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        while len(server.chat_requests) < 2:
            time.sleep(0.01)
        time.sleep(0.2)
        started = time.monotonic()
        client.abort()
        for t in [backing_off, *threads]:
            t.join(5)
        took = time.monotonic() - started
        release.set()
    assert took < 1.0 and sorted(ended) == ["fail", "q0", "q1", "q2"]
    assert len(server.chat_requests) == 2  # the failed one, and the one that hung


def test_complete_many_gives_each_failure_in_its_place_and_keeps_the_other_answers():
    def fail_third(req: FakeRequest):
        if req.last_user_text == "q2":
            return Reply(400, {"error": {"message": "bad item"}})
        return "ok"

    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(5)]
    with FakeOpenAIServer(fail_third) as server:
        results = dict(ChatClient(config(server, concurrency=2)).complete_many(batch))
    assert isinstance(results[2], ChatFailure) and results[2].kind == "refused"
    assert "bad item" in str(results[2])
    assert [results[i].text for i in (0, 1, 3, 4)] == ["ok"] * 4


def test_usage_is_summed_per_stage():
    tokens = {"reflect": (100, 20), "rank": (7, 3)}

    def counted(req: FakeRequest):
        prompt, done = tokens[req.last_user_text]
        return completion("x", prompt_tokens=prompt, completion_tokens=done)

    with FakeOpenAIServer(counted) as server:
        meter = UsageMeter()
        client = ChatClient(config(server, concurrency=4), usage=meter)
        answers(client, [[{"role": "user", "content": "reflect"}]] * 5, stage="optimizer.reflect")
        client.chat([{"role": "user", "content": "rank"}], stage="optimizer.rank")
        client.chat([{"role": "user", "content": "rank"}], stage="optimizer.rank")
    usage = client.usage()
    assert usage["optimizer.reflect"] == {
        "requests": 5,
        "retries": 0,
        "truncated": 0,
        "empty": 0,
        "invalid": 0,
        "failed": 0,
        "tool_calls": 0,
        "estimated": 0,
        "lost": 0,
        "prompt_tokens": 500,
        "completion_tokens": 100,
        "total_tokens": 600,
    }
    assert usage["optimizer.rank"]["total_tokens"] == 20
    assert usage["optimizer.rank"]["requests"] == 2
    restored = UsageMeter()
    restored.load_state_dict(meter.state_dict())
    assert restored.usage() == usage


def test_non_completion_reply_is_a_clear_error():
    server = FakeOpenAIServer(lambda req: {"unexpected": True})
    with server, pytest.raises(HonedError, match="not a chat completion"):
        ChatClient(config(server)).chat(USER)


def test_retry_delay_honours_retry_after_and_backs_off_with_jitter():
    rng = random.Random(0)
    assert retry_delay(0, 1.0, "7", rng) == 7.0
    assert retry_delay(3, 1.0, "0", rng) == 0.0
    assert retry_delay(0, 1.0, "100000", rng) == MAX_DELAY_S
    http_date = formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_delay(0, 1.0, http_date, rng) <= 30
    for attempt in range(4):
        delays = {retry_delay(attempt, 0.5, None, rng) for _ in range(20)}
        assert all(0.5 * 0.5 * 2**attempt <= d <= 0.5 * 2**attempt for d in delays)
        assert len(delays) > 1  # jittered
    assert retry_delay(20, 1.0, "garbage", rng) <= MAX_DELAY_S


def test_config_forbids_unknown_keys_and_validates():
    with pytest.raises(ValidationError, match="api_key"):
        ChatModelConfig(base_url="http://x/v1", model="m", api_key="sk-inline")
    with pytest.raises(ValidationError, match="must start with http"):
        ChatModelConfig(base_url="localhost:8000/v1", model="m")
    with pytest.raises(ValidationError):
        ChatModelConfig(base_url="http://x/v1", model="m", concurrency=0)
    with pytest.raises(ValidationError, match="holds spaces"):  # refused, never tidied
        ChatModelConfig(base_url=" http://x/v1/ ", model="m")
    cfg = ChatModelConfig(base_url="HTTP://X/v1/", model="m")
    assert cfg.base_url == "http://x/v1"
    assert (cfg.api_key_env, cfg.temperature, cfg.max_tokens) == (None, 0.0, None)
    assert (cfg.timeout_s, cfg.max_retries, cfg.concurrency, cfg.extra_body) == (120.0, 4, 8, {})


# ---------------------------------------------------------------- a server on a bad day


def test_a_200_that_is_not_a_chat_completion_is_retried_like_a_5xx():
    """An HTML page from a proxy with status 200 costs a retry, not the run (issue 22, 3)."""
    faults = Faults(lambda req: "fine")
    faults.force("garble")
    with FakeOpenAIServer(faults) as server, ChatClient(config(server, max_retries=2)) as client:
        assert client.chat(USER, stage="rollout") == "fine"
        usage = client.usage()["rollout"]
        assert (usage["invalid"], usage["retries"], usage["requests"], usage["failed"]) == (
            1,
            1,
            1,
            0,
        )
        faults.force("garble", times=None)
        with pytest.raises(ChatFailure, match=r"not a chat completion.*gave up after 3") as info:
            client.complete(USER, stage="rollout")
        assert info.value.kind == "gave_up"
        assert (
            client.usage()["rollout"]["invalid"] == 4 and client.usage()["rollout"]["failed"] == 1
        )


def test_an_empty_reply_is_retried_then_fails_and_every_reply_says_why_it_stopped():
    """`content: null` is retried within the attempts; still empty, `complete` fails (`chat`,
    the readers' interface, gives ""); a cut reply carries `finish_reason: length`."""
    faults = Faults(lambda req: "an answer")
    with FakeOpenAIServer(faults) as server, ChatClient(config(server, max_retries=1)) as client:
        faults.force("empty")
        reply = client.complete(USER, stage="rollout")
        assert (reply.text, reply.finish_reason, reply.truncated) == ("an answer", "stop", False)
        faults.force("empty", times=2)
        with pytest.raises(ChatFailure, match="replied with no text") as info:
            client.complete(USER, stage="rollout")
        assert info.value.kind == "empty"
        faults.force("empty", times=2)
        assert client.chat(USER, stage="rollout") == ""
        faults.force("truncate")
        cut = client.complete(USER, stage="rollout")
        assert cut.truncated and cut.finish_reason == "length" and cut.text == "an a"
        usage = client.usage()["rollout"]
        assert (usage["empty"], usage["failed"], usage["truncated"], usage["retries"]) == (
            5,
            1,
            1,
            3,
        )


def test_a_reply_cut_at_max_tokens_is_asked_again_only_when_the_caller_says_so():
    faults = Faults(lambda req: json.dumps({"edits": [{"op": "append", "content": "- A rule"}]}))
    with FakeOpenAIServer(faults) as server, ChatClient(config(server, max_tokens=64)) as client:
        faults.force("truncate")
        whole = client.complete(USER, "reflect", truncated_retries=1)
        assert not whole.truncated and json.loads(whole.text)
        faults.force("truncate", times=2)
        with pytest.raises(
            ChatFailure, match=r"cut at max_tokens \(64\) on all 2 attempts"
        ) as info:
            client.complete(USER, "reflect", truncated_retries=1)
        assert info.value.kind == "truncated"
        usage = client.usage()["reflect"]
        assert (usage["truncated"], usage["retries"], usage["failed"]) == (3, 2, 1)


def test_timeout_bounds_the_whole_request_against_a_server_that_trickles_bytes():
    """Each byte comes within any per-read timeout, the reply never within timeout_s: the
    request is cut at timeout_s, connect to last byte (issue 22, 8)."""
    faults = Faults(lambda req: "fine", trickle_s=0.2)
    faults.force("trickle")
    with FakeOpenAIServer(faults) as server:
        client = ChatClient(config(server, timeout_s=0.8, max_retries=1))
        start = time.monotonic()
        assert client.chat(USER) == "fine"  # the retry gets a whole reply
        assert time.monotonic() - start < 3
        faults.force("trickle", times=2)
        start = time.monotonic()
        with pytest.raises(ChatFailure, match=r"timed out after 0\.8s; gave up after 2"):
            client.chat(USER)
        assert time.monotonic() - start < 4  # two attempts of 0.8 s, not 2 x 40 s of bytes


def test_a_429_pauses_every_request_to_that_server_until_retry_after():
    """Client A gets a 429 with Retry-After: 0.8; a request client B sends meanwhile to the same
    server waits until then, instead of adding to the overload (issue 22, 9)."""
    arrivals: list[tuple[str, float]] = []

    def record(req: FakeRequest):
        arrivals.append((req.last_user_text, time.monotonic()))
        return "ok"

    faults = Faults(record, retry_after="0.8")
    faults.force("rate_limit", when=lambda req: req.last_user_text == "a")
    with FakeOpenAIServer(faults) as server:
        first, second = ChatClient(config(server)), ChatClient(config(server))
        thread = threading.Thread(target=first.chat, args=([{"role": "user", "content": "a"}],))
        thread.start()
        while len(server.chat_requests) < 1:
            time.sleep(0.01)
        limited = time.monotonic()
        time.sleep(0.1)
        assert second.chat([{"role": "user", "content": "b"}]) == "ok"
        thread.join()
    (b_at,) = [t for text, t in arrivals if text == "b"]
    assert b_at - limited >= 0.6


@pytest.mark.parametrize(
    "message",
    [
        {"content": "<think>The bare number? Answer: 7</think>\nalpha 7"},
        {"content": "The bare number? Answer: 7</think>alpha 7"},  # the template opened it
        {"content": "alpha 7", "reasoning_content": "The bare number? Answer: 7"},
        {"content": "alpha 7", "reasoning": "The bare number? Answer: 7"},
    ],
    ids=["think block", "closing tag only", "reasoning_content", "reasoning"],
)
def test_reasoning_is_kept_apart_from_the_answer(message):
    """What a reasoning model thinks is not its answer, wherever the server puts it (issue
    22, 15); an unclosed block (cut while thinking) leaves no answer, which is retried."""
    body = completion("")
    body["choices"][0]["message"] = {"role": "assistant", **message}
    with FakeOpenAIServer(lambda req: body) as server, ChatClient(config(server)) as client:
        reply = client.complete(USER)
    assert reply.text == "alpha 7" and reply.reasoning == "The bare number? Answer: 7"
    assert reply.message["content"] == message["content"]  # the message as sent, for callers
    thinking = completion("<think>still thinking, no answer yet", finish_reason="length")
    with FakeOpenAIServer(lambda req: thinking) as server:
        client = ChatClient(config(server, max_retries=1))
        with pytest.raises(ChatFailure) as info:
            client.complete(USER)
    assert info.value.kind == "empty"
