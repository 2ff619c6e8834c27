"""The `tools` environment: tools from typed functions, errors as messages, token-exact
episodes whose loss mask covers exactly the model's tokens, how episodes end, what reward
functions receive, warm-start references, metrics and the evaluation table."""

from __future__ import annotations

import os
import pickle
import re
import time

import pytest
import tool_world
from chat_templates import QWEN_LIKE, QWEN_SPECIALS, tokenizer_with
from numerics import assert_logprobs_close
from tool_world import ROWS, ScriptedGenerator, hermes, write_data

from honed.config import PolicyConfig, TinyModelConfig
from honed.envs.metrics import step_metrics
from honed.envs.multiturn.toolcalls import ToolCall
from honed.envs.tools import ToolBox, ToolEnv, load_tools
from honed.errors import HonedError
from honed.models.batching import make_batch
from honed.models.policy import Policy, PolicySampler, SamplingParams
from honed.models.scoring import score
from honed.models.sources import MODELS, resolve_model
from honed.models.tiny import build_tiny_model

TOOLS = ["tool_world:lookup", "tool_world:calc"]
SHAPE = TinyModelConfig(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
)


@pytest.fixture
def data(tmp_path):
    return write_data(tmp_path / "data.jsonl")


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return Policy.from_config(PolicyConfig(tiny=SHAPE, chat_template=True), seed=0)


def make_env(data, **args) -> ToolEnv:
    defaults = {
        "tools": TOOLS,
        "reward": ["tool_world:correct", "tool_world:used_tools"],
        "reward_weights": [1.0, 0.5],
        "test_fraction": 0.0,
        "reference_field": "reference",
    }
    if "reward" in args:
        defaults["reward_weights"] = None
    return ToolEnv("shop", path=str(data), **{**defaults, **args})


def solver(context: str, seed: int) -> str:
    """Solves the data's questions in the tiny template's conversation: look up, compute, answer."""
    question = context.split("U:")[1].split("\n")[0]
    results = re.findall(r"R:([^\n]*)\n", context)
    name = question.split()[-1].rstrip("?") if "price" in question else question.split()[1]
    if not results:
        return hermes("lookup", name=name)
    if "cost" in question and len(results) == 1:
        return hermes("calc", expression=f"{question.split()[0]}*{results[0]}")
    return results[-1]


# ----------------------------------------------------------------------------- tools


def test_tools_need_types_and_a_docstring_and_distinct_names():
    with pytest.raises(HonedError, match=r"tool 'tool_world:no_docstring': cannot build"):
        load_tools(["tool_world:no_docstring"], "env")
    with pytest.raises(HonedError, match="two tools are named 'lookup'"):
        load_tools(["tool_world:lookup", "tool_world:lookup"], "env")
    with pytest.raises(HonedError, match="tools must be a list"):
        load_tools("tool_world:lookup", "env")
    assert load_tools([], "env") == []  # the task without tools: the baseline
    with pytest.raises(HonedError, match="has no attribute 'lokup'"):
        load_tools(["tool_world:lokup"], "env")


def test_every_failure_is_an_error_message_and_the_others_still_run():
    box = ToolBox(load_tools([*TOOLS, "tool_world:slow"], "env"), 0.2, 40)
    calls = [
        ToolCall("lookup", {"name": "ab"}),
        ToolCall("lookup", {"name": "zz"}),  # raises KeyError
        ToolCall("lookup", {}),  # a missing argument
        ToolCall("lookup", {"name": 3}),  # a wrong type, by the schema
        ToolCall("lookup", {"name": "ab", "colour": "red"}),  # an unexpected argument
        ToolCall("search", {"q": "x"}),  # no such tool
        ToolCall("slow", {"seconds": 5.0}),  # past the time limit
        ToolCall("calc", {"expression": "3*12"}),
    ]
    started = time.perf_counter()
    results = box.run(calls)
    assert time.perf_counter() - started < 2.0
    assert [r.error for r in results] == [False, True, True, True, True, True, True, False]
    assert results[0].content == "12" and results[-1].content == "36"
    assert results[1].content == "Error: KeyError: 'zz'"
    assert "missing a required argument: 'name'" in results[2].content
    assert "'name' must be string, got 3" in results[3].content
    assert "unexpected keyword argument 'colour'" in results[4].content
    assert (
        results[5].content == "Error: there is no tool 'search'; the tools are: lookup, calc, slow"
    )
    assert results[5].tool is None  # a name the model made up never becomes a metric name
    assert results[6].timed_out and "did not finish within 0.2 s" in results[6].content


