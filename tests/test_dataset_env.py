"""The user `dataset` environment: JSONL reading, the TRL-style reward call, splits, errors."""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from honed.envs.base import Sample
from honed.envs.dataset import DatasetEnv
from honed.errors import HonedError
from honed.reach import ImportSpec
from honed.types import SPLITS
from honed.user_code import load_object

REPO = Path(__file__).resolve().parents[1]

REWARDS = """
import math

CALLS = []


def record(prompts, completions, completion_ids, **columns):
    CALLS.append({"prompts": prompts, "completions": completions,
                  "completion_ids": completion_ids, **columns})
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, columns["answer"])]


def half(completions, **kwargs):
    return [0.5] * len(completions)


def only_answer(completions, answer):
    return [float(c == a) for c, a in zip(completions, answer)]


def needs_solution(completions, solution):
    return [0.0] * len(completions)


def boom(completions, **kwargs):
    raise ValueError("bad completion")


def nan(completions, **kwargs):
    return [0.0] * (len(completions) - 1) + [math.nan]


def inf(completions, **kwargs):
    return [math.inf] * len(completions)


def none_entry(completions, **kwargs):
    return [None] * len(completions)


def text_entry(completions, **kwargs):
    return ["1"] * len(completions)


def short(completions, **kwargs):
    return [1.0]


def scalar(completions, **kwargs):
    return 1.0


NOT_A_FUNCTION = 3
"""


