"""The skill loop against a server on a bad day (issue 22): truncated, empty, garbled and failed
replies, skills and prompts bounded, cost known before and capped during, reasoning models,
early stopping, and run files as any tool writes them. Every test talks HTTP to the
fault-injecting server of `fault_server.py` on 127.0.0.1; `skill_world.py` plays the models."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import time
from pathlib import Path

import pytest
import yaml
from fault_server import GUIDANCE as CONVENTIONS_GUIDANCE
from fault_server import ROOT, RULES, RUN_KINDS, ConventionsWorld, Faults
from openai_server import FakeOpenAIServer, FakeRequest, completion
from skill_world import GUIDANCE, HARMFUL, INITIAL_SKILL, KINDS, World, rule, write_config
from test_skill_rollout import qa_env

from honed.cli import main
from honed.models.chat import ChatClient, ChatModelConfig
from honed.skills.document import SkillDocument
from honed.skills.rollout import RolloutCache, TargetRunner, aggregate
from honed.types import prompt_text

SHORT = {"consolidation": {"enabled": False}}
WORLD_LINES = {*INITIAL_SKILL.splitlines(), HARMFUL, GUIDANCE, *(rule(k) for k in KINDS), ""}


@pytest.fixture(autouse=True)
def _direct_to_localhost(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def serve(handler) -> FakeOpenAIServer:
    return FakeOpenAIServer(handler, models=("target", "reflector"))


def train(config: Path, run: Path, *flags: str) -> int:
    return main(["skills", "train", str(config), "--run-dir", str(run), "--quiet", *flags])


def read(path: Path):
    return json.loads(path.read_text())


def first_line(req: FakeRequest) -> str:
    return (req.last_user_text or "").splitlines()[0] if req.last_user_text else ""


def reflecting(req: FakeRequest) -> bool:
    return req.body["model"] == "reflector" and "reflect on failures" in first_line(req)


def one_request(predicate):
    """A `when` for `Faults.force` that matches the first request `predicate` accepts, and
    that request's retries, but no other."""
    chosen: list[str] = []

    def when(req: FakeRequest) -> bool:
        if not predicate(req):
            return False
        if not chosen:
            chosen.append(req.last_user_text)
        return req.last_user_text == chosen[0]

    return when


def skill_texts(run: Path) -> list[str]:
    """Every skill the run wrote: versions, candidates, the best skill."""
    paths = [*run.glob("skills/*.md"), *run.glob("steps/*/candidate_skill.md")]
    return [p.read_text() for p in [*paths, run / "best_skill.md"]]


def foreign_lines(run: Path) -> list[str]:
    """Lines of the run's skills that no whole reply of the world could have written."""
    return [
        line for text in skill_texts(run) for line in text.splitlines() if line not in WORLD_LINES
    ]


def totals(summary: dict, counter: str, stages: tuple[str, ...] | None = None) -> float:
    return sum(
        row.get(counter, 0)
        for stage, row in summary["tokens"].items()
        if stages is None or stage in stages
    )


def with_old_names(config: Path) -> Path:
    """The config with its reflector section under its earlier name, `optimizer`."""
    data = yaml.safe_load(config.read_text())
    data = {("optimizer" if k == "reflector" else k): v for k, v in data.items()}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


# ---------------------------------------------------------------- 1, 6: the reflector's replies


def test_a_reflection_cut_at_max_tokens_is_asked_again_and_never_parsed(tmp_path):
    """json-repair would make a whole-looking edit of the cut reply's last, half-written rule;
    the loop asks again and applies only whole edits (issue 22, 1)."""
    faults = Faults(World())
    faults.force("truncate", when=reflecting)
    with serve(faults) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 1}, **SHORT)
        assert train(config, tmp_path / "run") == 0
    (stump,) = [text for model, text in faults.cut_texts if model == "reflector"]
    assert '"content": "- ' in stump  # cut inside an edit, where the damage would be
    run = tmp_path / "run"
    assert foreign_lines(run) == []
    summary = read(run / "summary.json")
    reflect = summary["tokens"]["reflect"]
    assert (reflect["truncated"], reflect["retries"], reflect["failed"]) == (1, 1, 0)
    assert read(run / "steps" / "step_0001" / "step.json")["reflections_failed"] == 0