def test_async_tools_run_concurrently_with_their_own_time_limit():
    box = ToolBox(load_tools(["tool_world:fetch"], "env"), 1.0, 100)
    tool_world.CONCURRENCY.update(now=0, max=0)
    calls = [ToolCall("fetch", {"key": f"k{i}"}) for i in range(8)]
    started = time.perf_counter()
    results = box.run([*calls, ToolCall("fetch", {"key": "forever"})])
    assert [r.content for r in results[:8]] == [f"K{i}" for i in range(8)]
    assert tool_world.CONCURRENCY["max"] == 9  # all in flight at once
    assert results[8].timed_out and time.perf_counter() - started < 3.0


def test_long_results_are_cut_with_a_note():
    box = ToolBox(load_tools(["tool_world:fetch"], "env"), 1.0, 3)
    assert box.run([ToolCall("fetch", {"key": "abcdef"})])[0].content == (
        "ABC… (cut at 3 characters)"
    )


# ----------------------------------------------------------------------------- episodes


def test_a_solved_episode_is_the_template_conversation_with_only_model_tokens_trained(data, tiny):
    env = make_env(data)
    generator = ScriptedGenerator(tiny, solver)
    groups = env.rollout(env.items("train")[:2], generator, 2, seed=0)
    trajectory = groups[1].trajectories[0]  # "3 cd cost?": lookup, calc, answer
    segment = trajectory.segments[0]
    tokens = tiny.tokenizer.convert_ids_to_tokens(segment.completion_ids)
    trained = "".join(t for t, m in zip(tokens, segment.mask(), strict=True) if m)
    untrained = "".join(t for t, m in zip(tokens, segment.mask(), strict=True) if not m)
    assert trained == (
        hermes("lookup", name="cd") + "<eos>" + hermes("calc", expression="3*30") + "<eos>90<eos>"
    )
    assert untrained == "R:30\nA:R:90\nA:"
    # The ids are exactly the chat template's rendering of the whole conversation.
    episode = trajectory.info["episode"]
    history = [m for t in episode["turns"] for m in _turn_messages(t)]
    chat = env.chat(generator)
    whole = chat.render([*env.prompt(env.items("train")[1]), *history], False)
    assert (
        tiny.tokenizer.decode(
            segment.prompt_ids + segment.completion_ids, skip_special_tokens=False
        )
        == whole
    )
    # Behaviour log-probs are the sampler's on model tokens; the mask keeps the rest out.
    assert [lp for lp, m in zip(segment.logprobs, segment.mask(), strict=True) if m] == [
        -0.5
    ] * len(trained.replace("<eos>", "E"))
    assert trajectory.reward == 1.5 and trajectory.success == 1.0
    assert trajectory.components == {"correct": 1.0, "used_tools": 1.0}
    assert episode["stop"] == "answer" and not segment.truncated
    assert [len(t["tool_calls"]) for t in episode["turns"]] == [1, 1, 0]


def _turn_messages(turn: dict) -> list[dict]:
    messages = [{"role": "assistant", "content": turn["text"]}]
    return messages + [{"role": "tool", "content": r["content"]} for r in turn["tool_results"]]


