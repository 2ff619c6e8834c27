"""The question-answering environment: SQuAD-style EM and F1, answer extraction, splits, errors."""

from __future__ import annotations

import json

import pytest

from honed.envs.qa import exact_match, normalize_answer, token_f1
from honed.envs.registry import build_env
from honed.errors import HonedError


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def qa(tmp_path, rows, **args):
    return build_env("qa", "qa", seed=0, args={"path": write(tmp_path / "qa.jsonl", rows), **args})


def test_normalisation_is_squad_style():
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("An apple, a pear") == "apple pear"


def test_exact_match_and_token_f1():
    assert exact_match("the Paris.", "paris") == 1.0
    assert exact_match("Paris, France", "Paris") == 0.0
    assert token_f1("Paris France", "Paris") == pytest.approx(2 / 3)
    assert token_f1("london", "paris") == 0.0
    assert token_f1("", "") == 1.0
    assert token_f1("the", "paris") == 0.0  # nothing left after normalisation


def test_scores_use_the_best_answer_and_the_text_after_the_marker(tmp_path):
    env = qa(
        tmp_path,
        [{"question": "Capital of France?", "answer": ["Paris", "City of Paris"], "kind": "geo"}],
        test_fraction=0.0,
        validation_fraction=0.0,
    )
    (item,) = env.items("train")
    replies = [
        "Let me think. It is Rome.\nAnswer: Paris",
        "answer: the city of Paris\nThanks",
        "Paris is the capital",
        "ANSWER: Lyon",
    ]
    scores = env.score_batch([item] * 4, replies)
    assert [sc.success for sc in scores] == [1.0, 1.0, 0.0, 0.0]
    assert scores[2].reward == pytest.approx(0.5)  # 'paris capital' vs 'paris'
    assert scores[3].components == {"exact_match": 0.0, "f1": 0.0}
    assert env.reference(item) == "Paris" and env.item_kind(item) == "geo"
    whole = qa(tmp_path, [{"question": "q", "answer": "x"}], answer_marker=None)
    assert whole.extract("Answer: x") == "Answer: x"


def test_numbers_are_accepted_as_answers(tmp_path):
    env = qa(tmp_path, [{"question": "2+2?", "answer": 4}], test_fraction=0, validation_fraction=0)
    (item,) = env.items("train")
    assert env.score_batch([item], ["Answer: 4"])[0].success == 1.0


def test_splits_are_disjoint_and_stable(tmp_path):
    rows = [{"question": f"question {i}?", "answer": str(i)} for i in range(200)]
    env = qa(tmp_path, rows)
    splits = {s: {i.key for i in env.items(s)} for s in ("train", "validation", "test")}
    assert sum(len(keys) for keys in splits.values()) == 200
    assert not (splits["train"] & splits["test"] or splits["train"] & splits["validation"])
    assert not splits["validation"] & splits["test"]
    assert 20 < len(splits["test"]) < 60 and 20 < len(splits["validation"]) < 60
    again = qa(tmp_path, list(reversed(rows)))
    assert {i.key for i in again.items("test")} == splits["test"]


def test_explicit_split_files(tmp_path):
    env = build_env(
        "qa",
        "qa",
        seed=0,
        args={
            "path": write(tmp_path / "train.jsonl", [{"question": "a", "answer": "1"}]),
            "test_path": write(tmp_path / "test.jsonl", [{"question": "b", "answer": "2"}]),
            "validation_path": write(tmp_path / "val.jsonl", [{"question": "c", "answer": "3"}]),
        },
    )
    assert [i.data["question"] for i in env.items("validation")] == ["c"]
    assert [i.data["question"] for i in env.items("test")] == ["b"]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("{not json", "not valid JSON"),
        ({"question": "q"}, "missing the answer field 'answer'"),
        ({"question": "q", "answer": []}, "must be a string or number, or a non-empty list"),
        ({"question": "q", "answer": {"a": 1}}, "must be a string or number"),
        ({"question": "q", "answer": "a", "kind": 3}, "the kind field 'kind' must be a string"),
        ({"answer": "a"}, "missing the prompt field 'question'"),
    ],
)
def test_malformed_lines_name_the_file_and_line(tmp_path, bad, problem):
    rows = [{"question": "ok", "answer": "fine"}, "", bad]
    with pytest.raises(HonedError, match=rf"qa.jsonl, line 3: .*{problem}"):
        qa(tmp_path, rows)


def test_bad_arguments_name_the_environment(tmp_path):
    with pytest.raises(HonedError, match=r"environment 'qa' \(qa\): test_fraction \+"):
        qa(tmp_path, [{"question": "q", "answer": "a"}], test_fraction=0.6, validation_fraction=0.6)
    with pytest.raises(HonedError, match="answer_marker must be a non-empty string or null"):
        qa(tmp_path, [{"question": "q", "answer": "a"}], answer_marker="")