def write_jsonl(path: Path, rows: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(n: int = 40) -> list[dict]:
    return [{"prompt": f"{i}+1=", "answer": str(i + 1), "id": i} for i in range(n)]


@pytest.fixture
def files(tmp_path):
    """A data file and a reward module in a temporary directory."""
    (tmp_path / "rewards.py").write_text(REWARDS)
    return tmp_path, write_jsonl(tmp_path / "data.jsonl", rows())


def make(files, fn="record", **args) -> DatasetEnv:
    tmp, data = files
    return DatasetEnv("ds", path=str(data), reward=f"{tmp / 'rewards.py'}:{fn}", **args)


def calls(files) -> list[dict]:
    return load_object(ImportSpec.parse(f"{files[0] / 'rewards.py'}:CALLS"), "test")


# Reading the file --------------------------------------------------------------------------


def test_rows_become_items_with_data_and_stable_keys(files):
    env = make(files)
    items = [item for split in SPLITS for item in env.items(split)]
    assert len(items) == 40
    item = next(i for i in items if i.data["id"] == 7)
    assert item.data == {"prompt": "7+1=", "answer": "8", "id": 7}
    assert env.prompt(item) == "7+1="
    assert item.key.startswith("ds:") and len(item.key) == len("ds:") + 12
    assert item.env == "ds"
    assert [i.key for i in make(files).items("train")] == [i.key for i in env.items("train")]


def test_blank_lines_are_skipped(files, tmp_path):
    data = tmp_path / "blank.jsonl"
    data.write_text('\n{"prompt": "a"}\n   \n{"prompt": "b"}\n\n')
    env = DatasetEnv("ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:half")
    assert sum(len(env.items(s)) for s in SPLITS) == 2


@pytest.mark.parametrize(
    ("lines", "line", "problem"),
    [
        (['{"prompt": "a"}', "", '{"prompt": "b"'], 3, "not valid JSON"),
        (['{"prompt": "a"}', "[1, 2]"], 2, "expected a JSON object, got list"),
        (['{"question": "a"}'], 1, "missing the prompt field 'prompt' \\(fields: question\\)"),
        (
            ['{"prompt": "a"}', '{"prompt": 3}'],
            2,
            "the prompt field 'prompt': a prompt must be text or a non-empty list of chat",
        ),
        (['{"prompt": []}'], 1, "the prompt field 'prompt': a prompt must be text or a non-emp"),
        (
            ['{"prompt": [{"role": "user"}]}'],
            1,
            "the prompt field 'prompt': message 0 must be an object with a text 'content'",
        ),
        (
            ['{"prompt": [{"role": "robot", "content": "x"}]}'],
            1,
            "the prompt field 'prompt': message 0 has role 'robot'; expected one of system, "
            "user, assistant, tool",
        ),
        (
            [
                '{"prompt": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}'
            ],
            1,
            "the prompt field 'prompt': the last message must be the user's",
        ),
    ],
)
def test_malformed_lines_name_file_and_line(files, tmp_path, lines, line, problem):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(HonedError, match=f"bad.jsonl, line {line}: {problem}"):
        DatasetEnv("ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:half")


def test_a_byte_order_mark_is_tolerated(files, tmp_path):
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n')
    env = DatasetEnv("ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:half")
    assert [env.prompt(i) for s in SPLITS for i in env.items(s)] == ["a"]


def test_missing_and_empty_files(files, tmp_path):
    reward = f"{tmp_path / 'rewards.py'}:half"
    with pytest.raises(HonedError, match=r"dataset file not found: .*nope.jsonl"):
        DatasetEnv("ds", path=str(tmp_path / "nope.jsonl"), reward=reward)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(HonedError, match=r"empty.jsonl has no rows"):
        DatasetEnv("ds", path=str(tmp_path / "empty.jsonl"), reward=reward)
    with pytest.raises(HonedError, match=r"dataset file not found: .*gone.jsonl"):
        make(files, test_path=str(tmp_path / "gone.jsonl"))


def test_a_column_may_not_shadow_a_reward_argument(files, tmp_path):
    data = write_jsonl(tmp_path / "clash.jsonl", [{"prompt": "a", "completions": 1}])
    with pytest.raises(HonedError, match="column 'completions' clashes"):
        DatasetEnv("ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:half")


# The reward call ---------------------------------------------------------------------------


def test_reward_receives_every_column_aligned_with_completions(files, tmp_path):
    data = write_jsonl(
        tmp_path / "cols.jsonl",
        [{"prompt": "1+1=", "answer": "2", "hint": "x"}, {"prompt": "2+2=", "answer": "4"}],
    )
    env = DatasetEnv(
        "ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:record", test_fraction=0.0
    )
    items = env.items("train")
    scores = env.score_batch(items, ["2", " 5 "], completion_ids=[[50], [32, 53, 32]])
    assert [s.reward for s in scores] == [1.0, 0.0]
    assert [s.success for s in scores] == [1.0, 0.0]
    assert scores[0].components == {"record": 1.0}
    call = calls(files)[-1]
    assert call == {
        "prompts": ["1+1=", "2+2="],
        "completions": ["2", " 5 "],  # raw text: the function decides about whitespace
        "completion_ids": [[50], [32, 53, 32]],
        "answer": ["2", "4"],
        "hint": ["x", None],  # a row without the column gives None
    }
    env.score_batch(items[:1], ["2"])
    assert calls(files)[-1]["completion_ids"] is None


def test_chat_message_prompts_are_items_and_reach_the_reward_as_trl_passes_them(files, tmp_path):
    """A prompt column of chat messages: stable keys and splits by the messages' content, and
    the completion reaches the reward as the assistant's message (TRL's conversational form)."""
    chat = [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "What is 3 + 5?"},
    ]
    data = write_jsonl(
        tmp_path / "chat.jsonl",
        [{"prompt": chat, "answer": "8"}, {"prompt": "1+1=", "answer": "2"}],
    )
    env = DatasetEnv(
        "ds", path=str(data), reward=f"{tmp_path / 'rewards.py'}:half", test_fraction=0.0
    )
    items = env.items("train")
    assert [env.prompt(i) for i in items] == [chat, "1+1="]
    reordered = {**chat[0]}, *chat[1:]  # same content, keys in another order: same item
    again = write_jsonl(tmp_path / "again.jsonl", [{"answer": "8", "prompt": list(reordered)}])
    other = DatasetEnv(
        "ds", path=str(again), reward=f"{tmp_path / 'rewards.py'}:half", test_fraction=0.0
    )
    assert other.items("train")[0].key == items[0].key
    seen = []

    def record(completions, **kw):
        seen.append(completions)
        return [0.0] * len(completions)

    env = DatasetEnv("ds", path=str(data), reward=record, test_fraction=0.0)
    env.score_batch(items, ["8", "2"])
    assert seen == [[[{"role": "assistant", "content": "8"}], "2"]]


def test_a_function_without_kwargs_gets_only_what_it_names(files):
    env = make(files, "only_answer")
    item = env.items("train")[0]
    assert env.score_batch([item], [item.data["answer"]])[0].reward == 1.0


def test_a_required_argument_that_is_not_a_column_fails_at_construction(files):
    with pytest.raises(HonedError, match=r"requires argument 'solution'.*columns: answer, id"):
        make(files, "needs_solution")


def test_success_threshold(files):
    item = make(files, "half").items("train")[0]
    assert make(files, "half").score_batch([item], ["x"])[0].success == 0.0
    score = make(files, "half", success_threshold=0.5).score_batch([item], ["x"])[0]
    assert (score.reward, score.success) == (0.5, 1.0)