def test_a_reflection_cut_twice_fails_alone_naming_the_key_as_the_config_spells_it(
    tmp_path, caplog
):
    """Still cut when asked again: that minibatch's proposals are dropped (never parsed), the
    warning names `optimizer.max_tokens` for a config that says `optimizer`, and the step goes
    on with the other minibatches (issue 22, 1 and 6)."""
    faults = Faults(World())
    faults.force("truncate", times=2, when=one_request(reflecting))
    with serve(faults) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1},
            reflector={"model": "reflector", "max_tokens": 256},
            **SHORT,
        )
        with_old_names(config)
        with caplog.at_level(logging.WARNING):
            assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    reflections = read(run / "steps" / "step_0001" / "proposed_edits.json")
    failed = [r for r in reflections if r["error"]]
    assert len(failed) == 1 and len(reflections) > 1
    assert failed[0]["edits"] == [] and failed[0]["reply"] == ""
    assert "raise optimizer.max_tokens (now reflector.max_tokens)" in failed[0]["error"]
    assert any(
        "cut at max_tokens (256) twice" in r.getMessage()
        and "optimizer.max_tokens (now reflector.max_tokens)" in r.getMessage()
        for r in caplog.records
    )
    record = read(run / "steps" / "step_0001" / "step.json")
    assert record["reflections_failed"] == 1 and record["proposed"] > 0
    assert record["reflection_errors"] == [failed[0]["error"]]
    assert record["outcome"] in ("accepted", "rejected")
    reflect = read(run / "summary.json")["tokens"]["reflect"]
    assert (reflect["truncated"], reflect["failed"]) == (2, 1)
    assert foreign_lines(run) == []


def test_a_reflector_that_keeps_failing_skips_steps_and_stops_the_run_after_three(tmp_path, capsys):
    """Every reflection fails: each step is skipped (no candidate, nothing else asked), the
    third in a row stops the run with its state saved and exit code 2; --resume goes on once
    the server is back (issue 22, 6)."""
    faults = Faults(World())
    faults.force("error", times=None, model="reflector")
    with serve(faults) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 5}, **SHORT)
        run = tmp_path / "run"
        assert train(config, run) == 2
        err = capsys.readouterr().err
        assert "every reflection failed in 3 steps in a row" in err and "overloaded" in err
        assert "continue with --resume once it is fixed" in err
        assert read(run / "state.json")["step"] == 3
        summary = read(run / "summary.json")
        assert summary["stopped"]["kind"] == "reflector" and summary["skipped_steps"] == [1, 2, 3]
        assert summary["eval"] == {} and summary["eval_skipped"]
        for n in (1, 2, 3):
            record = read(run / "steps" / f"step_{n:04d}" / "step.json")
            assert record["outcome"] == "skipped" and record["applied"] == 0
            assert not (run / "steps" / f"step_{n:04d}" / "candidate_skill.md").exists()
        ranks = [r for r in server.chat_requests if "rank proposed" in first_line(r)]
        assert ranks == []
        faults.clear()
        assert train(config, run, "--resume") == 0
    summary = read(run / "summary.json")
    assert summary["stopped"] is None and summary["steps"] == 5
    assert summary["skipped_steps"] == [1, 2, 3] and summary["accepted_steps"]


# ---------------------------------------------------------------- 2, 4, 7: the target's replies


