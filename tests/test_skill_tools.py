"""The skill loop on a `tools` environment, through a server's native tool calling: real HTTP to
a local OpenAI-compatible server whose target answers with `tool_calls`, then a final answer.

The environment is the example's shop (examples/tools/: `lookup` over a price table, `calc`),
with `max_turns: 3`. The fake target looks products up through the tools and answers with what
they returned; on sums it looks the two products up one per turn, and so runs out of turns,
unless its skill tells it to look both up in one turn. The fake reflector proposes that rule
only when the attempts it is shown hold the target's calls and the tools' results.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from openai_server import FakeOpenAIServer, FakeRequest, Reply
from skill_world import World

from honed.cli import main
from honed.envs.registry import build_env
from honed.models.chat import ChatClient, ChatModelConfig
from honed.skills.document import SkillDocument
from honed.skills.reflect import render_traces
from honed.skills.rollout import RolloutCache, TargetRunner

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tools"
PRICES: dict[str, int] = json.loads((EXAMPLE / "world.json").read_text())["prices"]
BOTH = "- Look up both products in one turn."


def rows(split: str, kinds: dict[str, int], skip: int = 0) -> list[dict[str, Any]]:
    """The first rows of each kind in the example's split, after its first `skip` rows."""
    out, left = [], dict(kinds)
    for line in (EXAMPLE / f"{split}.jsonl").read_text().splitlines()[skip:]:
        row = json.loads(line)
        if left.get(row["kind"], 0) > 0:
            left[row["kind"]] -= 1
            out.append(row)
    return out


def env_args(folder: Path) -> dict[str, Any]:
    splits = {
        "train": rows("train", {"price": 2, "times": 2, "sum": 4}),
        "validation": rows("train", {"price": 1, "times": 1, "sum": 2}, skip=400),
        "test": rows("test", {"price": 2, "times": 1, "sum": 3}),
    }
    paths = {}
    for split, data in splits.items():
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        paths[split] = str(path)
    return {
        "path": paths["train"],
        "validation_path": paths["validation"],
        "test_path": paths["test"],
        "tools": [f"{EXAMPLE}/tools.py:lookup", f"{EXAMPLE}/tools.py:calc"],
        "reward": [f"{EXAMPLE}/rewards.py:correct", f"{EXAMPLE}/rewards.py:clean_calls"],
        "reward_weights": [1.0, 0.1],
        "max_turns": 3,
        "reference_field": "reference",
    }


