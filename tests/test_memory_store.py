"""The three-store memory: ids, duplicates, the core cap, failures, JSON round-trip."""

from honed.envs.memory.store import CORE, EPISODIC, SEMANTIC, Memory, store_name, store_of_id


def test_ids_are_short_per_store_and_never_reused():
    m = Memory()
    assert m.insert(SEMANTIC, "Ann lives in Oslo").memory_id == "s1"
    assert m.insert(SEMANTIC, "Bob is a cook").memory_id == "s2"
    assert m.insert(EPISODIC, "Day 3: Ann went to Rome").memory_id == "e1"
    assert m.delete(SEMANTIC, "s2").ok
    assert m.insert(SEMANTIC, "Cy has a cat").memory_id == "s3"
    assert [i for i, _ in m.items(SEMANTIC)] == ["s1", "s3"]


def test_exact_duplicate_is_skipped_and_reported():
    m = Memory()
    m.insert(SEMANTIC, "Ann lives in Oslo")
    result = m.insert(SEMANTIC, "  Ann lives in Oslo ")
    assert not result.ok and "duplicate of s1" in result.message
    assert len(m.items(SEMANTIC)) == 1
    # The same text in the other store is not a duplicate.
    assert m.insert(EPISODIC, "Ann lives in Oslo").ok
    # Updating an entry into a copy of another entry is refused too.
    m.insert(SEMANTIC, "Bob is a cook")
    assert not m.update(SEMANTIC, "Ann lives in Oslo", "s2").ok
    assert m.items(SEMANTIC)[1] == ("s2", "Bob is a cook")


def test_core_is_capped_and_update_only():
    m = Memory(core_tokens=5)
    assert not m.insert(CORE, "anything").ok
    result = m.update(CORE, "one two three four five six seven")
    assert result.ok and "truncated" in result.message
    assert m.core == "one two three four five"
    assert m.update(CORE, "short text").message == "updated core"
    assert m.delete(CORE).ok and m.core == ""


def test_core_cap_uses_the_pluggable_counter():
    m = Memory(core_tokens=10, count=len)  # characters instead of words
    m.update(CORE, "abc defg hijkl")
    assert m.core == "abc defg" and len(m.core) <= 10


def test_update_and_delete_of_missing_ids_fail_with_a_reason():
    m = Memory()
    m.insert(SEMANTIC, "Ann lives in Oslo")
    assert m.update(SEMANTIC, "Ann lives in Lima", "s9").message == "no entry s9 in semantic"
    assert not m.update(SEMANTIC, "Ann lives in Lima").ok  # id required outside core
    assert not m.delete(SEMANTIC, "s9").ok
    assert not m.delete(EPISODIC, "s1").ok  # wrong store
    assert not m.insert(SEMANTIC, "   ").ok
    assert m.items(SEMANTIC) == [("s1", "Ann lives in Oslo")]


def test_tokens_count_texts_only():
    m = Memory()
    m.update(CORE, "Ann and Bob")
    m.insert(SEMANTIC, "Ann lives in Oslo")
    m.insert(EPISODIC, "Day 3: Ann went out")
    assert m.tokens() == 3 + 4 + 5


def test_json_round_trip_keeps_entries_and_counters():
    m = Memory(core_tokens=64)
    m.update(CORE, "People: Ann")
    m.insert(SEMANTIC, "Ann lives in Oslo")
    m.insert(SEMANTIC, "Ann is a cook")
    m.delete(SEMANTIC, "s1")
    m.insert(EPISODIC, "Day 1: Ann sang")
    back = Memory.from_json(m.to_json())
    assert back.to_dict() == m.to_dict()
    assert back.insert(SEMANTIC, "new fact here").memory_id == "s3"


def test_store_names_and_id_prefixes():
    assert store_name("semantic_memory") == SEMANTIC
    assert store_name(" E ") == EPISODIC
    assert store_name("procedural") is None and store_name(3) is None
    assert store_of_id("s12") == SEMANTIC and store_of_id("core") == CORE
    assert store_of_id("x1") is None and store_of_id("s") is None
