"""Reading tool calls out of model turns: the Hermes/Qwen `<tool_call>` form and Llama 3.1's JSON
form, as real models write them, broken JSON included. Parsing never raises, never drops a call
silently, and reports what it could not read."""

from __future__ import annotations

import pytest

from honed.envs.multiturn.toolcalls import ToolCall, format_calls, parse_tool_calls

# What Qwen2.5-7B-Instruct writes (its chat template's own example, with a newline after the
# tag and spaces in the JSON), two calls in one turn.
QWEN_TWO_CALLS = (
    "<tool_call>\n"
    '{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}\n'
    "</tool_call>\n"
    "<tool_call>\n"
    '{"name": "get_temperature_date", "arguments": {"location": "San Francisco, CA, USA", '
    '"date": "2024-10-01"}}\n'
    "</tool_call>"
)


def test_hermes_two_calls_in_one_turn():
    turn = parse_tool_calls(QWEN_TWO_CALLS, "hermes")
    assert [c.name for c in turn.calls] == ["get_current_temperature", "get_temperature_date"]
    assert turn.calls[1].arguments == {"location": "San Francisco, CA, USA", "date": "2024-10-01"}
    assert turn.content == "" and not turn.errors and not turn.final and turn.repaired == 0


def test_hermes_text_around_the_calls_is_the_content():
    text = 'Let me look that up.\n<tool_call>{"name": "lookup", "arguments": {"name": "kx"}}</tool_call>'
    turn = parse_tool_calls(text, "hermes")
    assert turn.content == "Let me look that up."
    assert turn.calls == [ToolCall("lookup", {"name": "kx"})]


def test_hermes_a_turn_without_calls_is_the_final_answer():
    turn = parse_tool_calls("The answer is 132.", "hermes")
    assert turn.final and turn.content == "The answer is 132." and not turn.calls


@pytest.mark.parametrize(
    ("body", "arguments"),
    [
        ("{'name': 'lookup', 'arguments': {'name': 'kx'}}", {"name": "kx"}),  # single quotes
        ('{"name": "lookup", "arguments": {"name": "kx"},}', {"name": "kx"}),  # trailing comma
        ('{"name": "lookup", "arguments": {"name": "kx"}', {"name": "kx"}),  # a brace missing
        ('{"name": "lookup" "arguments": {"name": "kx"}}', {"name": "kx"}),  # a comma missing
    ],
)
def test_hermes_broken_json_is_repaired_and_counted(body, arguments):
    turn = parse_tool_calls(f"<tool_call>{body}</tool_call>", "hermes")
    assert turn.calls == [ToolCall("lookup", arguments)]
    assert turn.repaired == 1 and not turn.errors


def test_hermes_a_call_cut_at_the_end_of_the_turn_is_still_read():
    turn = parse_tool_calls(
        '<tool_call>\n{"name": "calc", "arguments": {"expression": "3*4"}}', "hermes"
    )
    assert turn.calls == [ToolCall("calc", {"expression": "3*4"})]


def test_hermes_arguments_as_a_json_string_and_a_function_wrapper():
    text = (
        '<tool_call>{"name": "calc", "arguments": "{\\"expression\\": \\"1+2\\"}"}</tool_call>'
        '<tool_call>{"function": {"name": "lookup", "arguments": {"name": "ab"}}}</tool_call>'
    )
    turn = parse_tool_calls(text, "hermes")
    assert turn.calls == [
        ToolCall("calc", {"expression": "1+2"}),
        ToolCall("lookup", {"name": "ab"}),
    ]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("", "not valid JSON"),
        ("lookup kx please", "not valid JSON"),
        ('{"arguments": {"name": "kx"}}', 'no "name"'),
        ('{"name": "lookup", "arguments": [1, 2]}', '"arguments" must be a JSON object'),
        ('{"name": "calc", "arguments": "3*4"}', "not a JSON object"),
        ("7", "must be a JSON object"),
    ],
)
def test_hermes_unreadable_calls_are_errors_not_silence(body, problem):
    turn = parse_tool_calls(f"<tool_call>{body}</tool_call>", "hermes")
    assert not turn.calls and not turn.final
    assert len(turn.errors) == 1 and problem in turn.errors[0]


def test_hermes_one_bad_call_beside_a_good_one_keeps_the_good_one():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>junk</tool_call>'
    turn = parse_tool_calls(text, "hermes")
    assert [c.name for c in turn.calls] == ["a"] and len(turn.errors) == 1


# Llama 3.1 with JSON tool calls (the format of its tool_chat_template_llama3.1_json template).
def test_llama3_json_call():
    text = '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}'
    turn = parse_tool_calls(text, "llama3_json")
    assert turn.calls == [
        ToolCall("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"})
    ]
    assert not turn.errors


def test_llama3_json_after_the_python_tag_and_several_calls():
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    turn = parse_tool_calls(text, "llama3_json")
    assert [(c.name, c.arguments) for c in turn.calls] == [("a", {"x": 1}), ("b", {})]


def test_llama3_json_plain_text_and_json_data_are_answers():
    assert parse_tool_calls("It is 72 degrees.", "llama3_json").final
    data = parse_tool_calls('{"temperature": 72}', "llama3_json")
    assert data.final and data.content == '{"temperature": 72}'


def test_llama3_json_broken_call_is_repaired_or_an_error():
    repaired = parse_tool_calls('{"name": "a", "parameters": {"x": 1}', "llama3_json")
    assert repaired.calls == [ToolCall("a", {"x": 1})] and repaired.repaired == 1
    broken = parse_tool_calls('{"name": "a", "parameters": {"x": 1}} then {oops', "llama3_json")
    assert [c.name for c in broken.calls] == ["a"]
    assert broken.errors or broken.repaired  # the tail is read or reported, never dropped


@pytest.mark.parametrize("tool_format", ["hermes", "llama3_json"])
def test_hostile_text_never_raises(tool_format):
    nested = "[" * 50_000 + "]" * 50_000
    for text in (nested, "{" + '"a":' * 30_000, "\ud800" * 10, "9" * 5000, "<tool_call>" * 1000):
        turn = parse_tool_calls(f"<tool_call>{text}</tool_call>", tool_format)
        assert isinstance(turn.errors, list)
        turn = parse_tool_calls(text, tool_format)
        assert isinstance(turn.errors, list)


@pytest.mark.parametrize("tool_format", ["hermes", "llama3_json"])
def test_format_calls_reads_back(tool_format):
    calls = [ToolCall("lookup", {"name": "kx"}), ToolCall("calc", {"expression": "47+85"})]
    assert parse_tool_calls(format_calls(calls, tool_format), tool_format).calls == calls


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown tool format"):
        parse_tool_calls("x", "mistral")
