"""Target rollouts and their cache; minibatches, the step buffer and reflection parsing;
consolidation's outcome classes."""

from __future__ import annotations

import json
import random

import pytest
from openai_server import FakeOpenAIServer
from skill_world import KINDS, World, rule, write_dataset

from honed.envs.registry import build_env
from honed.models.chat import ChatClient, ChatModelConfig
from honed.skills.consolidate import classify, propose
from honed.skills.document import SkillDocument
from honed.skills.edits import Edit
from honed.skills.reflect import (
    FAILURE,
    SUCCESS,
    Minibatch,
    StepBuffer,
    minibatches,
    parse_reflection,
    reflection_prompt,
)
from honed.skills.rollout import (
    Rollout,
    RolloutCache,
    TargetRunner,
    aggregate,
    metrics,
    system_prompt,
)


@pytest.fixture(autouse=True)
def _direct_to_localhost(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def world_server():
    world = World()
    with FakeOpenAIServer(world, models=("target", "reflector")) as server:
        yield world, server


def qa_env(tmp_path):
    paths = write_dataset(tmp_path)
    args = {
        "path": paths["train"],
        "validation_path": paths["validation"],
        "test_path": paths["test"],
    }
    return build_env("qa", "qa", seed=0, args=args)


def runner(server, env, cache, **target) -> TargetRunner:
    config = ChatModelConfig(base_url=server.base_url, model="target", **target)
    return TargetRunner(ChatClient(config), {"qa": env}, "Follow the skill.", cache)


def test_the_skill_is_the_system_prompt_and_an_empty_skill_sends_none(world_server, tmp_path):
    _, server = world_server
    env = qa_env(tmp_path)
    items = env.items("validation")
    run = runner(server, env, RolloutCache())
    empty = run.run(SkillDocument(""), items, "gate")
    assert all(r.hard == 0.0 and r.soft == pytest.approx(2 / 3) for r in empty)
    assert all(m["role"] == "user" for req in server.chat_requests for m in req.messages)
    skill = SkillDocument("\n".join(rule(k) for k in KINDS[:3]) + "\n")
    solved = run.run(skill, items, "gate")
    assert aggregate(solved).hard == pytest.approx(0.5)
    assert metrics(solved)["qa/alpha/hard"] == 1.0 and metrics(solved)["qa/zeta/hard"] == 0.0
    assert system_prompt("Follow the skill.", skill).startswith(
        "Follow the skill.\n\n- For [alpha]"
    )
    assert solved[0].expected == items[0].data["answer"] and solved[0].kind == items[0].data["kind"]


def test_a_chat_prompt_keeps_its_turns_and_its_system_message_follows_the_skill(
    world_server, tmp_path
):
    _, server = world_server
    run = runner(server, qa_env(tmp_path), RolloutCache())
    skill = SkillDocument("- Be brief.\n")
    chat = [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "quatre"},
        {"role": "user", "content": "3 + 5?"},
    ]
    assert run.messages(skill, chat) == [
        {"role": "system", "content": "Follow the skill.\n\n- Be brief.\n\nAnswer in French."},
        *chat[1:],
    ]
    assert run.messages(skill, "3 + 5?")[1:] == [{"role": "user", "content": "3 + 5?"}]
    bare = TargetRunner(run.client, run.envs, "", RolloutCache())
    assert bare.messages(SkillDocument(""), chat[1:]) == chat[1:]  # nothing to put in a system turn


def test_cache_hits_make_no_target_calls_for_the_same_skill_and_items(world_server, tmp_path):
    world, server = world_server
    env = qa_env(tmp_path)
    items = env.items("validation")
    cache = RolloutCache(tmp_path / "cache" / "rollouts.jsonl")
    run = runner(server, env, cache)
    skill = SkillDocument(rule("beta") + "\n")
    first = run.run(skill, items + items[:3], "gate")  # an item twice in a batch: asked once
    assert world.calls["target"] == len(items)
    again = run.run(skill, items, "gate")
    assert world.calls["target"] == len(items)
    assert all(r.cached for r in again) and not any(r.cached for r in first)
    assert [r.reply for r in again] == [r.reply for r in first[: len(items)]]
    assert cache.hits >= len(items)

    run.run(SkillDocument(rule("gamma") + "\n"), items[:2], "gate")  # another skill: new calls
    assert world.calls["target"] == len(items) + 2

    # A resumed run reads the cache from disk and spends nothing on known answers.
    reloaded = runner(server, env, RolloutCache(tmp_path / "cache" / "rollouts.jsonl"))
    reloaded.run(skill, items, "gate")
    assert world.calls["target"] == len(items) + 2

    # Another target model (or preamble) must not be served these answers.
    other = runner(server, env, RolloutCache(cache.path), temperature=0.7)
    other.run(skill, items[:1], "gate")
    assert world.calls["target"] == len(items) + 3