def test_an_empty_target_reply_is_retried_then_failed_not_cached_and_not_scored(tmp_path):
    """An empty reply is asked again within the retries; still empty, the rollout fails: no
    cache entry, no score, counted; the next run asks again (issue 22, 2)."""
    faults = Faults(World())
    env = qa_env(tmp_path)
    items = env.items("validation")
    skill = SkillDocument(INITIAL_SKILL)
    with serve(faults) as server:
        config = ChatModelConfig(
            base_url=server.base_url, model="target", max_retries=1, backoff_s=0.01
        )
        cache = RolloutCache(tmp_path / "cache.jsonl")
        runner = TargetRunner(ChatClient(config), {"qa": env}, "Follow the skill.", cache)
        alpha = next(i for i in items if "[alpha]" in prompt_text(env.prompt(i)))
        question = prompt_text(env.prompt(alpha))
        faults.force("empty", times=2, when=lambda req: question in req.last_user_text)
        rollouts = runner.run(skill, items, "gate")
        lost = [r for r in rollouts if not r.answered]
        assert [r.item_key for r in lost] == [alpha.key] and "replied with no text" in lost[0].error
        scores = aggregate(rollouts)
        assert (scores.n, scores.failed) == (len(items) - 1, 1)
        assert scores.hard == pytest.approx(1 / (len(items) - 1))  # one alpha right, one left out
        lines = [json.loads(x) for x in (tmp_path / "cache.jsonl").read_text().splitlines()]
        assert len(lines) == len(items) - 1 and all(x["rollout"]["reply"] for x in lines)
        usage = runner.client.usage()["gate"]
        assert (usage["empty"], usage["failed"], usage["retries"]) == (2, 1, 1)
        again = runner.run(skill, items, "gate")  # asked again, answered this time
        assert all(r.answered for r in again) and not again[items.index(alpha)].cached
        # an empty answer that an earlier honed cached is no answer either: asked again
        lines = (tmp_path / "cache.jsonl").read_text().splitlines()
        emptied = [json.loads(line) for line in lines]
        emptied[0]["rollout"]["reply"] = ""
        (tmp_path / "cache.jsonl").write_text("".join(json.dumps(x) + "\n" for x in emptied))
        runner.cache = RolloutCache(tmp_path / "cache.jsonl")
        asked = len(server.chat_requests)
        reread = runner.run(skill, items, "gate")
        assert len(server.chat_requests) == asked + 1 and sum(not r.cached for r in reread) == 1


def test_empty_target_replies_beyond_the_fraction_stop_the_run_and_resume_goes_on(tmp_path, capsys):
    """More than target.max_failed_fraction of a step's replies empty: the step is abandoned,
    the run stops (exit 2) with one message, the state after the last finished step is saved
    and the summary says why; with the server fixed, --resume finishes the run (issue 22, 2)."""
    world = World()
    faults = Faults(world)
    with serve(faults) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 3}, **SHORT)
        run = tmp_path / "run"
        assert train(config, run, "-o", "train.max_steps=1") == 0
        faults.force("empty", times=None, model="target")
        assert train(config, run, "--resume") == 2
        err = capsys.readouterr().err
        assert "the target server is misbehaving" in err and "replied with no text" in err
        assert "target.max_failed_fraction = 0.2" in err
        assert read(run / "state.json")["step"] == 1
        assert not (run / "steps" / "step_0002").exists()
        assert read(run / "summary.json")["stopped"]["kind"] == "server"
        cached = [
            json.loads(x) for x in (run / "cache" / "rollouts.jsonl").read_text().splitlines()
        ]
        assert all(x["rollout"]["reply"].strip() for x in cached)
        faults.clear()
        assert train(config, run, "--resume") == 0
    summary = read(run / "summary.json")
    assert summary["steps"] == 3 and summary["stopped"] is None and summary["eval"]


