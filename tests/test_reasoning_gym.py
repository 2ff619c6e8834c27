"""The reasoning_gym environment, against the real reasoning-gym package: items from its
generators, scores from each task's own scorer, splits that never share a question, and every
kind of bad input as one clear error."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_run import small_config_data

from honed.envs.reasoning_gym import ANSWER_FORMATS, INSTALL, ReasoningGymEnv
from honed.envs.registry import build_env
from honed.errors import HonedError
from honed.types import SPLITS, Group, Sample, Trajectory

rg = pytest.importorskip(
    "reasoning_gym", reason=f"reasoning-gym is not installed; to run these tests: {INSTALL}"
)

REPO = Path(__file__).resolve().parents[1]
CHAIN_SUM = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 2}}
GCD = {"name": "gcd", "config": {"max_value": 20}}
LEGS = {"name": "leg_counting", "config": {"min_animals": 1, "max_animals": 2}}
EASY = [CHAIN_SUM, GCD, LEGS]


def make(seed: int = 0, **args) -> ReasoningGymEnv:
    """Built as a config builds it, through the registry; small splits, numbers read as the
    last number of the reply, no system prompt."""
    defaults = {
        "tasks": EASY,
        "size": 120,
        "validation_size": 30,
        "test_size": 30,
        "answer_format": "last_number",
        "system_prompt": None,
    }
    env = build_env("reasoning_gym", "rg", seed, {**defaults, **args})
    assert isinstance(env, ReasoningGymEnv)
    return env


def listing(env: ReasoningGymEnv) -> dict[str, list[tuple[str, str]]]:
    return {s: [(i.key, i.data["entry"]["question"]) for i in env.items(s)] for s in SPLITS}


def oracle(task: dict):
    """The task's own scorer, from reasoning-gym directly."""
    return rg.create_dataset(task["name"], **task.get("config", {})).score_answer


# Items ---------------------------------------------------------------------------------------


def test_items_are_deterministic_by_seed():
    first = listing(make(seed=1))
    assert first == listing(make(seed=1))
    assert first["test"] != listing(make(seed=2))["test"]
    # data_seed fixes the items whatever the run's seed
    assert listing(make(seed=1, data_seed=7)) == listing(make(seed=2, data_seed=7))


def test_items_are_the_same_in_another_process():
    """Keys must match across processes (resume, Ray workers): string hashing is salted per
    process, and nothing of it may reach an item."""
    code = (
        "import json, sys; from honed.envs.registry import build_env; "
        "env = build_env('reasoning_gym', 'rg', 3, json.loads(sys.argv[1])); "
        "print(json.dumps([i.key for s in ('test', 'validation', 'train') for i in env.items(s)]))"
    )
    args = {"tasks": EASY, "size": 40}
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    here = build_env("reasoning_gym", "rg", 3, args)
    assert json.loads(out.stdout) == [
        i.key for s in ("test", "validation", "train") for i in here.items(s)
    ]


def test_splits_are_disjoint_with_unique_keys():
    env = make()
    items = {s: env.items(s) for s in SPLITS}
    assert {s: len(v) for s, v in items.items()} == {"train": 120, "validation": 30, "test": 30}
    questions = {s: {i.data["entry"]["question"] for i in v} for s, v in items.items()}
    assert sum(map(len, questions.values())) == 180  # no repeat within a split
    assert not questions["train"] & questions["test"]
    assert not questions["train"] & questions["validation"]
    assert not questions["validation"] & questions["test"]
    keys = [i.key for v in items.values() for i in v]
    assert len(set(keys)) == len(keys)


