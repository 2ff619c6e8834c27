"""Each reward component on hand-made cases, and the judges."""

import pytest

from honed.envs.memory.rewards import (
    ChatJudge,
    ChunkOutcome,
    RuleJudge,
    chunk_reward,
    compression,
    make_judge,
    tool_success,
    validity,
)
from honed.envs.memory.store import CORE, EPISODIC, SEMANTIC, ToolResult
from honed.errors import HonedError

OK, FAIL = ToolResult(True, "ok"), ToolResult(False, "no")


def test_tool_success_is_the_share_of_successful_calls():
    assert tool_success(ChunkOutcome(False, [OK, FAIL, OK, OK])) == 0.75
    assert tool_success(ChunkOutcome(False, [FAIL])) == 0.0
    # A clean empty reply earns the no-call credit: 0 by default, as the official code; 1 only
    # when configured. An unparsable one earns nothing either way.
    assert tool_success(ChunkOutcome(False, [])) == 0.0
    assert tool_success(ChunkOutcome(False, []), no_call_credit=1.0) == 1.0
    assert tool_success(ChunkOutcome(True, []), no_call_credit=1.0) == 0.0


def test_validity_is_the_mean_verdict_on_writes():
    assert validity(ChunkOutcome(False, [OK, OK], [1.0, 0.0])) == 0.5
    assert validity(ChunkOutcome(False, [OK, FAIL], [1.0])) == 1.0  # the failure costs r2, not r4
    assert validity(ChunkOutcome(False, [FAIL], [])) == 0.0
    # only a delete: nothing judged, as a chunk without calls (the official judge scores it 0)
    assert validity(ChunkOutcome(False, [OK], [])) == 0.0
    assert validity(ChunkOutcome(False, [OK], []), no_call_credit=1.0) == 1.0
    assert validity(ChunkOutcome(False, [])) == 0.0
    assert validity(ChunkOutcome(False, []), no_call_credit=1.0) == 1.0
    assert validity(ChunkOutcome(True, []), no_call_credit=1.0) == 0.0


def test_compression_may_go_negative_unless_clipped():
    assert compression(25, 100) == 0.75
    assert compression(150, 100) == -0.5
    assert compression(150, 100, clip=0.0) == 0.0
    assert compression(0, 0) == 1.0


def test_chunk_reward_is_the_paper_sum():
    assert chunk_reward(0.5, 1.0, 0.6, 0.5) == pytest.approx(0.5 + 1.0 + 0.05 * 0.6 + 0.1 * 0.5)
    assert chunk_reward(
        1.0, 0.0, -1.0, 1.0, compression_weight=0.2, validity_weight=1.0
    ) == pytest.approx(1.0 - 0.2 + 1.0)


def test_rule_judge_core():
    judge = RuleJudge()
    assert judge.validity(CORE, "Kamo and Tebu are neighbours", []) == 1.0
    for bad in ["", "  ", "None", "N/A", "placeholder", "Core memory: nothing yet"]:
        assert judge.validity(CORE, bad, []) == 0.0, bad


def test_rule_judge_semantic():
    judge = RuleJudge(max_fact_words=8)
    assert judge.validity(SEMANTIC, "Kamo lives in Oslo", ["Tebu lives in Lima"]) == 1.0
    assert judge.validity(SEMANTIC, "Oslo", []) == 0.0  # not a statement
    assert judge.validity(SEMANTIC, "Kamo lives in Oslo. Tebu has a cat.", []) == 0.0  # two facts
    assert judge.validity(SEMANTIC, "one two three four five six seven eight nine", []) == 0.0
    assert judge.validity(SEMANTIC, "Kamo lives in Oslo now", ["Kamo now lives in Oslo"]) == 0.0


def test_rule_judge_episodic_needs_a_time():
    judge = RuleJudge()
    for good in [
        "Day 4: Kamo visited the zoo",
        "On 2024-03-01 Kamo left",
        "Kamo ran at 7pm",
        "Yesterday Kamo sang",
    ]:
        assert judge.validity(EPISODIC, good, []) == 1.0, good
    assert judge.validity(EPISODIC, "Kamo visited the zoo", []) == 0.0


class _Chat:
    def __init__(self, reply):
        self.reply = reply

    def chat(self, messages):
        assert "episodic" in messages[0]["content"]
        return self.reply


def test_chat_judge_reads_valid_and_invalid():
    assert ChatJudge(_Chat("VALID")).validity(EPISODIC, "Day 1: x", []) == 1.0
    assert ChatJudge(_Chat("Invalid.")).validity(EPISODIC, "x", []) == 0.0
    assert isinstance(make_judge("llm", _Chat("VALID")), ChatJudge)
    with pytest.raises(HonedError, match="needs a chat model"):
        make_judge("llm")
    with pytest.raises(HonedError, match="unknown memory judge"):
        make_judge("gpt")