def test_empty_batch_does_not_call_the_function(files):
    assert make(files, "boom").score_batch([], []) == []


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        ("boom", "'.*rewards.py:boom' raised ValueError: bad completion"),
        ("nan", "'.*rewards.py:nan' returned nan at index 2"),
        ("inf", "'.*rewards.py:inf' returned inf at index 0"),
        ("none_entry", "'.*rewards.py:none_entry' returned None at index 0"),
        ("text_entry", "'.*rewards.py:text_entry' returned '1' at index 0"),
        ("short", "'.*rewards.py:short' returned 1 rewards for 3 completions"),
        ("scalar", "'.*rewards.py:scalar' must return a list of floats, got float"),
    ],
)
def test_bad_reward_results_are_honed_errors(files, fn, message):
    env = make(files, fn)
    items = env.items("train")[:3]
    with pytest.raises(HonedError, match=message):
        env.score_batch(items, ["a", "b", "c"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{tmp}/rewards.py:nope", "has no attribute 'nope'"),
        ("{tmp}/rewards.py:recrod", "did you mean 'record'"),
        ("{tmp}/rewards.py:NOT_A_FUNCTION", "is not callable"),
        ("{tmp}/missing.py:f", "file not found"),
        ("no_such_module_xyz:f", "cannot import reward function 'no_such_module_xyz:f'"),
        ("just_a_name", "must look like 'module:name'"),
    ],
)
def test_reward_import_failures(files, spec, message):
    tmp, data = files
    with pytest.raises(HonedError, match=message):
        DatasetEnv("ds", path=str(data), reward=spec.format(tmp=tmp))


