"""The skill document: edit operations, skips with reasons, the insert_after fallback, protected
regions, edit parsing from LLM output, the versioned store and the content hash."""

from __future__ import annotations

import json

import pytest

from honed.errors import HonedError
from honed.skills.document import SkillDocument, SkillFormatError, skill_hash
from honed.skills.edits import Edit, parse_edits
from honed.skills.store import SkillStore, atomic_write_text

SKILL = """# Skill

## Rules
- Answer with a number only.
- Show no working.

<!-- protected:guidance -->
Keep answers short.
<!-- /protected:guidance -->

## Notes
"""


def apply(text: str, *edits: dict):
    new, report = SkillDocument(text).apply_edits(list(edits))
    return new.text, report


def test_append_adds_lines_at_the_end():
    text, report = apply("# Skill\n- a", {"op": "append", "content": "- b"})
    assert text == "# Skill\n- a\n- b\n"
    assert report.applied == 1 and report.outcomes[0].reason == ""
    text, _ = apply("", {"op": "append", "content": "- first\n"})
    assert text == "- first\n"


def test_insert_after_puts_content_on_its_own_line_after_the_target_line():
    edit = {"op": "insert_after", "target": "Answer with a number", "content": "- Use digits."}
    text, report = apply(SKILL, edit)
    assert "- Answer with a number only.\n- Use digits.\n- Show no working." in text
    assert report.outcomes[0].applied
    # Target ending in a newline: inserted right there; last line without newline: one is added.
    text, _ = apply("a\nb\n", {"op": "insert_after", "target": "a\n", "content": "x"})
    assert text == "a\nx\nb\n"
    text, _ = apply("a\nb", {"op": "insert_after", "target": "b", "content": "x"})
    assert text == "a\nb\nx\n"


def test_insert_after_missing_target_becomes_an_append():
    edit = {"op": "insert_after", "target": "## Nowhere", "content": "- New rule."}
    text, report = apply(SKILL, edit)
    assert text == SKILL + "- New rule.\n"
    outcome = report.outcomes[0]
    assert outcome.applied and outcome.reason == "target not found; appended at the end"
    assert report.to_dict()["edits"][0]["status"] == "applied"


def test_replace_and_delete():
    text, report = apply(
        SKILL,
        {"op": "replace", "target": "Show no working.", "content": "Show one line of working."},
        {"op": "delete", "target": "- Answer with a number only."},
    )
    assert report.applied == 2
    assert "Show one line of working." in text and "Show no working" not in text
    # Deleting a whole line removes the line, leaving no blank line behind.
    assert "## Rules\n- Show one line of working.\n\n<!--" in text


def test_delete_part_of_a_line_and_a_target_with_its_newline():
    text, _ = apply("- Be brief and polite.\n", {"op": "delete", "target": " and polite"})
    assert text == "- Be brief.\n"
    text, _ = apply("a\nb\n\nc\n", {"op": "delete", "target": "b\n"})
    assert text == "a\n\nc\n"  # the blank line after b is not eaten


def test_edits_apply_in_order_each_to_the_previous_result():
    text, report = apply(
        "- a\n",
        {"op": "append", "content": "- b"},
        {"op": "replace", "target": "- b", "content": "- c"},
        {"op": "insert_after", "target": "- c", "content": "- d"},
    )
    assert text == "- a\n- c\n- d\n" and report.applied == 3


def test_skips_with_reasons():
    edits = [
        {"op": "replace", "target": "not in the skill", "content": "x"},
        {"op": "delete", "target": "## "},
        {"op": "rewrite", "target": "Rules", "content": "x"},
        {"op": "append", "content": "   "},
        {"op": "replace", "target": "Rules", "content": ""},
        {"op": "delete"},
        {"target": "Rules"},
        ["not", "an", "object"],
        {"op": "replace", "target": 3, "content": "x"},
    ]
    text, report = apply(SKILL, *edits)
    assert text == SKILL and report.applied == 0 and report.skipped == len(edits)
    reasons = [o.reason for o in report.outcomes]
    assert reasons[0] == "target not found"
    assert reasons[1].startswith("target is ambiguous: it occurs 2 times")
    assert reasons[2].startswith("unknown op 'rewrite'")
    assert reasons[3] == "'append' needs non-empty content"
    assert reasons[4].startswith("'replace' needs non-empty content")
    assert reasons[5] == "'delete' needs a non-empty target"
    assert reasons[6] == "malformed edit: missing 'op'"
    assert reasons[7] == "malformed edit: expected a JSON object, got list"
    assert reasons[8] == "malformed edit: 'target' must be a string"
    assert [o.index for o in report.outcomes] == list(range(1, len(edits) + 1))
    assert json.loads(json.dumps(report.to_dict()))["skipped"] == len(edits)