def test_held_out_questions_never_reach_train_even_when_the_generator_repeats(caplog):
    """One-digit two-term sums have 200 questions (10 x 10 x two operators): the generator
    repeats itself and gives held-out questions to train; they are dropped, counted in the log,
    and the train split holds what is left."""
    tiny = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}
    with caplog.at_level(logging.WARNING, logger="honed.envs.reasoning_gym"):
        env = make(tasks=[tiny], size=400, validation_size=40, test_size=40)
        train = {i.data["entry"]["question"] for i in env.items("train")}
    held_out = {i.data["entry"]["question"] for s in ("validation", "test") for i in env.items(s)}
    assert len(held_out) == 80
    assert not train & held_out
    assert len(train) == len(env.items("train")) <= 200 - 80
    dropped = re.search(
        r"the train split dropped (\d+) questions already in a held-out split", caplog.text
    )
    assert dropped and int(dropped.group(1)) > 0
    assert "the train split has" in caplog.text and "of the 400 asked" in caplog.text


def test_splits_come_from_seeds_of_their_own(caplog):
    """Where questions are many, each split's generator gives questions of its own: none has
    to be dropped (reasoning-gym seeds item i with seed + i, so near seeds would overlap)."""
    with caplog.at_level(logging.WARNING, logger="honed.envs.reasoning_gym"):
        many = {"name": "chain_sum", "config": {"min_terms": 3, "min_digits": 2, "max_digits": 3}}
        env = make(tasks=[many], size=300, validation_size=100, test_size=100)
        assert len(env.items("train")) == 300
    assert "dropped" not in caplog.text


def test_a_split_is_built_without_the_ones_after_it():
    """`honed eval --split test` generates only the test split."""
    env = make(size=10_000_000)  # train would take minutes: it must not be generated
    assert len(env.items("test")) == 30


def test_the_composite_follows_the_weights():
    tasks = [{"name": "chain_sum", "weight": 3}, {"name": "leg_counting", "weight": 1}]
    env = make(tasks=tasks, size=800)
    share = sum(i.data["task"] == "chain_sum" for i in env.items("train")) / 800
    assert 0.70 < share < 0.80  # 0.75 within about 3 standard deviations
    assert {i.data["task"] for i in env.items("test")} == {"chain_sum", "leg_counting"}


def test_items_carry_the_tasks_metadata_and_difficulty():
    env = make()
    by_task = {i.data["task"]: i for i in env.items("train")}
    assert set(by_task) == {"chain_sum", "gcd", "leg_counting"}
    item = by_task["chain_sum"]
    assert re.fullmatch(r"rg:chain_sum:[0-9a-f]{12}", item.key) and item.env == "rg"
    assert item.data["entry"]["metadata"]["source_dataset"] == "chain_sum"
    assert item.data["difficulty"] == {"num_terms": [2, 2], "num_digits": [1, 2]}
    assert env.difficulty_key(item) == 'chain_sum:{"num_digits":[1,2],"num_terms":[2,2]}'
    assert env.difficulty_key(by_task["gcd"]) == 'gcd:{"num_terms":[2,2],"value":[1,20]}'
    assert env.item_kind(item) == "chain_sum"
    assert item.level is None


# Prompts -------------------------------------------------------------------------------------


def test_prompts_with_and_without_a_system_prompt():
    question = make().items("test")[0].data["entry"]["question"]
    assert make().prompt(make().items("test")[0]) == question
    direct = make(system_prompt="direct")
    assert direct.prompt(direct.items("test")[0]) == [
        {"role": "system", "content": rg.utils.SYSTEM_PROMPTS["direct"]},
        {"role": "user", "content": question},
    ]
    own = make(system_prompt="Reply with the number only.")
    assert own.prompt(own.items("test")[0])[0]["content"] == "Reply with the number only."


def test_tags_without_a_prompt_asking_for_them_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="honed.envs.reasoning_gym"):
        make(answer_format="tags", system_prompt="default")
    assert "no system prompt asks" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="honed.envs.reasoning_gym"):
        make(answer_format="tags", system_prompt=None)
    assert "no system prompt asks for <answer> tags" in caplog.text


# Scoring -------------------------------------------------------------------------------------


