"""The generator (splits, determinism, reference plan) and the JSONL loader."""

import json

import pytest

from honed.envs.memory import MemoryEnv
from honed.envs.memory.data import NAMES, DataSpec, entities_of, generate, load_jsonl
from honed.envs.memory.retrieval import IdealReader, answer_scores
from honed.errors import HonedError
from honed.types import SPLITS

SPEC = DataSpec(train_size=40, validation_size=20, test_size=20)


def test_splits_are_disjoint_by_entity():
    assert not set(NAMES["train"]) & set(NAMES["test"])
    seen = {
        split: set().union(*(entities_of(i) for i in generate(split, SPEC))) for split in SPLITS
    }
    assert all(seen.values())
    assert not seen["train"] & seen["validation"]
    assert not seen["train"] & seen["test"]
    assert not seen["validation"] & seen["test"]


def test_generation_is_deterministic_by_seed():
    assert generate("test", SPEC, seed=3) == generate("test", SPEC, seed=3)
    assert generate("test", SPEC, seed=3) != generate("test", SPEC, seed=4)


def test_instances_hold_every_question_type_and_plan_step():
    inst = generate("train", SPEC)[0]
    assert len(inst.chunks) == len(inst.plan) == 4 + 2 + 1 + 1 + 2
    types = sorted(q.type for q in inst.questions)
    assert types == ["event-time", "event-time", "fact", "fact", "fact", "two-hop", "updated-fact"]
    assert sum(not ops for ops in inst.plan) == 2  # chatter-only chunks: nothing to store
    assert sum(op.op == "update" for ops in inst.plan for op in ops) == 1


def test_sizes_are_configurable_and_checked():
    inst = generate(
        "train",
        DataSpec(train_size=1, entities=3, facts=3, events=0, updates=2, relations=2, chatter=0),
    )[0]
    assert len(inst.chunks) == 9 + 2 + 2
    with pytest.raises(HonedError, match="relations need at least 2 entities"):
        generate("train", DataSpec(entities=1))
    with pytest.raises(HonedError, match="facts"):
        generate("train", DataSpec(facts=4))


@pytest.mark.parametrize("split", SPLITS)
def test_reference_plan_builds_a_memory_that_answers_every_question(split):
    env = MemoryEnv("memory", train_size=40, validation_size=20, test_size=20)
    reader = IdealReader()
    for item, inst in zip(env.items(split), env.instances(split), strict=True):
        memory = env.reference_memory(item)
        assert answer_scores(memory, inst.questions, reader, env.top_k) == [1.0] * len(
            inst.questions
        )
        total = sum(env.count(c) for c in inst.chunks)
        assert memory.tokens() <= 0.5 * total  # the plan beats storing everything by 2x


def test_sft_targets_are_the_reference_calls_on_the_reference_memory():
    env = MemoryEnv("memory", train_size=5)
    item = env.items("train")[0]
    examples = env.sft_examples(item)
    inst = env.instances("train")[0]
    assert len(examples) == len(inst.chunks)
    first_prompt, first_target = examples[0]
    assert first_prompt.endswith(f"chunk: {inst.chunks[0]}\ncalls:")
    assert "\ns1 " not in first_prompt  # memory starts empty
    assert (first_target == "[]") == (not inst.plan[0])
    update = next(t for _, t in examples if t.startswith('[{"u":'))
    assert update.startswith('[{"u":"s')
    # The entry it updates is visible in its prompt.
    prompt = next(p for p, t in examples if t == update)
    assert f"\n{json.loads(update)[0]['u']} " in prompt
    assert all(t == "[]" for (_, t), ops in zip(examples, inst.plan, strict=True) if not ops)


def _write(tmp_path, lines):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps(
    {
        "id": "a",
        "split": "validation",
        "chunks": ["Ann lives in Oslo."],
        "questions": [{"question": "Where?", "answer": "Oslo"}],
    }
)


def test_loader_reads_the_documented_schema(tmp_path):
    summary = {
        "chunks": ["c1", "c2"],
        "questions": [
            {"question": "Sum?", "keywords": ["war"], "type": "summary"},
            {"question": "Q", "answer": ["x", "y"]},
        ],
    }
    data = load_jsonl(_write(tmp_path, [GOOD, "", json.dumps(summary)]))
    assert [i.id for i in data["validation"]] == ["a"]
    (inst,) = data["test"]  # default split
    assert inst.id == "line3" and inst.questions[0].keywords == ["war"]
    assert inst.questions[1].answers == ["x", "y"] and inst.questions[1].type == "fact"
    assert inst.plan is None


def test_loader_reports_every_malformed_line_by_number(tmp_path):
    lines = [
        GOOD,
        "{not json",
        json.dumps({"chunks": [], "questions": [{"question": "q", "answer": "a"}]}),
        json.dumps({"chunks": ["c"], "questions": [{"question": "q"}]}),
        json.dumps(
            {"chunks": ["c"], "questions": [{"question": "q", "answer": "a"}], "split": "dev"}
        ),
        GOOD,  # duplicate id
        "[1, 2]",
    ]
    with pytest.raises(HonedError) as err:
        load_jsonl(_write(tmp_path, lines))
    message = str(err.value)
    assert "6 malformed line(s)" in message
    for number, reason in [
        (2, "not valid JSON"),
        (3, "'chunks'"),
        (4, "questions[0] needs an 'answer' or 'keywords'"),
        (5, "split must be one of"),
        (6, "duplicate id 'a'"),
        (7, "expected a JSON object"),
    ]:
        assert f"line {number}: {reason}" in message
    assert "line 1:" not in message


def test_loader_names_a_missing_file(tmp_path):
    with pytest.raises(HonedError, match="cannot read"):
        load_jsonl(tmp_path / "absent.jsonl")
