"""The chat template with tools: prompts render the tool schemas, the ids between turns are the
template's own, reference turns are what the template writes, and templates that cannot be used
token-exactly say so. Run on templates that render like Qwen2.5 and Llama 3.1, on the tiny
policy's template, and on the real SmolLM2 template (which ignores tools)."""

from __future__ import annotations

import json
import os

import pytest
from chat_templates import (
    LLAMA31_LIKE,
    LLAMA31_SPECIALS,
    NOT_PREFIX_PRESERVING,
    QWEN_LIKE,
    QWEN_SPECIALS,
    tokenizer_with,
)
from transformers.utils import get_json_schema

from honed.config import PolicyConfig, TinyModelConfig
from honed.envs.multiturn.template import ChatFormat, detect_format
from honed.errors import HonedError
from honed.models.policy import Policy, end_of_turn_id
from honed.models.sources import MODELS, resolve_model
from honed.models.tiny import build_char_tokenizer


def lookup(name: str) -> int:
    """The price of a product.

    Args:
        name: the product's name
    """
    return 47


SCHEMAS = [get_json_schema(lookup)]
ASK = [{"role": "user", "content": "price of kx?"}]
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"type": "function", "function": {"name": "lookup", "arguments": {"name": "kx"}}}
    ],
}


def chat_for(tokenizer, tools=SCHEMAS, tool_format="auto") -> ChatFormat:
    return ChatFormat(tokenizer, end_of_turn_id(tokenizer), tools, tool_format)


def text(chat: ChatFormat, ids: list[int]) -> str:
    return chat.tokenizer.decode(ids, skip_special_tokens=False)


def test_schema_comes_from_the_signature_and_docstring():
    assert SCHEMAS[0]["function"] == {
        "name": "lookup",
        "description": "The price of a product.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "the product's name"}},
            "required": ["name"],
        },
        "return": {"type": "integer"},
    }


