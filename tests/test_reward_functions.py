"""Reward functions as users write them: several with weights, TRL's signature, async ones with
a time limit, failures that name the function and the item; the LLM judge against a local HTTP
server; a sequence-classification reward model."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
import torch
from openai_server import FakeOpenAIServer, Reply, completion
from transformers import LlamaConfig, LlamaForSequenceClassification

from honed.envs.dataset import DatasetEnv
from honed.envs.rewards import RewardSet
from honed.envs.rewards.judge import LLMJudge, parse_score
from honed.errors import HonedError
from honed.models.tiny import build_char_tokenizer
from honed.types import Item

ITEMS = [Item(f"d:{i}", "d", {}) for i in range(3)]


def exact(completions, answer, **kwargs):
    return [float(c == a) for c, a in zip(completions, answer, strict=True)]


def length(completions, **kwargs):
    return [len(c) / 10 for c in completions]


async def slow_echo(completions, **kwargs):
    await asyncio.sleep(0.05 if completions[0] != "hang" else 30)
    return [1.0]


async def broken(completions, **kwargs):
    raise ValueError("no score for " + completions[0])


def args(completions, answer=("a", "b", "c")):
    return {"prompts": ["p"] * 3, "completions": completions, "answer": list(answer)}


def rewards(reward, weights=None, timeout=60.0) -> RewardSet:
    return RewardSet(
        "environment 'd'",
        reward,
        weights,
        timeout,
        ("prompts", "completions", "answer"),
        ["answer"],
    )


def test_several_functions_are_weighted_and_each_is_logged():
    out = rewards([exact, length], [1.0, 0.5])(ITEMS, args(["a", "xx", "c"]))
    assert out.rewards == pytest.approx([1.05, 0.1, 1.05])
    assert out.components[1] == {"exact": 0.0, "length": 0.2}


def test_weights_default_to_one_and_must_match():
    assert rewards([exact, length]).weights == [1.0, 1.0]
    with pytest.raises(HonedError, match="reward_weights must be 2 finite"):
        rewards([exact, length], [1.0])
    with pytest.raises(HonedError, match="reward_weights must be 1 finite"):
        rewards(exact, [float("nan")])


def test_a_name_for_a_component_and_names_must_differ():
    out = rewards([exact, {"function": exact, "name": "again"}])(ITEMS, args(["a", "b", "x"]))
    assert out.components[0] == {"exact": 1.0, "again": 1.0}
    with pytest.raises(HonedError, match="two reward functions are named 'exact'"):
        rewards([exact, exact])
    with pytest.raises(HonedError, match="a reward entry must be"):
        rewards([{"func": "x:y"}])
    with pytest.raises(HonedError, match="unknown reward type 'judge'"):
        rewards([{"type": "judge"}])


def test_async_functions_run_per_completion_concurrently_with_a_time_limit(caplog):
    reward = rewards([exact, slow_echo], timeout=1.0)
    out = reward(ITEMS, args(["a", "hang", "c"]))
    assert [c["slow_echo"] for c in out.components] == [1.0, 0.0, 1.0]
    assert out.problems == [{}, {"slow_echo": "timeout"}, {}]
    assert "did not finish within 1s for item 'd:1'" in caplog.text


def test_an_async_function_that_raises_names_the_item():
    with pytest.raises(
        HonedError, match=r"'.*broken' raised ValueError: no score for a \(scoring item 'd:0'\)"
    ):
        rewards(broken)(ITEMS, args(["a", "b", "c"]))


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda completions, **k: [1.0, None, 1.0], "returned None at index 1 for item 'd:1'"),
        (
            lambda completions, **k: [1.0, 1.0, float("nan")],
            "returned nan at index 2 for item 'd:2'",
        ),
        (lambda completions, **k: [1.0], "returned 1 rewards for 3 completions"),
        (lambda completions, **k: 1.0, "must return a list of floats, got float"),
    ],
)
def test_bad_results_stop_naming_the_function_and_the_item(fn, message):
    with pytest.raises(HonedError, match=message):
        rewards(fn)(ITEMS, args(["a", "b", "c"]))


def test_dataset_env_takes_several_rewards(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"q{i}", "answer": "a"}) + "\n" for i in range(4))
    )
    (tmp_path / "r.py").write_text(
        "def exact(completions, answer, **kw):\n"
        "    return [float(c == a) for c, a in zip(completions, answer)]\n"
        "async def short(completions, **kw):\n"
        "    return [float(len(completions[0]) < 3)]\n"
    )
    env = DatasetEnv(
        "d",
        path=str(data),
        reward=[f"{tmp_path}/r.py:exact", f"{tmp_path}/r.py:short"],
        reward_weights=[1.0, 0.25],
        test_fraction=0.0,
    )
    scores = env.score_batch(env.items("train")[:2], ["a", "long"])
    assert [s.reward for s in scores] == [1.25, 0.0]
    assert [s.success for s in scores] == [1.0, 0.0]
    again = pickle.loads(pickle.dumps(env))  # what a Ray worker gets: functions re-imported
    assert again.score_batch(env.items("train")[:1], ["a"])[0].components == {
        "exact": 1.0,
        "short": 1.0,
    }


# ----------------------------------------------------------------------------- the LLM judge


@pytest.mark.parametrize(
    ("verdict", "score"),
    [
        ("Correct and sourced.\nSCORE: 8", 8.0),
        ("**Score:** 7/10", 7.0),
        ("SCORE: 3\nOn reflection...\nSCORE: 9", 9.0),
        ("I would give it 8.", None),
        ("SCORE: 11", None),
        ("SCORE: 4/5", None),
        ("The score: 8 is what I'd say, but", None),
    ],
)
def test_verdicts_are_parsed_strictly(verdict, score):
    assert parse_score(verdict, 0, 10) == score


def judge_server(verdicts):
    def handler(req):
        user = req.messages[-1]["content"]
        if user.startswith("End with the line"):
            return verdicts.get("reminder", "still no score")
        for key, reply in verdicts.items():
            if key in user:
                return reply
        return "SCORE: 0"

    return FakeOpenAIServer(handler)


def test_the_judge_grades_against_the_rubric_with_a_cache():
    with judge_server({"good": "Fine.\nSCORE: 10", "meh": "SCORE: 4"}) as server:
        judge = LLMJudge(
            base_url=server.base_url, model="fake-model", rubric="Be right.", concurrency=2
        )
        first = judge(["q1", "q2", "q1"], ["good", "meh", "good"])
        assert list(first) == [1.0, 0.4, 1.0] and first.errors == [False, False, False]
        asked = len(server.chat_requests)
        assert asked == 2  # the repeated (prompt, completion) is graded once
        judge(["q1"], ["good"])
        assert len(server.chat_requests) == asked
        request = server.chat_requests[0]
        assert "Rubric:\nBe right." in request.messages[-1]["content"]
        assert request.body["temperature"] == 0.0


def test_an_unreadable_verdict_is_asked_again_then_an_error_or_a_counted_score():
    with judge_server({"odd": "I like it.", "reminder": "SCORE: 6"}) as server:
        judge = LLMJudge(base_url=server.base_url, model="fake-model", rubric="r")
        assert list(judge(["q"], ["odd"])) == [0.6]  # the reminder was answered
    with judge_server({"odd": "I like it."}) as server:
        judge = LLMJudge(base_url=server.base_url, model="fake-model", rubric="r")
        with pytest.raises(HonedError, match=r"no readable 'SCORE: <n>' line.*'still no score'"):
            judge(["q"], ["odd"])
        judge = LLMJudge(base_url=server.base_url, model="fake-model", rubric="r", error_score=0.0)
        verdicts = judge(["q", "q"], ["odd", "fine"])
        assert list(verdicts) == [0.0, 0.0] and verdicts.errors == [True, False]


def test_judge_errors_are_counted_per_component():
    with judge_server({"odd": "hmm"}) as server:
        spec = {
            "type": "llm_judge",
            "base_url": server.base_url,
            "model": "fake-model",
            "rubric": "r",
            "error_score": 0.0,
        }
        out = rewards([exact, spec])(ITEMS, args(["odd", "b", "c"]))
        assert out.problems == [{"llm_judge": "error"}, {}, {}]


def test_the_judge_retries_a_busy_server_and_fails_fast_on_a_wrong_model():
    busy = iter([Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"})])

    def handler(req):
        return next(busy, completion("SCORE: 5"))

    with FakeOpenAIServer(handler) as server:
        judge = LLMJudge(base_url=server.base_url, model="fake-model", rubric="r")
        assert list(judge(["q"], ["x"])) == [0.5]
        with pytest.raises(HonedError, match="model 'other' is not served"):
            LLMJudge(base_url=server.base_url, model="other", rubric="r")


def test_the_judge_reads_the_reference_column_and_whole_conversations():
    with judge_server({"REF-42": "SCORE: 10"}) as server:
        judge = LLMJudge(
            base_url=server.base_url, model="fake-model", rubric="r", reference_field="answer"
        )
        conversation = [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
            },
            {"role": "tool", "content": "2"},
            {"role": "assistant", "content": "2"},
        ]
        assert list(judge(["q"], [conversation], answer=["REF-42"])) == [1.0]
        text = server.chat_requests[0].messages[-1]["content"]
        assert 'calls f({"a": 1})' in text and "tool: 2" in text
        with pytest.raises(HonedError, match="reference_field 'answer' is not a column"):
            judge(["q"], ["x"])


# ----------------------------------------------------------------------------- the reward model


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("rm")
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_the_reward_model_scores_in_batches_as_it_scores_one_by_one(reward_model_dir):
    from honed.envs.rewards.reward_model import RewardModel

    model = RewardModel(path=str(reward_model_dir), batch_size=2)
    prompts = ["q1", "a longer question", "q3"]
    completions = ["yes", "no", "a much longer answer"]
    batched = model(prompts, completions)
    single = [model([p], [c])[0] for p, c in zip(prompts, completions, strict=True)]
    assert batched == pytest.approx(single, abs=1e-5)  # padding must not change a score
    assert len(set(batched)) == 3
    # through a reward entry, as a config names it
    out = rewards([{"type": "reward_model", "path": str(reward_model_dir)}])(
        ITEMS, args(completions)
    )
    assert [c["reward_model"] for c in out.components] == pytest.approx(
        RewardModel(path=str(reward_model_dir))(["p"] * 3, completions), abs=1e-6
    )


def test_a_missing_reward_model_is_a_clear_error(tmp_path):
    from honed.envs.rewards.reward_model import RewardModel

    with pytest.raises(
        HonedError, match="cannot load the reward model 'no/such-model': it is neither"
    ):
        RewardModel(path="no/such-model")
    with pytest.raises(HonedError, match="cannot load the reward model"):
        RewardModel(path=str(tmp_path))  # a folder without a model