def test_truncated_target_replies_are_scored_and_cached_as_given_with_one_warning(tmp_path, caplog):
    """A reply cut at the target's max_tokens is a real answer under the cap: scored, cached,
    counted; steps where more than 10 % were cut warn once to raise target.max_tokens (issue
    22, 4)."""
    faults = Faults(World())
    faults.force("truncate", times=None, model="target")
    with serve(faults) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 2},
            target={"model": "target", "max_tokens": 16},
            **SHORT,
        )
        with caplog.at_level(logging.WARNING):
            assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    warned = [
        r.getMessage() for r in caplog.records if "were cut at max_tokens (16)" in r.getMessage()
    ]
    assert len(warned) == 1 and "raise target.max_tokens" in warned[0]
    records = [read(d / "step.json") for d in sorted((run / "steps").iterdir())]
    assert all(r["target_truncated"] > 0.1 * r["target_replies"] for r in records)
    rollouts = read(run / "steps" / "step_0001" / "rollouts.json")
    assert rollouts and all(r["truncated"] and r["reply"] for r in rollouts)
    cached = [
        json.loads(x)["rollout"]
        for x in (run / "cache" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert cached and all(r["truncated"] for r in cached)
    summary = read(run / "summary.json")
    assert totals(summary, "truncated") == faults.total("truncate") > 0
    assert totals(summary, "failed") == 0


def test_every_answer_is_cached_the_moment_it_arrives(tmp_path):
    """The batch's last request waits until the others' answers are in the cache file, then
    fails: they were written as they came, not at the end of the batch (issue 22, 7)."""
    env = qa_env(tmp_path)
    items = env.items("validation")[:6]
    cache_file = tmp_path / "cache.jsonl"
    last = prompt_text(env.prompt(items[-1]))
    seen: list[int] = []

    def handler(req: FakeRequest):
        if last in req.last_user_text:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                lines = cache_file.read_text().splitlines() if cache_file.exists() else []
                if len(lines) == len(items) - 1:
                    break
                time.sleep(0.02)
            seen.append(len(lines))
            return completion("", finish_reason="stop") | {"choices": []}  # garbled
        return World.target(req)

    with serve(handler) as server:
        config = ChatModelConfig(
            base_url=server.base_url, model="target", max_retries=0, concurrency=6
        )
        runner = TargetRunner(ChatClient(config), {"qa": env}, "", RolloutCache(cache_file))
        rollouts = runner.run(SkillDocument(INITIAL_SKILL), items, "gate")
    assert seen == [len(items) - 1]
    assert [r.answered for r in rollouts] == [True] * (len(items) - 1) + [False]
    assert len(RolloutCache(cache_file)) == len(items) - 1


# ---------------------------------------------------------------- 10: merges that invent


class InventingMerge(World):
    INVENTED = "- Always answer in French, whatever the question."

    def merge(self, text: str) -> str:
        merged = json.loads(super().merge(text))["edits"]
        invented = [
            {"op": "append", "content": self.INVENTED, "sources": [1]},  # claims a proposal
            {"op": "append", "content": "- Spell every number out in words."},  # claims none
        ]
        return json.dumps({"edits": invented + merged})


def test_a_merged_edit_that_no_proposal_supports_is_dropped_and_counted(tmp_path):
    """With `train.merge: llm`, the merge reply's own ideas never reach a candidate, whatever
    sources they claim (issue 22, 10)."""
    with serve(InventingMerge()) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 2, "merge": "llm", "rank": "deterministic"},
            edit_budget={"mode": "constant", "max_lr": 8},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 0
    run = tmp_path / "run"
    merged = read(run / "steps" / "step_0001" / "merged_edits.json")
    assert merged["method"] == "llm"
    assert [d["edit"]["content"] for d in merged["dropped"]] == [
        InventingMerge.INVENTED,
        "- Spell every number out in words.",
    ]
    assert "1 proposed edit" not in json.dumps(merged["dropped"])
    assert read(run / "steps" / "step_0001" / "step.json")["merge_dropped"] == 2
    assert all("French" not in text and "words." not in text for text in skill_texts(run))


# ---------------------------------------------------------------- 11, 12: bounds


class Runaway(World):
    """A reflector that proposes a 30,000-character rule once, and a target whose failed
    answers run to 10,000 characters."""

    HUGE = "- " + "Always double-check the question before answering. " * 600

    def reflect_failures(self, text: str) -> str:
        data = json.loads(super().reflect_failures(text))
        data["edits"].insert(0, {"op": "append", "content": self.HUGE})
        return json.dumps(data)

    @staticmethod
    def target(req: FakeRequest) -> str:
        answer = World.target(req)
        if answer.startswith("Answer: ") and " " not in answer.removeprefix("Answer: "):
            return "Let me think. " * 700 + answer  # a bare number: a failure, at length
        return answer


def test_an_edit_longer_than_max_edit_chars_is_skipped(tmp_path):
    with serve(Runaway()) as server:
        config = write_config(tmp_path, server.base_url, train={"max_steps": 1}, **SHORT)
        assert train(config, tmp_path / "run") == 0
    report = read(tmp_path / "run" / "steps" / "step_0001" / "apply_report.json")
    skipped = [e for e in report["edits"] if e["status"] == "skipped"]
    assert any("more than skill.max_edit_chars (2000)" in e["reason"] for e in skipped)
    assert all(len(t) < 2_000 for t in skill_texts(tmp_path / "run"))


def test_a_candidate_longer_than_max_chars_is_rejected_before_the_gate(tmp_path):
    """The 30,000-character candidate is never sent to the target (whose context it would
    overflow, and with it the run and every resume), and the run goes on (issue 22, 11)."""
    with serve(Runaway()) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 2},
            skill={"init": INITIAL_SKILL, "max_edit_chars": 100_000},
            edit_budget={"mode": "constant", "max_lr": 8},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 0
        systems = [
            m["content"]
            for r in server.chat_requests
            if r.body["model"] == "target"
            for m in r.messages
            if m["role"] == "system"
        ]
    assert max(len(s) for s in systems) < 20_000
    gate = read(tmp_path / "run" / "steps" / "step_0001" / "gate.json")
    assert gate["outcome"] == "rejected" and "more than skill.max_chars (20000)" in gate["reason"]
    assert gate["decision"] is None  # never scored
    assert read(tmp_path / "run" / "summary.json")["steps"] == 2