def test_every_reply_is_scored_by_its_tasks_own_scorer():
    env = make(answer_format="raw")
    scorers = {t["name"]: oracle(t) for t in EASY}
    items, replies = [], []
    for item in env.items("test"):
        gold = item.data["entry"]["answer"]
        for reply in (gold, f"{gold}.", f"The final answer is {gold}.", "99999", "", " 0 "):
            items.append(item)
            replies.append(reply)
    scores = env.score_batch(items, replies)
    for item, reply, score in zip(items, replies, scores, strict=True):
        expected = scorers[item.data["task"]](reply.strip() or None, item.data["entry"])
        assert score.reward == expected, (item.key, reply)
        assert score.success == float(expected == 1.0)
    assert any(0 < s.reward < 1 for s in scores)  # the tasks' partial credit is kept


def test_partial_credit_is_the_tasks_own():
    """gcd scores a reply that contains the answer by the share of it the answer takes."""
    env = make(tasks=[GCD], answer_format="raw")
    item = env.items("test")[0]
    gold = item.data["entry"]["answer"]
    (score,) = env.score_batch([item], [f"{gold}."])
    assert score.reward == len(gold) / (len(gold) + 1) and score.success == 0.0


def test_the_answer_format_decides_what_is_scored():
    item = next(i for i in make().items("test") if i.data["task"] == "chain_sum")
    gold = item.data["entry"]["answer"]
    reply = f"Let me add them.\nThe final answer is {gold}."
    tagged = f"<think>{gold} maybe 3</think>\n<answer> {gold} </answer>"

    def score(fmt: str, text: str) -> tuple[float, float]:
        env = make(answer_format=fmt, system_prompt="direct")
        (s,) = env.score_batch([env.items("test")[env.items("test").index(item)]], [text])
        return s.reward, s.components["format"]

    assert score("last_number", reply) == (1.0, 1.0)
    assert score("raw", reply)[0] < 0.2  # the task gives the sentence little credit
    assert score("last_line", reply)[0] == score("raw", f"The final answer is {gold}.")[0]
    assert score("tags", reply) == (0.0, 0.0)  # no tags: no answer
    assert score("tags", tagged) == (1.0, 1.0)
    assert score("tags", f"<answer>7</answer> no, <answer>{gold}</answer>") == (1.0, 1.0)
    assert score("last_number", "I don't know") == (0.0, 0.0)


@pytest.mark.parametrize("answer_format", ANSWER_FORMATS)
def test_the_reference_scores_one_in_every_format(answer_format):
    env = make(answer_format=answer_format, system_prompt="direct")
    items = env.items("test")
    scores = env.score_batch(items, [env.reference(i) for i in items])
    assert all(s.success == 1.0 and s.reward == 1.0 for s in scores)
    tagged = env.reference(items[0]).startswith("<answer>")
    assert tagged == (answer_format == "tags")


class Replies:
    """A generator whose every other completion answers chain_sum right and gcd with a number
    that holds the answer (`40` for 4: half credit from gcd's scorer, no success); the rest,
    and every leg_counting reply, answer nothing. Each task's metrics are then known."""

    def __init__(self, env: ReasoningGymEnv) -> None:
        self.gold = {env.prompt(i): i.data["entry"]["answer"] for i in env.items("test")}
        self.task = {env.prompt(i): i.data["task"] for i in env.items("test")}

    def encode(self, prompt):
        return [0]

    def reply(self, prompt, k: int) -> str:
        if k % 2 or self.task[prompt] == "leg_counting":
            return "It is x."
        return f"It is {self.gold[prompt]}{'0' if self.task[prompt] == 'gcd' else ''}."

    def generate(self, prompts, seeds):
        texts = [self.reply(p, k) for k, p in enumerate(prompts)]
        return [Sample([0], [1], [0.0], text, False) for text in texts]


