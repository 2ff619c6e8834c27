"""Parsing model replies into tool calls (never raising) and executing them."""

import pytest

from honed.envs.memory.parsing import parse_calls
from honed.envs.memory.store import Memory
from honed.envs.memory.tools import (
    DELETE,
    INSERT,
    UPDATE,
    ToolCall,
    call_from_object,
    execute,
    format_calls,
)


def test_compact_list():
    parsed = parse_calls('[{"i":"s","c":"Ann lives in Oslo"},{"u":"s1","c":"x y"},{"d":"e2"}]')
    assert not parsed.failed and not parsed.repaired
    assert [c.name for c in parsed.calls] == [INSERT, UPDATE, DELETE]
    assert parsed.calls[0].arguments == {"memory_type": "s", "content": "Ann lives in Oslo"}
    assert parsed.calls[1].arguments == {"memory_id": "s1", "new_content": "x y"}


def test_single_full_call_and_openai_wrapper():
    one = parse_calls(
        '{"name": "memory_insert", "arguments": {"memory_type": "episodic", "content": "Day 2: x"}}'
    )
    assert [c.name for c in one.calls] == [INSERT]
    wrapped = parse_calls(
        '{"tool_calls": [{"type": "function", "function": {"name": "memory_update", '
        '"arguments": "{\\"memory_type\\": \\"core\\", \\"new_content\\": \\"hi\\"}"}}]}'
    )
    assert wrapped.calls == [ToolCall(UPDATE, {"memory_type": "core", "new_content": "hi"})]


def test_official_tool_name_is_accepted():
    call = call_from_object(
        {"name": "new_memory_insert", "arguments": {"type": "semantic", "text": "a b"}}
    )
    assert call == ToolCall(INSERT, {"memory_type": "semantic", "content": "a b"})


@pytest.mark.parametrize(
    "text",
    [
        "[{'i': 's', 'c': 'Ann lives in Oslo'}]",  # single quotes
        '[{"i":"s" "c":"Ann lives in Oslo"}]',  # missing comma
        '[{"i":"s","c":"Ann lives in Oslo"},',  # trailing comma, unclosed list
        '[{"i":"s","c":"Ann lives in Oslo',  # truncated at the length limit
    ],
)
def test_near_json_and_partial_replies_are_repaired(text):
    parsed = parse_calls(text)
    assert not parsed.failed and parsed.repaired
    assert parsed.calls == [ToolCall(INSERT, {"memory_type": "s", "content": "Ann lives in Oslo"})]


def test_braces_inside_strings_do_not_break_the_scan():
    text = 'Sure: {"i":"s","c":"set {a, b] is odd"} and then {"i":"s","c":"x \\" } y"} done'
    parsed = parse_calls(text)
    assert [c.arguments["content"] for c in parsed.calls] == ["set {a, b] is odd", 'x " } y']


def test_multiple_calls_spread_through_text():
    text = (
        'First <tool_call>{"name":"memory_insert","arguments":{"memory_type":"semantic",'
        '"content":"A b"}}</tool_call> then [{"d":"s1"}]'
    )
    assert [c.name for c in parse_calls(text).calls] == [INSERT, DELETE]


def test_nested_lists_are_flattened():
    parsed = parse_calls('[[{"i":"s","c":"a b"}], [{"i":"e","c":"Day 1: c"}]]')
    assert len(parsed.calls) == 2


@pytest.mark.parametrize(
    "text", ["", "[", "I will remember that.", "((( ]]] }}", "[1, 2]", "{x}", '"text"']
)
def test_garbage_gives_zero_calls_and_a_failure(text):
    parsed = parse_calls(text)
    assert parsed.calls == [] and parsed.failed


def test_empty_list_is_a_clean_no_op():
    parsed = parse_calls("[]")
    assert parsed.calls == [] and not parsed.failed


def test_junk_next_to_a_call_counts_as_a_failed_call():
    parsed = parse_calls('[{"i":"s","c":"a b"}, {"oops": 1}, 7]')
    memory = Memory()
    results = [execute(memory, c) for c in parsed.calls]
    assert [r.ok for r in results] == [True, False, False]


def test_execution_reports_reasons():
    m = Memory()
    assert execute(m, ToolCall("memory_forget", {})).message == "unknown tool 'memory_forget'"
    assert (
        "memory_type" in execute(m, ToolCall(INSERT, {"memory_type": "x", "content": "a"})).message
    )
    assert not execute(m, ToolCall(INSERT, {"memory_type": "s", "content": 5})).ok
    assert not execute(m, ToolCall(INSERT, {"memory_type": "core", "content": "a"})).ok
    assert execute(m, ToolCall(INSERT, {"memory_type": "semantic_memory", "content": "a b"})).ok
    # The store follows from the id when the type is left out.
    assert execute(m, ToolCall(UPDATE, {"memory_id": "S1", "content": "c d"})).ok
    assert m.items("semantic") == [("s1", "c d")]
    assert execute(m, ToolCall(UPDATE, {"memory_id": "core", "new_content": "hello"})).ok
    assert m.core == "hello"
    assert not execute(m, ToolCall(DELETE, {"memory_id": "s7"})).ok
    assert "required" in execute(m, ToolCall(DELETE, {"memory_type": "semantic"})).message
    assert execute(m, ToolCall(DELETE, {"memory_type": "semantic", "memory_id": "s1"})).ok


@pytest.mark.parametrize("style", ["compact", "full"])
def test_formatted_calls_parse_back_to_the_same_effect(style):
    calls = [
        ToolCall(INSERT, {"memory_type": "semantic", "content": "Ann lives in Oslo"}),
        ToolCall(INSERT, {"memory_type": "episodic", "content": "Day 2: Ann sang"}),
        ToolCall(
            UPDATE,
            {"memory_type": "semantic", "new_content": "Ann lives in Lima", "memory_id": "s1"},
        ),
    ]
    text = format_calls(calls, style)
    direct, parsed = Memory(), Memory()
    for call in calls:
        assert execute(direct, call).ok
    for call in parse_calls(text).calls:
        assert execute(parsed, call).ok
    assert parsed.to_dict() == direct.to_dict()
    if style == "compact":
        assert text.startswith('[{"i":"s","c":"Ann lives in Oslo"}')
