"""The LLM judge's verdicts are parsed strictly, and a reply without one is counted, not scored
as VALID (issue 15: "Not valid." and {"VALID": false} used to count as valid)."""

from __future__ import annotations

import pytest
from test_memory_env import HAND, ScriptedGenerator, _chunk

from honed.envs.memory import MemoryEnv
from honed.envs.memory.rewards import ChatJudge, ChunkOutcome, parse_verdict, validity
from honed.envs.memory.store import EPISODIC, ToolResult

VALID, INVALID, NONE = True, False, None

# Replies as judges write them: bare words, markdown, sentences, JSON, reasoning first.
REPLIES = [
    ("VALID", VALID),
    ("INVALID", INVALID),
    ("valid", VALID),
    ("Invalid.", INVALID),
    ("VALID.", VALID),
    ("**VALID**", VALID),
    ("`INVALID`", INVALID),
    ("Verdict: VALID", VALID),
    ("Final answer - INVALID", INVALID),
    ("Answer: INVALID - the entry lacks a time.", INVALID),
    ("The entry is valid.", VALID),
    ("The entry is INVALID because it is a placeholder.", INVALID),
    ("Not valid.", INVALID),
    ("not VALID", INVALID),
    ("This isn't valid.", INVALID),
    ("It is not a valid entry.", INVALID),
    ('{"VALID": false}', INVALID),
    ('{"valid": true}', VALID),
    ('{"is_valid": false, "reason": "no time"}', INVALID),
    ('```json\n{"verdict": "INVALID"}\n```', INVALID),
    ('{"verdict": "VALID", "explanation": "an event with a date"}', VALID),
    ('{"reason": "looks fine"}', NONE),  # JSON without a verdict
    (
        "The entry names an event and a date, which is what episodic memory holds.\nVERDICT: VALID",
        VALID,
    ),
    ("It mentions a person but no time.\n\nINVALID", INVALID),
    ("<think>It has a date... valid? No time of day though. Invalid?</think>\nVALID", VALID),
    ("<think>Let me check whether this is valid", NONE),  # ran out of tokens while thinking
    ("It could look VALID at first, but it has no time, so it is INVALID.", NONE),
    ("VALID or INVALID", NONE),
    ("", NONE),
    ("   \n ", NONE),
    ("I'm sorry, but I can't help with that request.", NONE),
    ("The entry: Day 3, Ann sang.", NONE),
    ("Validity is hard to judge here.", NONE),  # "validity" is not the word "valid"
]


@pytest.mark.parametrize(("reply", "expected"), REPLIES)
def test_a_judge_reply_gives_its_verdict_or_none(reply, expected):
    assert parse_verdict(reply) is expected


def test_none_is_no_reply_at_all():
    assert parse_verdict(None) is None


class _Chat:
    """A judge server that answers each entry from a table (a stand-in for ChatClient)."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies

    def chat(self, messages):
        entry = messages[0]["content"].split("Entry: ", 1)[1].split("\n", 1)[0]
        return self.replies[entry]


def test_chat_judge_maps_verdicts_and_gives_none_without_one():
    judge = ChatJudge(_Chat({"a": "Not valid.", "b": '{"VALID": false}', "c": "", "d": "VALID"}))
    assert judge.validity(EPISODIC, "a", []) == 0.0
    assert judge.validity(EPISODIC, "b", []) == 0.0
    assert judge.validity(EPISODIC, "c", []) is None
    assert judge.validity(EPISODIC, "d", []) == 1.0


def test_writes_without_a_verdict_are_left_out_of_r4_and_counted():
    ok = ToolResult(True, "ok")
    assert validity(ChunkOutcome(False, [ok, ok], [1.0], judge_errors=1)) == 1.0
    # no verdict at all on what the chunk wrote: r4 = 0, as an unrecognised reply officially was
    assert validity(ChunkOutcome(False, [ok], [], judge_errors=1)) == 0.0


def test_a_rollout_reports_judge_errors_as_a_component():
    replies = {
        "Ann lives in Oslo": "VALID",
        "The tea was cold": "Sure!",
        "Day 3: Ann sang": "VALID",
    }
    writes = {
        "Ann lives": '[{"i":"s","c":"Ann lives in Oslo"}]',
        "The tea": '[{"i":"s","c":"The tea was cold"}]',
        "Day 3": '[{"i":"e","c":"Day 3: Ann sang"}]',
    }

    def reply(prompt: str, seed: int) -> str:
        chunk = _chunk(prompt)
        return next(v for k, v in writes.items() if chunk.startswith(k))

    env = MemoryEnv("memory")
    env.judge = ChatJudge(_Chat(replies))
    (group,) = env.rollout([HAND], ScriptedGenerator(reply), num_generations=1, seed=0)
    (traj,) = group.trajectories
    assert traj.components["judge_errors"] == 1.0
    # chunks 1 and 3 were judged VALID; chunk 2's write got no verdict: r4 = 0 there
    assert traj.components["validity"] == pytest.approx(2 / 3)