def test_sampled_ids_are_kept_even_when_their_text_would_tokenise_otherwise(data):
    """No re-tokenisation: a tokenizer with a whole-word token for "lookup" encodes the text
    differently from the characters the model sampled; the episode keeps the sampled ids."""
    tokenizer = tokenizer_with(tiny_template(), [])
    tokenizer.add_tokens(["lookup"])
    model = build_tiny_model(SHAPE, tokenizer, seed=0)
    policy = Policy(model, tokenizer, chat_template=True)
    call = hermes("lookup", name="ab")
    by_char = [tokenizer.convert_tokens_to_ids(c) for c in call] + [policy.end_id]
    assert tokenizer(call, add_special_tokens=False)["input_ids"] != by_char[:-1]

    def script(context: str, seed: int):
        return by_char if "R:" not in context else "12"

    env = make_env(data)
    trajectory = env.rollout(env.items("train")[:1], ScriptedGenerator(policy, script), 1, 0)[0]
    segment = trajectory.trajectories[0].segments[0]
    assert segment.completion_ids[: len(by_char)] == by_char
    assert trajectory.trajectories[0].success == 1.0  # the call was read and run


def tiny_template() -> str:
    from honed.models.tiny import CHAT_TEMPLATE

    return CHAT_TEMPLATE


def test_how_episodes_end(data, tiny):
    env = make_env(data, max_turns=2)
    items = env.items("train")[:1]

    def calls_forever(context, seed):
        return hermes("lookup", name="ab")

    episode = env.rollout(items, ScriptedGenerator(tiny, calls_forever), 1, 0)[0].trajectories[0]
    assert episode.info["episode"]["stop"] == "max_turns"
    segment = episode.segments[0]
    assert segment.mask()[-1] == 1  # nothing is bridged after the last allowed turn
    assert len(episode.info["episode"]["turns"]) == 2 and episode.reward == 0.5

    long_turn = "x" * 80
    first = hermes("lookup", name="ab")
    budget = ScriptedGenerator(
        tiny, lambda c, s: first if "R:" not in c else long_turn, max_tokens=100
    )
    episode = env.rollout(items, budget, 1, 0)[0].trajectories[0]
    segment = episode.segments[0]
    assert episode.info["episode"]["stop"] == "length" and segment.truncated
    assert len(first) + 1 < 100 < len(first) + 1 + len(long_turn)
    assert sum(segment.mask()) == 100  # the budget counts the model's tokens only
    assert len(segment.completion_ids) == 100 + len("R:12\nA:")

    garbled = ScriptedGenerator(
        tiny, lambda c, s: "<tool_call>lookup ab</tool_call>" if "R:" not in c else "12"
    )
    episode = env.rollout(items, garbled, 1, 0)[0].trajectories[0]
    turns = episode.info["episode"]["turns"]
    assert turns[0]["format_errors"] and episode.success == 1.0
    assert "R:Error: could not read the tool call" in episode.completion_text.replace("= ", "R:")


def test_a_model_ending_the_sequence_ends_the_episode(data):
    tokenizer = tokenizer_with(QWEN_LIKE, QWEN_SPECIALS)
    policy = Policy(build_tiny_model(SHAPE, tokenizer, 0), tokenizer, chat_template=True)
    assert policy.end_id != policy.eos_id and policy.eos_id in policy.stop_ids
    env = make_env(data)
    script = ScriptedGenerator(
        policy, lambda c, s: [*tokenizer("12")["input_ids"][1:], policy.eos_id]
    )
    episode = env.rollout(env.items("train")[:1], script, 1, 0)[0].trajectories[0]
    assert episode.info["episode"]["stop"] == "end" and episode.success == 1.0


def test_reward_functions_get_trl_arguments_and_the_conversation(data, tiny):
    tool_world.SEEN.clear()
    env = make_env(data, reward="tool_world:record")
    env.rollout(env.items("train")[:1], ScriptedGenerator(tiny, solver), 1, 0)
    seen = tool_world.SEEN[-1]
    assert seen["prompts"] == ["price of ab?"] and seen["answer"] == ["12"]
    completion = seen["completions"][0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
    assert completion[0]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": {"name": "ab"},
    }
    assert completion[1] == {
        "role": "tool",
        "name": "lookup",
        "tool_call_id": "call_0_0",
        "content": "12",
    }
    assert completion[-1] == {"role": "assistant", "content": "12"}
    assert seen["messages"][0] == [{"role": "user", "content": "price of ab?"}, *completion]
    assert seen["trajectory"][0]["turns"][0]["tool_results"][0]["content"] == "12"
    assert seen["completion_ids"][0][-1] == tiny.end_id
    assert seen["reference"][0] == ROWS[0]["reference"]


