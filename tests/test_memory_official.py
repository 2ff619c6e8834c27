"""The official Mem-α agent's tool-call format and tools, the `chat` prompt style through the
multi-turn machinery (chat template with tools, token-exact), and prompt budgets in tokens that
shorten entry contents but never hide ids."""

import os

import pytest
from tool_world import ScriptedGenerator

from honed.config import PolicyConfig, TinyModelConfig
from honed.envs.memory import MemoryEnv
from honed.envs.memory.data import Instance, PlanOp, Question
from honed.envs.memory.parsing import parse_calls
from honed.envs.memory.prompt import FULL_HEADER, render_prompt
from honed.envs.memory.store import CORE, SEMANTIC, Memory
from honed.envs.memory.tools import DELETE, INSERT, UPDATE, ToolCall, execute
from honed.models.policy import Policy
from honed.models.sources import MODELS, resolve_model
from honed.types import Item

SHAPE = TinyModelConfig(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
    max_position_embeddings=2048,
)  # fmt: skip

OFFICIAL_REPLY = """I will remember the new facts.
✿FUNCTION✿: new_memory_insert
✿ARGS✿: {"memory_type": "semantic_memory", "content": "Ann {the pilot} lives in Oslo"}
✿FUNCTION✿: memory_update
✿ARGS✿: {'memory_type': 'core_memory', 'new_content': 'Ann, a pilot'} (the core)
✿FUNCTION✿: memory_delete
✿ARGS✿: {"memory_type": "semantic_memory", "memory_id": "s9"}
✿RESULT✿: imagined results
✿FUNCTION✿: memory_delete
✿ARGS✿: {"memory_type": "core_memory"}"""


def test_the_official_function_call_format_is_parsed():
    parsed = parse_calls(OFFICIAL_REPLY)
    assert not parsed.failed and parsed.repaired  # the single-quoted arguments were repaired
    assert parsed.calls == [
        ToolCall(
            INSERT, {"memory_type": "semantic_memory", "content": "Ann {the pilot} lives in Oslo"}
        ),
        ToolCall(UPDATE, {"memory_type": "core_memory", "new_content": "Ann, a pilot"}),
        ToolCall(DELETE, {"memory_type": "semantic_memory", "memory_id": "s9"}),
    ]  # everything after ✿RESULT✿ is dropped, as the official loop does
    memory = Memory()
    results = [execute(memory, c) for c in parsed.calls]
    assert [r.ok for r in results] == [True, True, False]
    assert memory.core == "Ann, a pilot" and memory.items(SEMANTIC)[0][1].startswith("Ann {")


def test_official_calls_with_unreadable_arguments_fail_instead_of_vanishing():
    parsed = parse_calls("✿FUNCTION✿: memory_delete\n✿ARGS✿: \n")
    assert len(parsed.calls) == 1 and not execute(Memory(), parsed.calls[0]).ok
    search = parse_calls(
        '✿FUNCTION✿: search_memory\n✿ARGS✿: {"memory_type": "semantic_memory", "query": "x"}'
    )
    assert "not available while memorising" in execute(Memory(), search.calls[0]).message


def test_hermes_tool_calls_with_official_names_are_parsed():
    reply = (
        '<tool_call>\n{"name": "new_memory_insert", "arguments": {"memory_type": '
        '"episodic_memory", "content": "On day 3, Ann sang"}}\n</tool_call>'
    )
    [call] = parse_calls(reply).calls
    assert call == ToolCall(
        INSERT, {"memory_type": "episodic_memory", "content": "On day 3, Ann sang"}
    )


def _memory(n: int) -> Memory:
    memory = Memory()
    memory.update(CORE, "Ann and Bo")
    for i in range(n):
        memory.insert(SEMANTIC, f"Fact number {i} about Ann and the long road to Oslo")
    return memory


def test_a_long_chunk_no_longer_hides_the_entry_ids():
    memory = _memory(5)
    chunk = "Ann sang a song. " * 470  # ~8,000 characters
    prompt = render_prompt(memory, chunk, style="full", max_chars=8000)
    assert prompt.visible == {"s1", "s2", "s3", "s4", "s5"}
    for i in range(1, 6):
        assert f"\ns{i} " in prompt.text
    roomy = render_prompt(memory, chunk, style="full", max_chars=len(prompt.text) + 200)
    assert "..." in roomy.text and len(roomy.text) <= len(prompt.text) + 200
    assert "\ns1 Fact" in roomy.text  # contents are shortened, evenly, from their end


def test_prompt_budget_in_tokens_of_the_policy_tokenizer():
    memory = _memory(3)
    header = len(FULL_HEADER)
    whole = render_prompt(memory, "Ann sang.", style="full", max_chars=10**6).text
    count_words = lambda text: len(text.split())  # noqa: E731  a tokenizer of words
    budget = count_words(whole) - 4
    cut = render_prompt(
        memory, "Ann sang.", style="full", max_chars=header, max_tokens=budget, count=count_words
    )
    assert count_words(cut.text) <= budget < count_words(whole)
    assert cut.visible == {"s1", "s2", "s3"} and "..." in cut.text


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return Policy.from_config(PolicyConfig(tiny=SHAPE, chat_template=True), seed=0)