def test_qwen_like_template_renders_tools_and_bridges_grouped_results():
    chat = chat_for(tokenizer_with(QWEN_LIKE, QWEN_SPECIALS))
    assert chat.renders_tools and chat.tool_format == "hermes" and chat.tool_note is None
    prompt = text(chat, chat.prompt_ids(ASK))
    assert json.dumps(SCHEMAS[0]) in prompt
    assert prompt.endswith("<|im_start|>user\nprice of kx?<|im_end|>\n<|im_start|>assistant\n")
    written = chat.assistant_text(ASK, CALL)
    assert written == '<tool_call>\n{"name": "lookup", "arguments": {"name": "kx"}}\n</tool_call>'
    history = [*ASK, {"role": "assistant", "content": written}]
    results = [
        {"role": "tool", "name": "lookup", "content": "47"},
        {"role": "tool", "name": "lookup", "content": "85"},
    ]
    # The newline the template writes after <|im_end|> belongs to the bridge, not to the model.
    assert text(chat, chat.bridge_ids(history, results)) == (
        "\n<|im_start|>user\n<tool_response>\n47\n</tool_response>\n<tool_response>\n85\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_llama31_like_template_renders_json_calls_and_ipython_results():
    chat = chat_for(tokenizer_with(LLAMA31_LIKE, LLAMA31_SPECIALS))
    assert chat.renders_tools and chat.tool_format == "llama3_json"
    prompt = text(chat, chat.prompt_ids(ASK))
    assert '"name": "lookup"' in prompt and prompt.endswith(
        "price of kx?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    written = chat.assistant_text(ASK, CALL)
    assert json.loads(written) == {"name": "lookup", "parameters": {"name": "kx"}}
    history = [*ASK, {"role": "assistant", "content": written}]
    bridge = text(chat, chat.bridge_ids(history, [{"role": "tool", "content": "47"}]))
    assert bridge == (
        '<|start_header_id|>ipython<|end_header_id|>\n\n{"output": "47"}<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_the_tiny_template_lists_tools_by_signature():
    tokenizer = build_char_tokenizer()
    chat = chat_for(tokenizer)
    assert chat.tool_format == "hermes" and chat.renders_tools
    assert text(chat, chat.prompt_ids(ASK)) == "<bos>T:lookup(name)\nU:price of kx?\nA:"
    written = chat.assistant_text(ASK, CALL)
    assert written == '<tool_call>{"name":"lookup","arguments":{"name": "kx"}}</tool_call>'
    assert chat.assistant_ids(ASK, CALL)[-1] == tokenizer.eos_token_id
    history = [*ASK, {"role": "assistant", "content": written}]
    assert text(chat, chat.bridge_ids(history, [{"role": "tool", "content": "47"}])) == "R:47\nA:"


def test_without_tools_the_prompt_is_the_policys_own_encoding():
    """Same rendering as `Policy.encode` for a single-turn chat prompt: one way to encode."""
    shape = TinyModelConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1)
    policy = Policy.from_config(PolicyConfig(tiny=shape, chat_template=True), seed=0)
    chat = ChatFormat(policy.tokenizer, policy.end_of_turn_id)
    assert chat.prompt_ids(ASK) == policy.encode(ASK)


def test_a_template_that_is_not_prefix_preserving_is_refused():
    chat = chat_for(tokenizer_with(NOT_PREFIX_PRESERVING, QWEN_SPECIALS), tool_format="hermes")
    history = [*ASK, {"role": "assistant", "content": "<tool_call>{}</tool_call>"}]
    with pytest.raises(HonedError, match="not prefix-preserving"):
        chat.bridge_ids(history, [{"role": "tool", "content": "47"}])


def test_a_template_without_tools_gets_them_described_in_the_system_message():
    chat = chat_for(tokenizer_with(NOT_PREFIX_PRESERVING, QWEN_SPECIALS))
    assert not chat.renders_tools and chat.tool_format == "hermes"
    prompt = text(chat, chat.prompt_ids([{"role": "system", "content": "Be brief."}, *ASK]))
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\nYou can call the tools")
    assert json.dumps(SCHEMAS[0]) in prompt and "<tool_call>" in prompt
    # A reference call is written in the format the parser reads, since the template cannot.
    assert chat.assistant_text(ASK, CALL) == (
        '<tool_call>\n{"name": "lookup", "arguments": {"name": "kx"}}\n</tool_call>'
    )


def test_a_template_whose_format_is_unknown_must_be_told():
    template = QWEN_LIKE.replace("<tool_call>", "<call>").replace("</tool_call>", "</call>")
    tokenizer = tokenizer_with(template, QWEN_SPECIALS)
    with pytest.raises(HonedError, match="set the environment's tool_format"):
        chat_for(tokenizer)
    assert chat_for(tokenizer, tool_format="llama3_json").tool_format == "llama3_json"


def test_without_tools_any_template_will_do_and_nothing_is_described():
    """`tools: []` (the no-tools baseline) on a template with no known call format: no error,
    the prompt is the template's own, and a call written anyway is read as Hermes'."""
    template = QWEN_LIKE.replace("<tool_call>", "<call>").replace("</tool_call>", "</call>")
    tokenizer = tokenizer_with(template, QWEN_SPECIALS)
    chat = chat_for(tokenizer, tools=[])
    assert chat.tool_format == "hermes" and chat.tool_note is None
    prompt = text(chat, chat.prompt_ids(ASK))
    assert "tool" not in prompt and prompt == tokenizer.apply_chat_template(
        ASK, add_generation_prompt=True, tokenize=False
    )


def test_unusable_set_ups_are_clear_errors():
    tokenizer = build_char_tokenizer()
    with pytest.raises(HonedError, match="no special token"):
        ChatFormat(tokenizer, None, SCHEMAS)
    with pytest.raises(HonedError, match="tool_format must be"):
        ChatFormat(tokenizer, tokenizer.eos_token_id, SCHEMAS, "mistral")
    tokenizer.chat_template = None
    with pytest.raises(HonedError, match="needs a tokenizer with a chat template"):
        ChatFormat(tokenizer, tokenizer.eos_token_id, SCHEMAS)


def test_detect_format():
    assert detect_format(QWEN_LIKE) == "hermes"
    assert detect_format(LLAMA31_LIKE) == "llama3_json"
    assert detect_format("{{ messages }}") is None


@pytest.mark.skipif(
    MODELS["smollm2-135m-instruct"].path() is None and not os.environ.get("HONED_REQUIRE_SMOLLM2"),
    reason=f"SmolLM2 is not installed; to run: {MODELS['smollm2-135m-instruct'].install}",
)
def test_the_real_smollm2_template_ignores_tools_so_honed_describes_them():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    chat = chat_for(tokenizer)
    assert not chat.renders_tools and chat.tool_format == "hermes"
    prompt = text(chat, chat.prompt_ids(ASK))
    # Its default system prompt gives way to the tool description, in its own ChatML.
    assert prompt.startswith("<|im_start|>system\nYou can call the tools")
    assert prompt.endswith("<|im_start|>user\nprice of kx?<|im_end|>\n<|im_start|>assistant\n")
    written = chat.assistant_text(ASK, CALL)
    # OpenAI messages with tool calls may leave `content` out; SmolLM2's template reads
    # `message['content']` and would fail on one as it stands.
    bare = {k: v for k, v in CALL.items() if k != "content"}
    assert chat.assistant_text(ASK, bare) == written
    assert chat.assistant_text(ASK, {**CALL, "content": None}) == written
    history = [*ASK, {"role": "assistant", "content": written}]
    bridge = text(chat, chat.bridge_ids(history, [{"role": "tool", "content": "47"}]))
    assert bridge == "\n<|im_start|>tool\n47<|im_end|>\n<|im_start|>assistant\n"


def test_a_reference_call_is_written_in_the_format_that_is_parsed():
    """A template that writes Hermes calls, used with tool_format llama3_json: the reference turn
    is written the way the parser reads it, not the way the template writes it."""
    chat = chat_for(tokenizer_with(QWEN_LIKE, QWEN_SPECIALS), tool_format="llama3_json")
    assert json.loads(chat.assistant_text(ASK, CALL)) == {
        "name": "lookup",
        "parameters": {"name": "kx"},
    }