def test_evidence_is_cut_and_reflection_prompts_stay_under_max_prompt_tokens(tmp_path):
    """The 10,000-character replies reach the reflector as head + marker + tail within
    train.max_evidence_chars; with optimizer.max_prompt_tokens (the old spelling) a minibatch
    shows fewer attempts, said in the step record (issue 22, 12)."""
    with serve(Runaway()) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1, "minibatch_size": 4, "max_evidence_chars": 500},
            reflector={"model": "reflector", "max_prompt_tokens": 700},
            **SHORT,
        )
        with_old_names(config)
        assert train(config, tmp_path / "run") == 0
        prompts = [r for r in server.chat_requests if reflecting(r)]
    assert prompts
    for req in prompts:
        replies = re.findall(
            r"Target's reply[^\n]*:\n(.*?)\n\nExpected answer", req.last_user_text, re.S
        )
        assert replies and all(len(reply) <= 500 for reply in replies)
        assert "characters left out ...]" in req.last_user_text
        assert len(req.last_user_text.split()) <= 700  # the fake server's token count
    record = read(tmp_path / "run" / "steps" / "step_0001" / "step.json")
    assert record["attempts_left_out"] > 0
    reflections = read(tmp_path / "run" / "steps" / "step_0001" / "proposed_edits.json")
    assert any(
        "within optimizer.max_prompt_tokens (now reflector.max_prompt_tokens)" in p
        for r in reflections
        for p in r["problems"]
    )


# ---------------------------------------------------------------- 13, 14: cost


