"""examples/tools_smollm2.yaml, SmolLM2 with a calculator: its data is what `data.py` generates,
its reward reads the last number of the answer (SmolLM2 answers in sentences), success needs the
right number whatever the calls, and the same config without tools (`tools: []`, the bare
question) is the README's no-tools row.

Turns are scripted (`ScriptedGenerator`, on the tiny policy's chat template); the environment,
parsing, the example's tool and reward are the product's. What SmolLM2 itself does on it is
measured by the README's commands, not here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from tool_world import ScriptedGenerator, hermes

from honed.config import PolicyConfig, TinyModelConfig, load_config
from honed.models.policy import Policy
from honed.rl.trainer import build_envs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tools_smollm2"
CONFIG = ROOT / "examples" / "tools_smollm2.yaml"
SHAPE = TinyModelConfig(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
)


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_data_is_what_data_py_generates(tmp_path, monkeypatch):
    data = load(EXAMPLE / "data.py")
    monkeypatch.setattr(data, "HERE", tmp_path)
    data.main()
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name


def test_the_reward_reads_the_last_number_of_a_final_answer():
    correct = load(EXAMPLE / "rewards.py").correct
    answers = ["6912"] * 4
    completions = [
        [{"role": "assistant", "content": "The answer is 6,912."}],
        [{"role": "assistant", "content": "6912 is 1234 + 5678, not 6913"}],
        [{"role": "assistant", "content": ""}],
        [{"role": "tool", "content": "6912"}],  # ran out of turns on a tool result
    ]
    assert correct(completions, answers) == [1.0, 0.0, 0.0, 0.0]


def test_the_calculator_evaluates_arithmetic_only():
    calculator = load(ROOT / "examples" / "tools" / "tools.py").calculator
    assert calculator("482 * 37") == 17834 and calculator("(9305 - 2748) / 2") == 3278.5
    with pytest.raises(ValueError, match="only numbers"):
        calculator("__import__('os')")


@pytest.fixture(scope="module")
def policy():
    return Policy.from_config(PolicyConfig(tiny=SHAPE, chat_template=True), seed=0)


def episode(policy, overrides: list[str], plan: str):
    """The first test question, answered by a script: `call` asks the calculator for the
    question's expression and answers its result, `wrong name` calls a tool that does not exist
    and then answers the expression's value anyway, `guess` answers at once, one off."""
    # The tiny policy's tokens are characters: the example's token caps are SmolLM2's.
    caps = ["envs.0.args.max_turn_tokens=200", "trainer.max_completion_length=400"]
    config = load_config(CONFIG, [*caps, *overrides])
    env = build_envs(config)["calc"]
    item = env.items("test")[0]
    expression = item.data["question"].removeprefix("What is ").removesuffix("?")
    answer = int(item.data["answer"])

    def script(context: str, seed: int) -> str:
        question = context.rfind(item.data["question"])
        results = re.findall(r"R:([^\n]*)\n", context[question:])
        if plan == "guess":
            return f"The answer is {answer + 1}."
        if not results:
            tool = "calculator" if plan == "call" else "calc"
            return hermes(tool, expression=expression)
        return f"The answer is {results[-1] if plan == 'call' else answer}."

    generator = ScriptedGenerator(policy, script, config.trainer.max_completion_length)
    trajectory = env.rollout([item], generator, 1, 0)[0].trajectories[0]
    return trajectory, generator


def test_a_right_number_succeeds_whatever_the_calls_and_a_failed_call_costs_nothing(policy):
    called, _ = episode(policy, [], "call")
    assert called.info["episode"]["stop"] == "answer" and (called.reward, called.success) == (1, 1)
    assert [len(t["tool_calls"]) for t in called.info["episode"]["turns"]] == [1, 0]
    slipped, _ = episode(policy, [], "wrong name")
    assert slipped.info["episode"]["turns"][0]["tool_results"][0]["error"]
    # No penalty for the failed call: with rare successes, a penalty is the only spread in a
    # group, and GRPO's per-group scaling makes it a full-size advantage against calling at all.
    assert (slipped.reward, slipped.success) == (1, 1)
    guessed, _ = episode(policy, [], "guess")
    assert (guessed.reward, guessed.success) == (0, 0)


def test_without_tools_the_prompt_is_the_bare_question(policy):
    overrides = ["envs.0.args.tools=[]", "envs.0.args.prompt_field=question"]
    _, generator = episode(policy, [], "guess")
    prompt = policy.tokenizer.decode(generator.prompts[0])
    assert "calculator" in prompt and "1234 + 5678" in prompt  # the schema and the example
    without, generator = episode(policy, overrides, "guess")
    prompt = policy.tokenizer.decode(generator.prompts[0])
    assert "calculator" not in prompt and "1234" not in prompt
    assert "What is" in prompt and (without.reward, without.success) == (0, 0)