def test_step_metrics_per_task():
    env = make()
    groups = env.rollout(env.items("test"), Replies(env), num_generations=2, seed=0)
    metrics = env.step_metrics(groups)
    assert metrics["success/rg/chain_sum/mean"] == 0.5
    assert metrics["reward/rg/chain_sum/groups_with_spread"] == 1.0
    assert metrics["success/rg/gcd/mean"] == 0.0
    # spread in reward, the signal GRPO learns from, partial credit included
    assert metrics["reward/rg/gcd/groups_with_spread"] == 1.0
    gcd = [g for g in groups if ":gcd:" in g.item_key]
    assert metrics["reward/rg/gcd/mean"] == _mean_reward(gcd) > 0
    assert metrics["reward/rg/leg_counting/mean"] == 0.0
    assert metrics["reward/rg/leg_counting/groups_with_spread"] == 0.0
    assert metrics["reward/rg/score_errors"] == 0.0
    # one completion per item (evaluation): no spread to speak of
    single = env.step_metrics(env.rollout(env.items("test"), Replies(env), 1, seed=0))
    assert not any(k.endswith("groups_with_spread") for k in single)


def _mean_reward(groups: list[Group]) -> float:
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards)


def test_a_scorer_that_raises_scores_zero_and_is_counted(caplog):
    """prime_factorization's scorer parses the answer and raises on prose."""
    env = make(tasks=["prime_factorization"], answer_format="raw")
    item = env.items("test")[0]
    with caplog.at_level(logging.WARNING, logger="honed.envs.reasoning_gym"):
        scores = env.score_batch([item, item], ["no idea", "none"])
    assert [s.reward for s in scores] == [0.0, 0.0]
    assert "ValueError" in scores[0].info["score_error"]
    assert caplog.text.count("scorer failed") == 1  # once per task
    group = Group("rg", item.key, [Trajectory([], s.reward, info=s.info) for s in scores])
    assert env.step_metrics([group])["reward/rg/score_errors"] == 2.0


@pytest.mark.parametrize("value", [float("nan"), 1.5, -0.5, None, "1"])
def test_a_scorer_returning_no_score_stops_the_run(monkeypatch, value):
    env = make()
    item = env.items("test")[0]
    monkeypatch.setattr(type(env._datasets["train"]), "score_answer", lambda *a: value)
    with pytest.raises(HonedError, match=r"scorer returned .* numbers in \[0, 1\]"):
        env.score_batch([item], ["1"])


# Bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"tasks": ["chain_sun"]},
            "unknown reasoning-gym task 'chain_sun' (did you mean 'chain_sum'?)",
        ),
        (
            {"tasks": [{"name": "chain_sum", "config": {"max_term": 3}}]},
            "task chain_sum: unknown config key 'max_term' (did you mean 'max_terms'?)",
        ),
        ({"tasks": [{"name": "gcd", "config": {"seed": 3}}]}, "'seed' is set by the environment"),
        (
            {"tasks": [{"name": "chain_sum", "config": {"min_terms": 4, "max_terms": 3}}]},
            "reasoning-gym rejected the tasks' configs: AssertionError: max_terms must be >= "
            "min_terms",
        ),
        ({"tasks": [{"name": "gcd", "weight": 0}]}, "task gcd: weight must be a number > 0"),
        ({"tasks": [{"name": "gcd", "weight": -1}]}, "weight must be a number > 0, got -1"),
        ({"tasks": [{"name": "gcd", "weight": "heavy"}]}, "weight must be a number > 0"),
        ({"tasks": [{"name": "gcd", "weight": True}]}, "weight must be a number > 0"),
        ({"tasks": [{"name": "gcd", "weight": float("inf")}]}, "weight must be a number > 0"),
        (
            {"tasks": [{"name": "gcd", "wieght": 2}]},
            "unknown key 'wieght' (did you mean 'weight'?)",
        ),
        ({"tasks": ["gcd", {"name": "gcd"}]}, "task gcd is named twice"),
        ({"tasks": []}, "tasks must be a non-empty list"),
        ({"tasks": "gcd"}, "tasks must be a non-empty list"),
        ({"tasks": ["gcd"], "answer_format": "last_num"}, "(did you mean 'last_number'?)"),
        ({"tasks": ["gcd"], "system_prompt": "drect"}, "unknown system prompt 'drect' (did"),
        ({"tasks": ["gcd"], "size": -1}, "size must be an integer >= 0"),
        ({"tasks": ["gcd"], "data_seed": "x"}, "data_seed must be an integer or null"),
        ({"tasks": ["gcd"], "sizes": 3}, "unknown argument 'sizes' (did you mean 'size'?)"),
        ({}, "requires the argument 'tasks'"),
    ],
)
def test_bad_input_is_one_clear_error(args, message):
    with pytest.raises(HonedError) as info:
        build_env("reasoning_gym", "rg", 0, args)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_an_unknown_split():
    with pytest.raises(HonedError, match="has no split 'dev'"):
        make().items("dev")