def test_dry_run_checks_the_servers_prints_the_cost_and_writes_nothing(
    tmp_path, capsys, monkeypatch
):
    """The most calls per stage, tokens from the first step's prompts, USD with a price; no
    chat request, no file; and a real run of the same config stays within the calls (issue
    22, 13)."""
    monkeypatch.setenv("COLUMNS", "200")  # one line per table row
    world = World()
    with serve(world) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 3, "merge": "llm"},
            target={"model": "target", "max_tokens": 32, "price": {"input": 0.5, "output": 1.5}},
            reflector={
                "model": "reflector",
                "max_tokens": 512,
                "price": {"input": 3, "output": 15},
            },
            budget={"max_usd": 0.001},
        )
        run = tmp_path / "run"
        capsys.readouterr()
        assert main(["skills", "train", str(config), "--run-dir", str(run), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert not run.exists() and server.chat_requests == []
        assert {r.path for r in server.requests} == {"/v1/models"}
        rows = {
            cells[0]: cells[1:]
            for line in out.splitlines()
            if (cells := [c.strip() for c in line.strip("│┃ ").split("│")]) and len(cells) == 9
        }
        for stage in ("rollout", "gate", "reflect", "merge", "rank", "consolidate", "eval"):
            assert stage in rows, out
        assert 0 < float(rows["total"][6]) < float(rows["total"][7])  # USD expected, at most
        assert "budget.max_usd 0.001 USD: the run is expected to reach it" in out
        assert train(config, run, "-o", "budget.max_usd=null") == 0
    used = read(run / "summary.json")["tokens"]
    for stage, row in used.items():
        assert row["requests"] <= int(rows[stage][2]), stage


def test_a_budget_stops_the_run_in_its_step_and_a_larger_one_resumes_it(tmp_path, capsys):
    """budget.max_requests: the run stops before the request that would pass it, inside the
    step (recorded as stopped, the last finished step's state saved), the summary says which
    budget, no held-out evaluation spends more; resuming with the same budget does nothing,
    with a larger one ends as an uncapped run (issue 22, 14; issue 36: no step's overshoot)."""
    with serve(World()) as server:
        (tmp_path / "full").mkdir()
        full = write_config(tmp_path / "full", server.base_url)
        assert train(full, tmp_path / "full" / "run") == 0
        capped = write_config(tmp_path, server.base_url, budget={"max_requests": 40})
        run = tmp_path / "run"
        assert train(capped, run) == 0
        summary = read(run / "summary.json")
        assert summary["stopped"]["kind"] == "budget"
        assert "budget.max_requests reached" in summary["stopped"]["reason"]
        assert summary["eval"] == {} and "honed skills eval" in summary["eval_skipped"]
        assert totals(summary, "requests") == 40 and summary["steps"] < 6
        cut = read(run / "steps" / f"step_{summary['steps'] + 1:04d}" / "step.json")
        assert cut["outcome"] == "stopped"
        files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        capsys.readouterr()
        assert main(["skills", "train", str(capped), "--run-dir", str(run), "--resume"]) == 0
        assert "stopped (budget.max_requests reached" in capsys.readouterr().out
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files
        assert train(capped, run, "--resume", "-o", "budget.max_requests=100000") == 0
    resumed, uncapped = read(run / "summary.json"), read(tmp_path / "full" / "run" / "summary.json")
    assert resumed["stopped"] is None and resumed["steps"] == 6 and resumed["eval"]
    assert (run / "best_skill.md").read_text() == (
        tmp_path / "full" / "run" / "best_skill.md"
    ).read_text()
    assert resumed["accepted_steps"] == uncapped["accepted_steps"]
    assert totals(resumed, "requests") == totals(uncapped, "requests")  # nothing paid twice


def test_a_budget_spent_in_the_last_step_skips_the_evaluation_until_it_is_raised(tmp_path):
    with serve(World()) as server:
        (tmp_path / "free").mkdir()
        free = write_config(tmp_path / "free", server.base_url, train={"max_steps": 1}, **SHORT)
        assert train(free, tmp_path / "free" / "run") == 0
        used = read(tmp_path / "free" / "run" / "summary.json")
        steps_only = totals(used, "requests") - used["tokens"]["eval"]["requests"]
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1},
            budget={"max_requests": steps_only},
            **SHORT,
        )
        run = tmp_path / "run"
        assert train(config, run) == 0  # the step fits exactly; the evaluation does not
        summary = read(run / "summary.json")
        assert summary["steps"] == 1 and summary["stopped"]["kind"] == "budget"
        assert summary["eval"] == {}
        assert train(config, run, "--resume") == 0
        assert read(run / "summary.json") == summary  # nothing to do
        assert train(config, run, "--resume", "-o", "budget.max_requests=1000") == 0
    summary = read(run / "summary.json")
    assert summary["steps"] == 1 and summary["stopped"] is None and summary["eval"]["best"]


