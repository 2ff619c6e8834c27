"""Merging and ranking proposals: support counts, the LLM paths, and their fallbacks."""

from __future__ import annotations

import json

from honed.models.chat import ChatFailure
from honed.skills.document import SkillDocument
from honed.skills.edits import Edit
from honed.skills.merge import dedupe, deterministic_order, llm_merge, rank
from honed.skills.reflect import FAILURE, SUCCESS, Reflection

SKILL = SkillDocument("# Skill\n\n- Be brief.\n")


class StubReflector:
    """Stands in for a `Reflector`: replies with a fixed text (or raises) and keeps prompts."""

    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def ask(self, prompt, stage):
        self.prompts.append(prompt)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def append(text: str) -> Edit:
    return Edit("append", "", text)


def reflection(source: str, *edits: Edit) -> Reflection:
    return Reflection(source, [], "", list(edits), [], "")


def pool_of_four():
    return dedupe(
        [
            reflection(FAILURE, append("- Rule A"), append("- Rule B")),
            reflection(SUCCESS, append("- Rule C"), append("- rule   a")),
            reflection(FAILURE, append("- Rule D"), append("- Rule A")),
        ]
    )


def test_dedupe_counts_support_by_source_ignoring_case_and_spacing():
    pool = pool_of_four()
    assert [p.edit.content for p in pool] == ["- Rule A", "- Rule B", "- Rule C", "- Rule D"]
    a = pool[0]
    assert (a.support_count, a.from_failures, a.from_successes) == (3, 2, 1)
    assert a.to_dict()["support_count"] == 3


def test_a_minibatch_repeating_an_edit_is_not_extra_support():
    pool = dedupe([reflection(FAILURE, append("- X"), append("- X"))])
    assert len(pool) == 1 and pool[0].support_count == 1


def test_deterministic_order_prefers_support_then_failures_then_first_seen():
    order = [p.edit.content for p in deterministic_order(pool_of_four())]
    # A has 3 supporters; B and D one failure each (B first seen); C one success.
    assert order == ["- Rule A", "- Rule B", "- Rule D", "- Rule C"]


def test_llm_ranking_is_used_and_missing_ids_follow_in_support_order():
    reflector = StubReflector(json.dumps({"ranking": [4, "3", 99, 4]}))
    ranking = rank(reflector, SKILL, pool_of_four(), budget=2, autonomous=False, use_llm=True)
    assert ranking.method == "llm"
    assert [p.edit.content for p in ranking.order] == [
        "- Rule D",
        "- Rule C",
        "- Rule A",
        "- Rule B",
    ]
    assert [p.edit.content for p in ranking.kept] == ["- Rule D", "- Rule C"]
    assert "left out 2" in ranking.problems[0]
    assert "Only the first 2 will be applied" in reflector.prompts[0]


def test_ranking_falls_back_when_the_reply_is_garbage_or_the_call_fails():
    for reply in ("I like them all!", ChatFailure("HTTP 500 after 4 attempts", "gave_up")):
        ranking = rank(StubReflector(reply), SKILL, pool_of_four(), 2, False, True)
        assert ranking.method.startswith("deterministic (")
        assert [p.edit.content for p in ranking.kept] == ["- Rule A", "- Rule B"]
    failed = rank(
        StubReflector(ChatFailure("boom", "gave_up")), SKILL, pool_of_four(), 2, False, True
    )
    assert failed.problems == ["boom"]  # recorded, not swallowed


def test_no_llm_call_when_the_budget_covers_the_pool_or_ranking_is_deterministic():
    reflector = StubReflector("unused")
    assert rank(reflector, SKILL, pool_of_four(), 4, False, True).keep == 4
    assert rank(reflector, SKILL, pool_of_four(), 2, False, False).method == "deterministic"
    assert reflector.prompts == []
    assert rank(reflector, SKILL, [], 3, True, True).keep == 0


def test_autonomous_keep_is_chosen_by_the_reflector_and_clamped_to_the_pool():
    def keep(reply):
        return rank(StubReflector(reply), SKILL, pool_of_four(), 999, True, True).keep

    assert keep(json.dumps({"ranking": [1, 2, 3, 4], "keep": 2})) == 2
    assert keep(json.dumps({"ranking": [1, 2, 3, 4], "keep": 40})) == 4
    assert keep(json.dumps({"ranking": [1, 2, 3, 4], "keep": 0})) == 1
    assert keep(json.dumps({"ranking": [2, 1]})) == 4  # no usable keep: the whole pool
    assert keep("no json") == 4