def test_rollouts_do_not_depend_on_the_batch_and_record_true_logprobs(data, tiny):
    env = make_env(data)
    sampler = PolicySampler(tiny, SamplingParams(1.0, 1.0, 40))
    items = env.items("train")
    alone = env.rollout(items[1:2], sampler, 2, seed=3)[0]
    together = env.rollout(items, sampler, 2, seed=3)[1]
    for a, b in zip(alone.trajectories, together.trajectories, strict=True):
        assert a.segments[0].completion_ids == b.segments[0].completion_ids
    # screening's rest of a group (`first_generation`) is the whole group's rest
    [rest] = env.rollout(items[1:2], sampler, 1, seed=3, first_generation=1)
    assert rest.trajectories[0].segments[0].completion_ids == (
        alone.trajectories[1].segments[0].completion_ids
    )
    # The recorded behaviour log-probs are the model's own on the model tokens of the episode.
    segment = together.trajectories[0].segments[0]
    batch = make_batch(
        [segment.prompt_ids], [segment.completion_ids], [segment.mask()], tiny.pad_id
    )
    scored = score(tiny.model.eval(), batch).logprobs[0].tolist()
    model = [i for i, m in enumerate(segment.mask()) if m]
    assert_logprobs_close([scored[i] for i in model], [segment.logprobs[i] for i in model])


# ----------------------------------------------------------------------------- references


def test_warm_start_sequences_are_the_reference_conversation_masked(data, tiny):
    env = make_env(data)
    items = env.items("train")
    ((prompt, ids, mask),) = env.sft_sequences(items[1], tiny)
    tokens = tiny.tokenizer.convert_ids_to_tokens(ids)
    assert "".join(t for t, m in zip(tokens, mask, strict=True) if not m) == "R:30\nA:R:90\nA:"
    assert tiny.tokenizer.decode(prompt) == "<bos>T:lookup(name) calc(expression)\nU:3 cd cost?\nA:"
    assert env.sft_sequences(items[2], tiny) == []  # no reference: nothing to learn from
    assert env.sft_examples(items[1]) == []


def test_a_reference_that_ends_on_a_call_is_an_error(data, tiny, tmp_path):
    row = {**ROWS[0], "reference": ROWS[0]["reference"][:1]}
    env = make_env(write_data(tmp_path / "bad.jsonl", [row]))
    with pytest.raises(HonedError, match="ends with tool calls"):
        env.sft_sequences(env.items("train")[0], tiny)


def test_the_report_sets_the_reference_rules_and_agents_side_by_side(data, tiny):
    env = make_env(data, baselines={"always 12": "tool_world:always_12"})
    table = env.report({"solver": ScriptedGenerator(tiny, solver)}, "train", None, 0)
    rows = {r[0]: r for r in table.rows}
    assert list(rows) == ["reference solver", "rule: always 12", "solver", "solver, tools disabled"]
    assert rows["reference solver"][1] == 1.0  # the two rows with a reference
    assert rows["rule: always 12"][1] == pytest.approx(1 / 3) and rows["rule: always 12"][4] == 0
    assert rows["solver"][1] == 1.0
    disabled = rows["solver, tools disabled"]
    assert disabled[1] == 0.0 and disabled[6] == 1.0  # every call failed


# ----------------------------------------------------------------------------- metrics and set-up


def test_step_metrics_count_turns_calls_errors_and_tools(data, tiny):
    env = make_env(data)
    groups = env.rollout(env.items("train"), ScriptedGenerator(tiny, solver), 2, 0)
    metrics = step_metrics({"shop": env}, groups)
    assert metrics["episodes/shop/turns"] == pytest.approx((2 + 3 + 2) / 3)
    assert metrics["episodes/shop/tool_calls"] == pytest.approx((1 + 2 + 1) / 3)
    assert metrics["episodes/shop/used_tools"] == 1.0
    assert metrics["episodes/shop/tool_error_rate"] == 0.0
    assert metrics["tools/lookup/calls"] == 6.0 and metrics["tools/calc/calls"] == 2.0
    assert metrics["tools/lookup/errors"] == 0.0
    assert metrics["reward/shop/correct/timeouts"] == 0.0