def call(ident: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """A `tool_calls` entry as servers send it: arguments as a JSON string."""
    return {
        "id": ident,
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }


def reply(content: str | None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def agent(req: FakeRequest) -> dict[str, Any] | Reply:
    """The fake target: the example's questions solved through tools (see the module docstring)."""
    names = sorted(t["function"]["name"] for t in req.body.get("tools", []))
    if names != ["calc", "lookup"]:
        return Reply(400, {"error": {"message": f"no tools sent: {names}"}})
    system = next((m["content"] for m in req.messages if m["role"] == "system"), "")
    question = req.last_user_text
    turn = sum(m["role"] == "assistant" for m in req.messages)
    results = [m["content"] for m in req.messages if m["role"] == "tool"]
    if (match := re.fullmatch(r"price of (\w+)\?", question)) is not None:
        return (
            reply(None, [call("a", "lookup", name=match[1])]) if turn == 0 else reply(results[-1])
        )
    if (match := re.fullmatch(r"(\d) (\w+) cost\?", question)) is not None:
        if turn == 0:
            return reply(None, [call("a", "lookup", name=match[2])])
        if turn == 1:
            return reply(None, [call("b", "calc", expression=f"{match[1]}*{results[-1]}")])
        return reply(results[-1])
    first, second = re.fullmatch(r"(\w+) \+ (\w+)\?", question).groups()
    if BOTH in system:
        steps = [[call("a", "lookup", name=first), call("b", "lookup", name=second)]]
    else:
        steps = [[call("a", "lookup", name=first)], [call("b", "lookup", name=second)]]
    if turn < len(steps):
        return reply(None, steps[turn])
    if turn == len(steps):
        return reply(None, [call("c", "calc", expression=f"{results[-2]}+{results[-1]}")])
    return reply(results[-1])


@pytest.fixture
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def runner(server: FakeOpenAIServer, folder: Path, cache: RolloutCache | None = None):
    env = build_env("tools", "shop", 0, env_args(folder))
    client = ChatClient(ChatModelConfig(base_url=server.base_url, model="target", backoff_s=0.01))
    return env, TargetRunner(client, {"shop": env}, "Follow the skill.", cache)


def test_the_target_calls_the_tools_and_the_reward_is_computed_on_its_final_answer(
    no_proxy, tmp_path
):
    with FakeOpenAIServer(agent) as server:
        env, run = runner(server, tmp_path)
        items = list(env.items("test"))
        rollouts = run.run(SkillDocument(BOTH), items, "rollout")
        requests = server.chat_requests
    assert [r.answered for r in rollouts] == [True] * len(items)
    by_kind = {item.data["kind"] for item in items}
    assert by_kind == {"price", "times", "sum"}
    for item, rollout in zip(items, rollouts, strict=True):
        assert rollout.reply == item.data["answer"]  # the tools' results, copied by the target
        assert rollout.hard == 1.0 and rollout.soft == pytest.approx(1.1)
        results = [m for m in rollout.messages if m["role"] == "tool"]
        looked = [str(PRICES[name]) for name in item.data["products"]]
        assert [m["content"] for m in results][: len(looked)] == looked  # the tools ran
        assert rollout.expected == item.data["answer"]  # the reference's final answer
    # Every request carried the schemas; results went back answering each call by its id.
    assert all(len(r.body["tools"]) == 2 for r in requests)
    later = [r for r in requests if any(m["role"] == "tool" for m in r.messages)]
    assert later
    for request in later:
        asked = {
            c["id"]
            for m in request.messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        }
        answered = {m["tool_call_id"] for m in request.messages if m["role"] == "tool"}
        assert asked == answered


def test_a_wrong_final_answer_scores_nothing_and_running_out_of_turns_too(no_proxy, tmp_path):
    def liar(req: FakeRequest) -> dict[str, Any] | Reply:
        out = agent(req)
        message = out["choices"][0]["message"] if isinstance(out, dict) else {}
        if not message.get("tool_calls"):
            message["content"] = "999"
        return out

    with FakeOpenAIServer(liar) as server:
        env, run = runner(server, tmp_path)
        items = [i for i in env.items("test") if i.data["kind"] == "price"]
        wrong = run.run(SkillDocument(BOTH), items, "rollout")
    assert all(r.hard == 0.0 and r.soft == pytest.approx(0.1) for r in wrong)  # clean calls
    with FakeOpenAIServer(agent) as server:
        env, run = runner(server, tmp_path)
        sums = [i for i in env.items("test") if i.data["kind"] == "sum"]
        out = run.run(SkillDocument("- Be careful."), sums, "rollout")
        # one lookup per turn: lookup, lookup, calc; the third turn still called a tool
        assert len(server.chat_requests) == 3 * len(sums)
    assert all(r.hard == 0.0 and r.soft == 0.0 for r in out)
    assert all(r.messages[-1]["role"] == "tool" for r in out)


def test_an_unreadable_call_is_answered_with_an_error_and_counted(no_proxy, tmp_path):
    def broken(req: FakeRequest) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in req.messages):
            bad = {
                "id": "x",
                "type": "function",
                "function": {"name": "lookup", "arguments": "{oops"},
            }
            return reply("", [bad])
        return reply("12")

    with FakeOpenAIServer(broken) as server:
        env, run = runner(server, tmp_path)
        (rollout,) = run.run(SkillDocument(BOTH), list(env.items("test"))[:1], "rollout")
        second = server.chat_requests[1]
    (tool,) = [m for m in second.messages if m["role"] == "tool"]
    assert tool["tool_call_id"] == "x" and tool["content"].startswith("Error: could not read")
    assert rollout.soft < 1.0  # no clean_calls credit for an unreadable call
    trajectory = env.score_conversations(list(env.items("test"))[:1], [rollout.messages], [False])[
        0
    ].info["episode"]
    assert trajectory["turns"][0]["format_errors"] and trajectory["stop"] == "answer"


def test_cached_conversations_are_scored_again_without_calling_the_target(no_proxy, tmp_path):
    with FakeOpenAIServer(agent) as server:
        cache = RolloutCache(tmp_path / "rollouts.jsonl")
        env, run = runner(server, tmp_path, cache)
        items = list(env.items("test"))
        first = run.run(SkillDocument(BOTH), items, "rollout")
        sent = len(server.chat_requests)
        again = TargetRunner(
            run.client,
            {"shop": env},
            "Follow the skill.",
            RolloutCache(tmp_path / "rollouts.jsonl"),
        )
        second = again.run(SkillDocument(BOTH), items, "rollout")
        assert len(server.chat_requests) == sent
    assert all(r.cached for r in second)
    assert [(r.hard, r.soft, r.messages) for r in second] == [
        (r.hard, r.soft, r.messages) for r in first
    ]
    # A cached rollout without its conversation (a plain reply) cannot be scored: asked again.
    lines = (tmp_path / "rollouts.jsonl").read_text().splitlines()
    stripped = [json.loads(line) for line in lines]
    for row in stripped:
        row["rollout"]["messages"] = None
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
    with FakeOpenAIServer(agent) as server:
        env, run = runner(server, tmp_path, RolloutCache(tmp_path / "rollouts.jsonl"))
        third = run.run(SkillDocument(BOTH), items, "rollout")
        assert server.chat_requests
    assert not any(r.cached for r in third) and all(r.hard == 1.0 for r in third)


def test_the_reflector_reads_the_calls_and_results(no_proxy, tmp_path):
    with FakeOpenAIServer(agent) as server:
        env, run = runner(server, tmp_path)
        items = [i for i in env.items("test") if i.data["kind"] == "sum"][:1]
        (rollout,) = run.run(SkillDocument("- Be careful."), items, "rollout")
    text = render_traces([rollout])
    first, second = items[0].data["products"]
    assert f'[call] lookup({{"name": "{first}"}})' in text
    assert f"[result of lookup] {PRICES[first]}" in text
    assert f'[call] lookup({{"name": "{second}"}})' in text
    assert "[call] calc(" in text and "Target's conversation" in text


class ToolWorld(World):
    """`World`'s reflector, with the tool-using target; reflecting on failures proposes the
    one-turn rule only when the attempts show the calls and their results."""

    def __init__(self) -> None:
        super().__init__()
        self.reflect_prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> Reply | str | dict[str, Any]:
        if req.body["model"] == "target":
            self.count("target")
            return agent(req)
        return super().__call__(req)

    def reflect_failures(self, text: str) -> str:
        self.reflect_prompts.append(text)
        seen = "[call] lookup(" in text and "[result of lookup] " in text
        edits = [{"op": "append", "content": BOTH}] if seen else []
        return json.dumps({"summary": "sums ran out of turns", "edits": edits})


def test_skills_train_on_a_tools_environment_learns_the_one_turn_rule(no_proxy, tmp_path):
    world = ToolWorld()
    with FakeOpenAIServer(world, models=("target", "reflector")) as server:
        chat = {"base_url": server.base_url, "backoff_s": 0.01, "max_retries": 1}
        config = {
            "seed": 1,
            "envs": [{"name": "shop", "type": "tools", "args": env_args(tmp_path)}],
            "target": {**chat, "model": "target"},
            "reflector": {**chat, "model": "reflector"},
            "skill": {"init": "# Shop skill\n\n- Use the tools.\n"},
            "train": {"epochs": 1, "batch_size": 8, "minibatch_size": 4, "steps_per_epoch": 2},
            "edit_budget": {"mode": "constant", "max_lr": 1, "min_lr": 1},
        }
        path = tmp_path / "skills.yaml"
        path.write_text(yaml.safe_dump(config))
        run = tmp_path / "run"
        assert main(["skills", "train", str(path), "--run-dir", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["selection"]["best"]["hard"] > summary["selection"]["initial"]["hard"]
    assert summary["eval"]["best"]["hard"] == 1.0 > summary["eval"]["initial"]["hard"]
    assert BOTH in (run / "best_skill.md").read_text()
    assert world.reflect_prompts and "[result of lookup]" in world.reflect_prompts[0]