def test_llm_merge_sums_support_of_its_sources_and_never_grows_the_pool():
    pool = pool_of_four()
    reply = json.dumps(
        {
            "edits": [
                {"op": "append", "content": "- Rules A and D", "sources": [1, 4]},
                {"op": "append", "content": "- Rule B", "sources": [2]},
                {"op": "explode"},
            ]
        }
    )
    merged = llm_merge(StubReflector(reply), SKILL, pool)
    assert merged.method == "llm"
    assert [(p.edit.content, p.support_count, p.from_failures) for p in merged.pool] == [
        ("- Rules A and D", 4, 3),
        ("- Rule B", 1, 1),
    ]
    assert any("unknown op" in problem for problem in merged.problems)
    assert "sources" not in merged.pool[0].to_dict()

    too_many = json.dumps([{"op": "append", "content": "- Rule A", "sources": [1]}] * 9)
    assert len(llm_merge(StubReflector(too_many), SKILL, pool).pool) == 4


def test_llm_merge_keeps_the_deterministic_pool_when_it_fails():
    pool = pool_of_four()
    for reply in ("sorry, no", ChatFailure("connection refused", "gave_up")):
        merged = llm_merge(StubReflector(reply), SKILL, pool)
        assert merged.method == "deterministic (llm merge failed)"
        assert merged.pool == pool and merged.problems


def merged_from(content: str, *sources: str):
    """The LLM merge of `sources` (and an unrelated proposal, left out) into the one edit
    `content`, naming them all as its sources."""
    pool = dedupe([reflection(FAILURE, *(append(s) for s in [*sources, "- Be brief."]))])
    ids = list(range(1, len(sources) + 1))
    reply = json.dumps({"edits": [{"op": "append", "content": content, "sources": ids}]})
    return llm_merge(StubReflector(reply), SKILL, pool)


def test_a_merged_edit_that_turns_its_proposals_around_is_dropped():
    """Issue 36, 7: the words are the proposals' own, so the word-share check passes, but what
    they assert is negated, or what they negate asserted."""
    reversals = [
        (
            "- For unit conversions, answer with the unit's name, not the bare number.",
            ["- For unit conversions, answer with the bare number, not the unit's name."],
        ),
        (
            "- For unit conversions, never answer with the bare number in the unit asked for.",
            ["- For unit conversions, answer with the bare number in the unit asked for."],
        ),
        (
            "- Answer with a percent sign.",
            ["- For percentages, answer with the bare number, without a percent sign."],
        ),
        (
            "- To count a letter, never spell the word out and answer from memory.",
            ["- To count a letter, spell the word out and never answer from memory."],
        ),
        ("- Give the time with a leading zero.", ["- Give the time with no leading zero."]),
    ]
    for content, sources in reversals:
        merged = merged_from(content, *sources)
        assert merged.method == "deterministic (llm merge failed)", content
        (dropped,) = merged.dropped
        assert dropped["reason"].startswith("it says the opposite of the edits it merges"), content
    (dropped,) = merged_from(reversals[0][0], *reversals[0][1]).dropped
    assert "negates 'bare', 'number' and asserts 'name'" in dropped["reason"]


def test_a_faithful_merge_keeps_its_negations_and_passes():
    """Rewording, combining and keeping a proposal's own "not" or "never" is what merging is."""
    faithful = [
        (
            "- For unit conversions, answer with the bare number, not the unit's name.",
            ["- For unit conversions, answer with the bare number, not the unit's name."],
        ),
        (
            "- Use the ISO date; do not use the US format.",
            ["- Use the ISO date, not the US format.", "- Always use ISO dates."],
        ),
        ("- Do not round numbers; keep decimals.", ["- Keep decimals.", "- Do not round numbers."]),
        (
            "- Answer without a percent sign.",
            ["- For percentages, answer with the bare number, without a percent sign."],
        ),
        (
            "- Read the question twice; never guess.",
            ["- Never guess.", "- Read the question twice."],
        ),
        (
            "- Give times in 12-hour form without a leading zero.",
            ["- Give times in 12-hour form, like 2:05 pm, no leading zero."],
        ),
    ]
    for content, sources in faithful:
        merged = merged_from(content, *sources)
        assert merged.method == "llm" and merged.dropped == [], (content, merged.dropped)