def test_the_environment_pickles_without_its_functions(data):
    env = make_env(data)
    again = pickle.loads(pickle.dumps(env))
    assert list(again.toolbox.tools) == ["lookup", "calc"]
    assert again.rewards.names == ["correct", "used_tools"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_turns": 0}, "max_turns must be a positive integer"),
        ({"tool_timeout": 0}, "tool_timeout must be positive"),
        ({"reward_weights": [1.0]}, "reward_weights must be 2 finite number"),
        ({"reference_field": "solution"}, "reference_field 'solution' is not a column"),
        ({"reward": "tool_world:needs_solution"}, "requires argument .solution."),
    ],
)
def test_bad_arguments_are_clear_errors(data, args, message):
    with pytest.raises(HonedError, match=message):
        make_env(data, **args)


def test_a_column_named_like_an_argument_is_refused(tmp_path):
    data = write_data(tmp_path / "d.jsonl", [{"prompt": "x", "trajectory": 1}])
    with pytest.raises(HonedError, match="column 'trajectory' clashes"):
        make_env(data, reference_field=None)


def test_chat_messages_prompts_and_a_system_prompt(tmp_path, tiny):
    rows = [{"messages": [{"role": "user", "content": "price of ab?"}], "answer": "12"}]
    env = make_env(
        write_data(tmp_path / "m.jsonl", rows), reference_field=None, system_prompt="Be brief."
    )
    assert env.prompt_field == "messages"
    item = env.items("train")[0]
    assert env.prompt(item)[0] == {"role": "system", "content": "Be brief."}
    episode = env.rollout([item], ScriptedGenerator(tiny, solver), 1, 0)[0].trajectories[0]
    assert episode.success == 1.0


def test_it_needs_a_chat_template(data):
    policy = Policy.from_config(PolicyConfig(tiny=SHAPE), seed=0)
    env = make_env(data)
    with pytest.raises(HonedError, match=r"policy\.chat_template: true"):
        env.rollout(env.items("train")[:1], PolicySampler(policy, SamplingParams()), 1, 0)


@pytest.mark.skipif(
    MODELS["smollm2-135m-instruct"].path() is None and not os.environ.get("HONED_REQUIRE_SMOLLM2"),
    reason=f"SmolLM2 is not installed; to run: {MODELS['smollm2-135m-instruct'].install}",
)
def test_the_real_smollm2_runs_tool_episodes_token_exactly(data):
    """SmolLM2-135M-Instruct's template ignores `tools`: the tools are described in its system
    message, calls are read in the Hermes format, results come back in its ChatML `tool` turns,
    and the episode's ids are the sampled ids and the template's own, with the mask on the
    model's only."""
    policy = Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)
    env = make_env(data)

    def script(context: str, seed: int) -> str:
        return hermes("lookup", name="ab") if "<|im_start|>tool" not in context else "12"

    generator = ScriptedGenerator(policy, script)
    trajectory = env.rollout(env.items("train")[:1], generator, 1, 0)[0].trajectories[0]
    segment = trajectory.segments[0]
    decode = policy.tokenizer.decode
    prompt = decode(segment.prompt_ids)
    assert "You can call the tools" in prompt and '"name": "lookup"' in prompt
    untrained = [i for i, m in zip(segment.completion_ids, segment.mask(), strict=True) if not m]
    assert decode(untrained) == "\n<|im_start|>tool\n12<|im_end|>\n<|im_start|>assistant\n"
    assert trajectory.success == 1.0
    # and the real sampler runs the same episode loop (whatever the untrained model writes)
    sampler = PolicySampler(policy, SamplingParams(0.0, 1.0, 24))
    episode = env.rollout(env.items("train")[:1], sampler, 1, 0)[0].trajectories[0]
    segment = episode.segments[0]
    assert len(segment.completion_ids) == len(segment.mask()) == len(segment.logprobs)
    assert sum(segment.mask()) <= 24