def test_a_reward_file_that_fails_to_import(files, tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_dependency_xyz\n")
    with pytest.raises(
        HonedError, match=r"importing reward function .* raised ModuleNotFoundError"
    ):
        DatasetEnv("ds", path=str(files[1]), reward=f"{tmp_path / 'broken.py'}:f")


def test_reward_module_is_found_next_to_the_config(files, tmp_path, monkeypatch):
    from honed.config import load_config
    from honed.envs.registry import build_envs

    (tmp_path / "honed_test_cwd_reward.py").write_text(
        "def exact(completions, answer, **kwargs):\n"
        "    return [float(c == a) for c, a in zip(completions, answer)]\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        "envs: [{name: ds, type: dataset, args: {path: data.jsonl, "
        "reward: 'honed_test_cwd_reward:exact'}}]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        env = build_envs(load_config(config).envs, seed=0)["ds"]
        item = env.items("train")[0]
        assert env.score_batch([item], [item.data["answer"]])[0].reward == 1.0
    finally:
        sys.modules.pop("honed_test_cwd_reward", None)


def test_pickles_and_reloads_the_function(files):
    env = make(files, "half")
    clone = pickle.loads(pickle.dumps(env))
    item = clone.items("train")[0]
    assert clone.score_batch([item], ["x"])[0].reward == 0.5
    assert [i.key for i in clone.items("test")] == [i.key for i in env.items("test")]


# Splits ------------------------------------------------------------------------------------


def keys_by_split(env) -> dict[str, set[str]]:
    return {s: {i.key for i in env.items(s)} for s in SPLITS}


def test_hash_splits_are_disjoint_and_ignore_line_order_and_seed(files):
    tmp = files[0]
    reward = f"{tmp / 'rewards.py'}:half"
    many = rows(400)
    forward = DatasetEnv(
        "ds",
        path=str(write_jsonl(tmp / "f.jsonl", many)),
        reward=reward,
        test_fraction=0.2,
        validation_fraction=0.1,
    )
    backward = DatasetEnv(
        "ds",
        seed=9,
        path=str(write_jsonl(tmp / "b.jsonl", many[::-1])),
        reward=reward,
        test_fraction=0.2,
        validation_fraction=0.1,
    )
    splits = keys_by_split(forward)
    assert splits == keys_by_split(backward)
    assert not splits["train"] & splits["test"]
    assert not splits["train"] & splits["validation"]
    assert not splits["validation"] & splits["test"]
    assert sum(len(k) for k in splits.values()) == 400
    assert 50 <= len(splits["test"]) <= 110 and 20 <= len(splits["validation"]) <= 65


def test_unknown_split(files):
    with pytest.raises(HonedError, match="no split 'dev'; valid splits: train, validation, test"):
        make(files).items("dev")


def test_explicit_held_out_files_win_over_train(files):
    tmp = files[0]
    test_file = write_jsonl(tmp / "test.jsonl", [{"prompt": "0+1=", "answer": "1"}, *rows(45)[40:]])
    env = make(files, test_path=str(test_file), validation_fraction=0.25)
    prompts = {s: {env.prompt(i) for i in env.items(s)} for s in SPLITS}
    assert prompts["test"] == {"0+1="} | {f"{i}+1=" for i in range(40, 45)}
    assert "0+1=" not in prompts["train"] | prompts["validation"]  # dropped from train
    assert not prompts["train"] & prompts["validation"]
    assert len(prompts["train"]) + len(prompts["validation"]) == 39
    assert prompts["validation"]  # carved from the main file by hash


def test_duplicate_prompts_are_kept_under_numbered_keys_in_one_split(files):
    tmp = files[0]
    dup = [{"prompt": "same", "answer": str(i)} for i in range(3)] + rows(20)
    env = DatasetEnv(
        "ds", path=str(write_jsonl(tmp / "dup.jsonl", dup)), reward=f"{tmp / 'rewards.py'}:half"
    )
    copies = [(s, i) for s in SPLITS for i in env.items(s) if i.data["prompt"] == "same"]
    assert len({s for s, _ in copies}) == 1
    keys = [i.key for _, i in copies]
    assert keys[1:] == [keys[0] + "#2", keys[0] + "#3"]
    assert [i.data["answer"] for _, i in copies] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"test_fraction": 1.5}, "test_fraction must be between 0 and 1"),
        ({"test_fraction": 0.6, "validation_fraction": 0.6}, "must be at most 1"),
        ({"success_threshold": float("nan")}, "success_threshold must be a finite number"),
        ({"reference_field": "solution"}, "reference_field 'solution' is not a column"),
    ],
)
def test_invalid_args(files, args, message):
    with pytest.raises(HonedError, match=message):
        make(files, **args)


# References and rollouts -------------------------------------------------------------------


def test_reference_field(files, tmp_path):
    data = write_jsonl(
        tmp_path / "ref.jsonl",
        [{"prompt": "a", "answer": "x"}, {"prompt": "b", "answer": 7}, {"prompt": "c"}],
    )
    env = DatasetEnv(
        "ds",
        path=str(data),
        reward=f"{tmp_path / 'rewards.py'}:half",
        reference_field="answer",
        test_fraction=0.0,
    )
    assert [env.reference(i) for i in env.items("train")] == ["x", "7", None]
    assert env.sft_examples(env.items("train")[0]) == [("a", "x")]
    assert env.sft_examples(env.items("train")[2]) == []
    assert make(files).reference(env.items("train")[0]) is None


class EchoGenerator:
    """Completes every prompt with a fixed script of texts, cycling per generation."""

    def __init__(self, texts: Sequence[str]):
        self.texts = texts

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def generate(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[Sample]:
        out = []
        for k, prompt in enumerate(prompts):
            text = self.texts[k % len(self.texts)]
            out.append(
                Sample(self.encode(prompt), self.encode(text), [0.0] * len(text), text, False)
            )
        return out


def test_rollout_scores_through_the_user_function(files):
    env = make(files)
    items = [i for i in env.items("train") if i.data["id"] in (3, 4)]
    groups = env.rollout(items, EchoGenerator(["4", "5", " 4 "]), num_generations=3, seed=0)
    assert [g.item_key for g in groups] == [i.key for i in items]
    assert [len(g.trajectories) for g in groups] == [3, 3]
    assert groups[0].rewards() == [1.0, 0.0, 1.0]  # id 3: answer "4"
    assert groups[1].rewards() == [0.0, 1.0, 0.0]  # id 4: answer "5"
    assert groups[0].trajectories[0].components == {"record": 1.0}


def test_the_shipped_example_works():
    data = REPO / "examples" / "dataset" / "data.jsonl"
    assert data.stat().st_size < 100_000
    env = DatasetEnv(
        "subtraction",
        path=str(data),
        reward=str(REPO / "examples" / "dataset" / "reward.py") + ":exact",
        reference_field="answer",
    )
    items = [i for s in SPLITS for i in env.items(s)]
    assert len(items) == 300 and env.items("test")
    scores = env.score_batch(items, [env.reference(i) for i in items])
    assert all(s.success == 1.0 for s in scores)
    assert not any(s.reward for s in env.score_batch(items, ["x"] * len(items)))