def test_cached_replies_are_scored_again_not_taken_at_the_files_word(world_server, tmp_path):
    """A crafted cache claiming success for a wrong reply reports the reply's real score."""
    _, server = world_server
    env = qa_env(tmp_path)
    items = env.items("validation")[:3]
    cache = RolloutCache(tmp_path / "rollouts.jsonl")
    run = runner(server, env, cache)
    skill = SkillDocument("")
    first = run.run(skill, items, "gate")
    assert all(r.hard == 0.0 for r in first)
    digest = f"{run.fingerprint}-{skill.content_hash}"
    lies = [
        Rollout(r.env, r.item_key, r.prompt, "no idea", 1.0, 1.0, r.expected, r.kind) for r in first
    ]
    cache.put_many(digest, lies)
    crafted = runner(server, env, RolloutCache(tmp_path / "rollouts.jsonl"))
    again = crafted.run(skill, items, "gate")
    assert all(r.cached and r.reply == "no idea" and r.hard == 0.0 for r in again)


def test_a_cache_line_cut_short_by_a_crash_is_dropped(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    good = Rollout("qa", "qa:1", "q", "a", 1.0, 1.0)
    RolloutCache(path).put_many("k", [good])
    with path.open("a") as fh:
        fh.write('{"key": "k/qa/qa:2", "rollout": {"env": "q')
    cache = RolloutCache(path)
    assert len(cache) == 1 and cache.get("k", "qa", "qa:1") == good
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 1


def rollout(key: str, hard: float, kind: str = "alpha") -> Rollout:
    return Rollout("qa", key, f"[{kind}] task {key}", "reply", hard, hard, "gold", kind)


def test_minibatches_split_failures_and_successes_and_drop_repeats():
    rollouts = [rollout(f"f{i}", 0.0) for i in range(5)] + [rollout(f"s{i}", 1.0) for i in range(3)]
    batches = minibatches(rollouts + rollouts[:2], 2, False, random.Random(0))
    assert [(b.source, len(b.rollouts)) for b in batches] == [
        (FAILURE, 2),
        (FAILURE, 2),
        (FAILURE, 1),
        (SUCCESS, 2),
        (SUCCESS, 1),
    ]
    assert sorted(r.item_key for b in batches for r in b.rollouts) == sorted(
        r.item_key for r in rollouts
    )
    only = minibatches(rollouts, 8, True, random.Random(0))
    assert [b.source for b in only] == [FAILURE]


def test_rejected_edits_with_scores_reach_later_reflections_until_cleared():
    buffer = StepBuffer()
    assert "first step of the epoch" in buffer.render()
    buffer.add_rejected(2, [Edit("append", "", "- Never answer")], 0.5, 0.25, "fell")
    prompt = reflection_prompt(
        SkillDocument("- Be brief.\n"), Minibatch(FAILURE, [rollout("a", 0.0)]), buffer, 3
    )
    assert prompt.startswith("# honed reflector: reflect on failures")
    assert "score 0.5000 -> 0.2500" in prompt and "- Never answer" in prompt
    assert "At most 3 edits" in prompt and "Expected answer:\ngold" in prompt
    restored = StepBuffer()
    restored.load_state_dict(json.loads(json.dumps(buffer.state_dict())))
    assert restored.render() == buffer.render()
    buffer.clear()
    assert "first step of the epoch" in buffer.render()


def test_reflection_replies_are_parsed_and_capped_never_raised():
    batch = Minibatch(FAILURE, [rollout("a", 0.0)])
    edits = [{"op": "append", "content": f"- rule {i}"} for i in range(4)]
    reply = "Here you go:\n```json\n" + json.dumps({"summary": "s", "edits": edits}) + "\n```"
    parsed = parse_reflection(batch, reply, max_edits=2)
    assert [e.content for e in parsed.edits] == ["- rule 0", "- rule 1"]
    assert parsed.summary == "s" and "kept the first 2 of 4" in parsed.problems[0]
    broken = parse_reflection(batch, "I cannot help with that.", 2)
    assert broken.edits == [] and broken.problems


class FixedReply:
    def __init__(self, reply: str) -> None:
        self.reply = reply

    def ask(self, prompt, stage):
        return self.reply


def test_consolidation_classes_and_the_rewritten_region():
    before = [rollout("a", 0.0), rollout("b", 1.0), rollout("c", 0.0), rollout("d", 1.0)]
    after = [rollout("a", 1.0), rollout("b", 0.0), rollout("c", 0.0), rollout("d", 1.0)]
    classes = classify(before, after)
    assert {k: [a.item_key for _, a in v] for k, v in classes.items()} == {
        "improved": ["a"],
        "regressed": ["b"],
        "persistent_failure": ["c"],
        "stable_success": ["d"],
    }
    skill = SkillDocument("- Be brief.\n")
    result = propose(FixedReply('{"guidance": "- Think first."}'), skill, "guidance", before, after)
    assert result.candidate.region("guidance").content == "- Think first."
    assert result.counts == {k: 1 for k in classes}
    bad = propose(FixedReply("<!-- protected:x -->"), skill, "guidance", before, after)
    assert bad.candidate is None and bad.problems