def test_without_reasoning_gym_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes the import fail
    with pytest.raises(HonedError, match=re.escape("pip install 'honed[reasoning-gym]'")):
        build_env("reasoning_gym", "rg", 0, {"tasks": ["gcd"]})


# Through a config and the command line ----------------------------------------------------------


def _config(tmp_path, tasks) -> Path:
    data = small_config_data(tmp_path)
    data["envs"] = [
        {
            "name": "rg",
            "type": "reasoning_gym",
            "args": {
                "tasks": tasks,
                "size": 40,
                "validation_size": 8,
                "test_size": 8,
                "answer_format": "last_number",
                "system_prompt": "Answer with a number.",
            },
        }
    ]
    data["policy"]["chat_template"] = True
    data["trainer"]["max_steps"] = 2
    path = tmp_path / "rg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_train_and_eval_through_the_command_line(tmp_path):
    from honed.cli import main
    from honed.config import load_config
    from honed.rl.trainer import build_envs

    path = _config(tmp_path, [CHAIN_SUM, LEGS])
    envs = build_envs(load_config(path))
    assert isinstance(envs["rg"], ReasoningGymEnv) and envs["rg"].tasks[1].name == "leg_counting"
    assert main(["train", str(path), "--quiet"]) == 0
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "reward/mean" in r)
    assert "reward/rg/format" in step and "reward/rg/score_errors" in step
    assert any(k.startswith("success/rg/") and k.endswith("/mean") for k in step)
    assert any(k.endswith("/groups_with_spread") for k in step)
    summary = json.loads((run / "summary.json").read_text())
    assert "rg/accuracy" in summary["final_eval"]
    out = tmp_path / "eval.json"
    assert main(["eval", str(run), "--quiet", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["split"] == "test" and "rg/accuracy" in result


def test_bad_task_through_the_command_line(tmp_path, capsys):
    from honed.cli import main

    code = main(["train", str(_config(tmp_path, [{"name": "gdc"}]))])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "unknown reasoning-gym task 'gdc' (did you mean 'gcd'?)" in err[0]


def test_the_chat_prompt_renders_through_smollm2s_template():
    from honed.models.policy import Policy
    from honed.models.sources import MODELS, resolve_model

    if MODELS["smollm2-135m-instruct"].path() is None:
        pytest.skip(
            f"SmolLM2 is not installed; to run this test: {MODELS['smollm2-135m-instruct'].install}"
        )
    policy = Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)
    env = make(system_prompt="direct")
    item = env.items("test")[0]
    text = policy.tokenizer.decode(policy.encode(env.prompt(item)))
    assert text == (
        f"<|im_start|>system\n{rg.utils.SYSTEM_PROMPTS['direct']}<|im_end|>\n"
        f"<|im_start|>user\n{item.data['entry']['question']}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