def test_max_usd_needs_a_price_for_both_models(tmp_path, capsys):
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", budget={"max_usd": 5})
    assert train(config, tmp_path / "run") == 2
    assert "budget.max_usd needs a price for each model: set target.price and reflector.price" in (
        capsys.readouterr().err
    )


# ---------------------------------------------------------------- 15, 16


class Thinking(World):
    """A reasoning model as the target: it thinks aloud (a wrong 'Answer:' line included), in
    a <think> block or a reasoning_content field, then answers without the marker."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def target(self, req: FakeRequest):
        answer = World.target(req).removeprefix("Answer: ")
        number = re.search(r"item (\d+)", req.last_user_text).group(1)
        thought = f"Perhaps the bare number.\nAnswer: {number}\nNo: the skill decides."
        if self.where == "think":
            return f"<think>{thought}</think>\n{answer}"
        body = completion(answer)
        body["choices"][0]["message"]["reasoning_content"] = thought
        return body


@pytest.mark.parametrize("where", ["think", "reasoning_content"])
@pytest.mark.parametrize("show", [False, True])
def test_a_reasoning_models_answer_is_scored_and_its_reasoning_shown_only_if_asked(
    tmp_path, where, show
):
    """The environment scores the answer only (the thought's 'Answer: 7' would fail every
    item); the reasoning is kept in the rollouts and shown to the reflector, cut like other
    evidence, with train.show_reasoning (issue 22, 15)."""
    with serve(Thinking(where)) as server:
        config = write_config(
            tmp_path,
            server.base_url,
            train={"max_steps": 1, "show_reasoning": show},
            **SHORT,
        )
        assert train(config, tmp_path / "run") == 0
        prompts = [r.last_user_text for r in server.chat_requests if reflecting(r)]
    summary = read(tmp_path / "run" / "summary.json")
    assert summary["selection"]["initial"]["hard"] == pytest.approx(1 / 6)  # alpha is right
    rollouts = read(tmp_path / "run" / "steps" / "step_0001" / "rollouts.json")
    assert all(r["reasoning"].startswith("Perhaps the bare number.") for r in rollouts)
    assert all("<think>" not in r["reply"] and "Perhaps" not in r["reply"] for r in rollouts)
    assert prompts and all(("Target's reasoning:" in p) == show for p in prompts)


def test_patience_stops_after_steps_without_an_accepted_candidate(tmp_path, capsys):
    """train.patience: 1 stops at the first step that accepts nothing; the summary says why
    and still evaluates the best skill; --resume with more patience goes on (issue 22, 16)."""
    with serve(World()) as server:
        config = write_config(tmp_path, server.base_url, train={"patience": 1}, **SHORT)
        run = tmp_path / "run"
        assert train(config, run) == 0
        summary = read(run / "summary.json")
        first_miss = min(summary["rejected_steps"] + summary["unchanged_steps"])
        assert summary["steps"] == first_miss < 6
        assert summary["stopped"] == {
            "kind": "patience",
            "reason": "no candidate was accepted in the last 1 steps (train.patience: 1)",
            "after_step": first_miss,
        }
        assert summary["eval"]["best"]
        assert train(config, run, "--resume", "-o", "train.patience=3") == 0
    assert read(run / "summary.json")["steps"] > first_miss


# ---------------------------------------------------------------- 17: run files


def test_run_files_have_the_usual_permissions_and_no_api_key(tmp_path, monkeypatch):
    """Under umask 022 every file is 0644 and every folder 0755, like any tool's output (not
    tempfile's 0600); the key the server demands appears in no file (issue 22, 17)."""
    secret = "sk-test-do-not-write-4b1d"
    monkeypatch.setenv("HONED_TEST_KEY", secret)
    world = World()
    old = os.umask(0o022)
    try:
        with FakeOpenAIServer(world, models=("target", "reflector"), api_key=secret) as server:
            keyed = {"api_key_env": "HONED_TEST_KEY"}
            config = write_config(
                tmp_path,
                server.base_url,
                train={"max_steps": 3},
                target={"model": "target", **keyed},
                reflector={"model": "reflector", **keyed},
            )
            assert train(config, tmp_path / "run") == 0
    finally:
        os.umask(old)
    run = tmp_path / "run"
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [run, *run.rglob("*")]}
    assert {oct(m) for p, m in modes.items() if p.is_file()} == {"0o644"}
    assert {oct(m) for p, m in modes.items() if p.is_dir()} == {"0o755"}
    for path in modes:
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


