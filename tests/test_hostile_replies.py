"""Model and server replies cannot crash a run: every parser of untrusted text returns a result
(counted as invalid where nothing can be read) for any string at all.

The named cases are the ones that once ended a run: a number of more than 4,300 digits (Python's
int conversion limit), a kilobyte of nested brackets (the recursion limit), a JSON-escaped lone
surrogate (no valid UTF-8: the next prompt failed to tokenize, the skill hash failed), and tens
of kilobytes of junk handed to json_repair, whose cost grows faster than linearly. Hypothesis
then feeds arbitrary text, and text built from JSON's own characters, to every parser.
"""

from __future__ import annotations

import json

import json_repair
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from honed.envs.memory.parsing import parse_calls
from honed.envs.memory.rewards import parse_verdict
from honed.envs.tasks.arithmetic import last_number
from honed.skills.document import SkillDocument
from honed.skills.edits import decode_json, parse_edits
from honed.skills.merge import reply_json
from honed.text import MAX_REPAIR_CHARS, valid_text

HOSTILE = {
    "huge number": '[{"i": "s", "c": ' + "9" * 5000 + "}]",
    "huge number in an edit": '{"edits": [{"op": "append", "content": ' + "7" * 5000 + "}]}",
    "deep nesting": "[" * 1200 + "]" * 1200,
    "deep nesting, unclosed": "[" * 1200,
    "deep objects": '{"a": ' * 1500 + "1" + "}" * 1500,
    "lone surrogate": '[{"i": "s", "c": "\\ud800"}]',
    "lone surrogate in an edit": '[{"op": "append", "content": "tip \\udfff"}]',
    "raw surrogate": "[{'i': 's', 'c': 'x\ud800'}]",
    "junk": "{[,:" * 8000,
}


def _is_valid_utf8(value: object) -> bool:
    return json.dumps(value, ensure_ascii=False).encode("utf-8") is not None


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_memory_tool_parsing_counts_hostile_replies_instead_of_raising(text):
    result = parse_calls(text)
    for call in result.calls:
        assert _is_valid_utf8(call.arguments) and call.name.encode("utf-8")
    if "surrogate" in text or "\ud800" in text:
        assert result.calls and "\ufffd" in json.dumps(
            result.calls[0].arguments, ensure_ascii=False
        )


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_skill_edit_parsing_and_hashing_survive_hostile_replies(text):
    parsed = parse_edits(text)
    document = SkillDocument("")
    new, _ = document.apply_edits(parsed.edits)
    assert len(new.content_hash) == 64  # hashing needs valid UTF-8
    new.text.encode("utf-8")
    reply_json(text)
    decode_json(text)


def test_an_edit_with_a_lone_surrogate_is_applied_as_valid_text():
    parsed = parse_edits('[{"op": "append", "content": "- check units \\ud800"}]')
    [edit] = parsed.edits
    new, _ = SkillDocument("").apply_edits([edit])
    assert "\ufffd" in new.text and len(new.content_hash) == 64


def test_long_junk_is_never_handed_to_the_repair(monkeypatch):
    """json_repair's cost grows faster than linearly; a reply span longer than the cap is
    counted as unreadable without it."""
    seen: list[int] = []
    real = json_repair.loads

    def spy(text, *args, **kwargs):
        seen.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json_repair, "loads", spy)
    junk = "{" + "'a': [1, 2" * 4000
    assert parse_calls(junk).failed
    assert parse_edits(junk).edits == []
    assert decode_json(junk) is None
    assert all(n <= MAX_REPAIR_CHARS for n in seen)
    parse_calls("[{'i': 's', 'c': 'short and broken'")  # short spans are still repaired
    assert seen and seen[-1] < 100


def test_valid_text_replaces_only_what_utf8_cannot_hold():
    assert valid_text("plain, émigré, 数学, 🙂") == "plain, émigré, 数学, 🙂"
    assert valid_text("a\ud800b\udfff") == "a\ufffdb\ufffd"


_JSONISH = st.lists(
    st.sampled_from([*"[]{}\",:\\ 0123456789aiscnamefuo'-.", "\\u", "\\ud800", "\ud800"])
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), _JSONISH))
def test_no_parser_raises_on_any_text(text):
    result = parse_calls(text)
    for call in result.calls:
        assert _is_valid_utf8(call.arguments)
    parsed = parse_edits(text)
    new, _ = SkillDocument(text).apply_edits(parsed.edits)
    assert len(new.content_hash) == 64
    reply_json(text)
    assert parse_verdict(text) in (True, False, None)
    value = last_number(text)
    assert value is None or isinstance(value, int)