ITEM = Item(
    "x",
    "memory",
    Instance(
        "x",
        ["Ann lives in Oslo. It rained.", "Ann has since moved to the city of Lima."],
        [Question("Which city is Ann living in?", ["Lima"])],
        [
            [PlanOp("insert", SEMANTIC, "Ann lives in Oslo")],
            [
                PlanOp(
                    "update",
                    SEMANTIC,
                    "Ann has since moved to the city of Lima",
                    target="Ann lives in Oslo",
                )
            ],
        ],
    ).to_dict(),
)


def test_chat_style_offers_the_official_tools_through_the_template_token_exactly(tiny):
    env = MemoryEnv(prompt_style="chat", reader="extract", max_prompt_tokens=1200)
    replies = iter(
        [
            '<tool_call>{"name": "new_memory_insert", "arguments": {"memory_type": '
            '"semantic_memory", "content": "Ann lives in Oslo"}}</tool_call>',
            '<tool_call>{"name": "memory_update", "arguments": {"memory_type": '
            '"semantic_memory", "memory_id": "s1", "new_content": "Ann lives in Lima"}}</tool_call>',
        ]
    )
    seen: list[str] = []

    def script(context: str, seed: int) -> str:
        seen.append(context)
        return next(replies)

    generator = ScriptedGenerator(tiny, script)
    [trajectory] = env.rollout([ITEM], generator, 1, 0)[0].trajectories
    assert seen[0].startswith("<bos>T:new_memory_insert(memory_type,content) memory_update(")
    assert "<new_chunk>\nAnn lives in Oslo. It rained.\n</new_chunk>" in seen[0]
    assert "[s1] Ann lives in Oslo" in seen[1]  # the memory after chunk 1, with its id
    assert trajectory.info["memory"]["semantic"] == {"s1": "Ann lives in Lima"}
    assert trajectory.success == 1.0
    for segment, prompt in zip(trajectory.segments, generator.prompts, strict=True):
        assert segment.prompt_ids == prompt and len(segment.prompt_ids) <= 1200
        assert segment.mask() == [1] * len(segment.completion_ids)
        assert segment.completion_ids[-1] == tiny.end_id and segment.reward is not None
    rewards = trajectory.info["chunk_rewards"]
    assert [s.reward for s in trajectory.segments] == rewards


def test_chat_style_references_are_the_templates_own_tokens_and_read_back(tiny):
    env = MemoryEnv(prompt_style="chat", max_prompt_tokens=1200)
    tight = MemoryEnv(prompt_style="chat", max_prompt_tokens=943).sft_sequences(ITEM, tiny)
    assert "[s1] ...\n" in tiny.tokenizer.decode(tight[1][0])  # cut to fit; the id stays
    sequences = env.sft_sequences(ITEM, tiny)
    assert len(sequences) == 2
    prompt, reply, mask = sequences[1]
    assert mask == [1] * len(reply) and reply[-1] == tiny.end_id
    text = tiny.decode(reply)
    assert '"name":"memory_update"' in text
    [call] = parse_calls(text).calls
    assert call.arguments == {
        "memory_type": "semantic_memory",
        "new_content": "Ann has since moved to the city of Lima",
        "memory_id": "s1",
    }
    assert "[s1] Ann lives in Oslo" in tiny.tokenizer.decode(prompt)


def test_max_prompt_tokens_counts_the_policy_tokens_in_compact_prompts(tiny):
    [_, (whole, _, _)] = MemoryEnv(max_prompt_tokens=10_000, quote=True).sft_sequences(ITEM, tiny)
    budget = len(whole) - 5
    [_, (cut, _, _)] = MemoryEnv(max_prompt_tokens=budget, quote=True).sft_sequences(ITEM, tiny)
    assert len(cut) <= budget  # the prompt as the policy encodes it (its chat template here)
    assert "\ns1 Ann ...\n" in tiny.tokenizer.decode(cut)


@pytest.mark.skipif(
    MODELS["smollm2-135m-instruct"].path() is None and not os.environ.get("HONED_REQUIRE_SMOLLM2"),
    reason=f"SmolLM2 is not installed; to run: {MODELS['smollm2-135m-instruct'].install}",
)
def test_the_real_smollm2_sees_the_official_tools_and_its_reference_reads_back():
    policy = Policy.load(resolve_model("smollm2-135m-instruct"), chat_template=True)
    env = MemoryEnv(prompt_style="chat", max_prompt_tokens=1500)
    sequences = env.sft_sequences(ITEM, policy)
    prompt = policy.tokenizer.decode(sequences[0][0])
    assert '"name": "new_memory_insert"' in prompt and "<new_chunk>" in prompt
    assert all(len(p) <= 1500 for p, _, _ in sequences)
    [call] = parse_calls(policy.decode(sequences[0][1])).calls
    assert call == ToolCall(
        INSERT, {"memory_type": "semantic_memory", "content": "Ann lives in Oslo"}
    )