# ---------------------------------------------------------------- the example, on a bad day


def test_the_qa_example_completes_against_a_server_that_breaks_a_quarter_of_first_attempts(
    tmp_path,
):
    """`examples/skills_qa.yaml`, 3 steps and an epoch's end, against a server that truncates,
    empties, garbles, rate-limits or fails a fixed quarter of first attempts: exit 0, no text
    of a cut reply in any skill, no empty answer in the cache, and the counters in summary.json
    equal to the faults injected (issue 22, "What must show")."""
    faults = Faults(ConventionsWorld(), fraction=0.25, seed="b")
    with serve(faults) as server:
        url = server.base_url
        overrides = [
            f"target.base_url={url}",
            "target.model=target",
            "target.backoff_s=0.001",
            f"reflector.base_url={url}",
            "reflector.model=reflector",
            "reflector.backoff_s=0.001",
            "train.max_steps=3",
        ]
        flags = [flag for o in overrides for flag in ("-o", o)]
        config = ROOT / "examples" / "skills_qa.yaml"
        assert train(config, tmp_path / "run", *flags) == 0
    run = tmp_path / "run"
    injected = {kind: faults.total(kind) for kind in RUN_KINDS}
    assert all(injected.values()) and faults.total("truncate", "reflector") > 0
    allowed = {*(ROOT / "examples" / "skills" / "initial.md").read_text().splitlines()}
    allowed |= {*RULES.values(), CONVENTIONS_GUIDANCE, ""}
    assert [line for t in skill_texts(run) for line in t.splitlines() if line not in allowed] == []
    cached = [
        json.loads(x)["rollout"]
        for x in (run / "cache" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert cached and all(r["reply"].strip() for r in cached)
    summary = read(run / "summary.json")
    assert summary["steps"] == 3 and summary["stopped"] is None and summary["epochs"] == 1
    assert summary["selection"]["best"]["hard"] > summary["selection"]["initial"]["hard"]
    assert totals(summary, "truncated") == injected["truncate"]
    assert totals(summary, "empty") == injected["empty"]
    assert totals(summary, "invalid") == injected["garble"]
    assert totals(summary, "failed") == 0
    retried = ("empty", "garble", "rate_limit", "error")
    assert totals(summary, "retries") == sum(injected[k] for k in retried) + faults.total(
        "truncate", "reflector"
    )
    # the metrics say the same, step by step (before the steps: the initial skill's scoring;
    # after them: the epoch's consolidation and the held-out evaluation)
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    stages = summary["tokens"]
    for counter in ("requests", "truncated", "empty", "invalid"):
        logged = sum(v for m in metrics for k, v in m.items() if k.endswith(f"/{counter}"))
        outside = sum(stages[s][counter] for s in ("consolidate_rollout", "consolidate", "eval"))
        assert logged <= totals(summary, counter) - outside