def test_ambiguous_insert_after_is_skipped_not_appended():
    text, report = apply("- x\n- x\n", {"op": "insert_after", "target": "- x", "content": "- y"})
    assert text == "- x\n- x\n" and "ambiguous" in report.outcomes[0].reason


def test_target_whitespace_is_trimmed_only_when_the_exact_text_misses():
    text, report = apply("- rule", {"op": "replace", "target": "- rule\n", "content": "- law"})
    assert text == "- law"
    assert report.outcomes[0].reason == "matched after trimming whitespace around the target"


def test_protected_region_is_untouchable_by_edits():
    edits = [
        {"op": "replace", "target": "Keep answers short.", "content": "Ramble."},
        {"op": "delete", "target": "<!-- /protected:guidance -->"},
        {"op": "insert_after", "target": "Keep answers short.", "content": "- sneaky"},
        {"op": "replace", "target": "working.\n\n<!-- protected:guidance -->", "content": "x"},
        {"op": "append", "content": "<!-- protected:mine -->\nx\n<!-- /protected:mine -->"},
        {"op": "insert_after", "target": "Notes", "content": "<!-- /protected:guidance -->"},
    ]
    text, report = apply(SKILL, *edits)
    assert text == SKILL and report.applied == 0
    reasons = [o.reason for o in report.outcomes]
    assert reasons[:4] == ["target is inside protected region 'guidance'"] * 4
    assert reasons[4:] == ["content contains a protected-region marker"] * 2


def test_insertion_point_inside_a_region_is_refused():
    text = "intro <!-- protected:p -->\nkeep\n<!-- /protected:p -->\n"
    _, report = apply(text, {"op": "insert_after", "target": "intro", "content": "x"})
    assert report.outcomes[0].reason == "insertion point is inside protected region 'p'"


def test_edit_that_would_forge_a_marker_is_refused():
    # Deleting "XX" would join the pieces into a closing marker for 'p'.
    text = "<!-- protected:p -->\nkeep\n<!-- /protected:p -->\n<!-- /protXXected:q -->\n"
    _, report = apply(text, {"op": "delete", "target": "XX"})
    assert report.outcomes[0].reason == "edit would change a protected region"


def test_edits_around_a_region_keep_it_intact():
    text, report = apply(
        SKILL,
        {"op": "insert_after", "target": "## Notes", "content": "- note"},
        {"op": "replace", "target": "# Skill", "content": "# Arithmetic skill"},
    )
    assert report.applied == 2
    doc = SkillDocument(text)
    assert doc.region("guidance").content == "Keep answers short."


def test_rewrite_protected_is_the_explicit_way_in():
    doc = SkillDocument(SKILL)
    new = doc.rewrite_protected("guidance", "Answer in one line.\nNever guess.\n")
    assert new.region("guidance").content == "Answer in one line.\nNever guess."
    assert new.text.replace("Answer in one line.\nNever guess.", "Keep answers short.") == SKILL
    created = SkillDocument("# S\n").rewrite_protected("slow_update", "Be careful.", create=True)
    assert (
        created.text
        == "# S\n<!-- protected:slow_update -->\nBe careful.\n<!-- /protected:slow_update -->\n"
    )
    with pytest.raises(ValueError, match="no protected region 'missing'"):
        doc.rewrite_protected("missing", "x")
    with pytest.raises(ValueError, match="must not contain protected markers"):
        doc.rewrite_protected("guidance", "<!-- /protected:guidance -->")
    with pytest.raises(ValueError, match="invalid protected region name"):
        doc.rewrite_protected("two words", "x", create=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- protected:a -->\nx\n", "line 1: protected region 'a' is never closed"),
        (
            "x\n<!-- /protected:a -->\n",
            "line 2: '<!-- /protected:a -->' closes a region that is not open",
        ),
        ("<!-- protected:a -->\n<!-- protected:b -->\n", "regions cannot nest"),
        ("<!-- protected:a -->\n<!-- /protected:b -->\n", "under another name"),
        (
            "<!-- protected:a --><!-- /protected:a -->\n<!-- protected:a --><!-- /protected:a -->",
            "appears twice",
        ),
    ],
)
def test_malformed_regions_are_refused(text, message):
    with pytest.raises(SkillFormatError) as info:
        SkillDocument(text)
    assert message in str(info.value)


def test_load_names_the_file(tmp_path):
    bad = tmp_path / "skill.md"
    bad.write_text("<!-- protected:a -->\n")
    with pytest.raises(SkillFormatError, match=r"skill\.md: line 1"):
        SkillDocument.load(bad)
    with pytest.raises(HonedError, match="cannot read skill file"):
        SkillDocument.load(tmp_path / "missing.md")
    crlf = tmp_path / "crlf.md"
    crlf.write_bytes(b"- a\r\n- b\r\n")
    assert SkillDocument.load(crlf).text == "- a\n- b\n"


def test_hash_is_stable_and_content_addressed():
    a, b = SkillDocument(SKILL), SkillDocument(SKILL)
    assert a.content_hash == b.content_hash == skill_hash(SKILL)
    assert len(a.content_hash) == 64
    # A known sha256 pins the definition (UTF-8 bytes of the text, nothing else).
    assert skill_hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert SkillDocument(SKILL + " ").content_hash != a.content_hash
    assert a == b and len({a, b}) == 1


def test_store_writes_numbered_versions_atomically(tmp_path):
    store = SkillStore(tmp_path / "skills")
    assert store.versions() == [] and store.latest() is None
    v1 = store.save(SkillDocument(SKILL))
    new, _ = SkillDocument(SKILL).apply_edits([{"op": "append", "content": "- more"}])
    v2 = store.save(new)
    assert (v1.number, v2.number) == (1, 2)
    assert v1.path.name == "v0001.md" and v2.path.name == "v0002.md"
    assert v1.path.read_text() == SKILL
    assert store.load(1) == SkillDocument(SKILL) and store.load() == new
    assert store.latest().content_hash == new.content_hash == v2.content_hash
    assert sorted(p.name for p in (tmp_path / "skills").iterdir()) == ["v0001.md", "v0002.md"]
    # A fresh store over the same folder (a resumed run) continues the numbering.
    assert SkillStore(tmp_path / "skills").save("- third\n").path.name == "v0003.md"
    with pytest.raises(HonedError, match="skill version 9 not found"):
        store.load(9)


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "best_skill.md"
    atomic_write_text(target, "old\n")

    def boom(*args):
        raise OSError("disk full")

    monkeypatch.setattr("honed.runs.files.os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["best_skill.md"]  # temp file cleaned up


# --- parsing edits from untrusted LLM output -------------------------------------------------


def test_parse_plain_fenced_nested_and_single():
    edit = {"op": "append", "content": "- x", "rationale": "seen twice"}
    assert parse_edits(json.dumps([edit])).edits == [Edit("append", "", "- x")]
    fenced = "Here is my patch:\n```json\n" + json.dumps({"edits": [edit]}) + "\n```\nThanks."
    parsed = parse_edits(fenced)
    assert parsed.problems == [] and parsed.edits[0].meta == {"rationale": "seen twice"}
    nested = {"failure_summary": "s", "patch": {"edits": [edit]}}
    assert len(parse_edits(json.dumps(nested)).edits) == 1
    assert parse_edits(nested).data == nested  # decoded JSON is accepted too
    assert parse_edits(json.dumps(edit)).edits[0].op == "append"
    assert (
        Edit.from_raw({"op": " Insert_After ", "target": "t", "content": "c"}).op == "insert_after"
    )


def test_parse_repairs_broken_json_and_reports_dropped_edits():
    broken = '{"edits": [{"op": "append", "content": "- x",}, {"op": "explode"}, 7'
    parsed = parse_edits(broken)
    assert parsed.edits == [Edit("append", "", "- x")]
    assert parsed.problems == [
        "edit 2: unknown op 'explode' (expected one of append, insert_after, replace, delete)",
        "edit 3: malformed edit: expected a JSON object, got int",
    ]


@pytest.mark.parametrize(
    "reply", ["", "I have no suggestions.", "42", '{"summary": "nothing"}', None]
)
def test_parse_never_raises_on_garbage(reply):
    parsed = parse_edits(reply)
    assert parsed.edits == [] and len(parsed.problems) == 1


def test_edit_to_dict_round_trips():
    edit = Edit.from_raw({"op": "replace", "target": "a", "content": "b", "support_count": 3})
    assert edit.to_dict() == {"op": "replace", "target": "a", "content": "b", "support_count": 3}
    assert Edit.from_raw(edit.to_dict()) == edit
    assert Edit("delete", "a").to_dict() == {"op": "delete", "target": "a"}
    assert Edit("append", content="b").to_dict() == {"op": "append", "content": "b"}
