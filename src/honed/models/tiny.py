"""The embedded default policy: a small Llama built from a config, with a character tokenizer.

No model hub is reachable on a laptop offline or in CI, so honed ships a model it can build from
nothing. Both parts are standard `transformers` objects: a checkpoint loads back with
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` and nothing from honed.
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from honed.config import TinyModelConfig

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD, BOS, EOS, UNK = SPECIAL_TOKENS
# Printable ASCII and newline: enough for arithmetic, strings, JSON tool calls and short prose.
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]

# The tiny policy's chat template: one letter per role, so that prompts stay short in a
# character-level model. Tools are listed by signature only (`T:lookup(name) calc(expression)`);
# calls are Hermes-style `<tool_call>{...}</tool_call>` blocks, results `R:` lines, and `<eos>`
# ends every assistant turn (the policy's end-of-turn stop token).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}T:"
    "{% for t in tools %}{% set f = t.function if t.function is defined else t %}"
    "{{ ' ' if not loop.first }}{{ f.name }}({{ f.parameters.properties | join(',') }})"
    "{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' %}S:{{ m.content }}\n"
    "{% elif m.role == 'user' %}U:{{ m.content }}\n"
    "{% elif m.role == 'tool' %}R:{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}A:{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}{% set f = c.function if c.function is defined else c %}"
    '<tool_call>{"name":"{{ f.name }}","arguments":'
    "{{ f.arguments if f.arguments is string else f.arguments | tojson }}}</tool_call>"
    "{% endfor %}{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; `<bos>` is prepended on encode, decoding fuses characters; the
    chat template is `CHAT_TEMPLATE` (used with `policy.chat_template: true`)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    shape: TinyModelConfig,
    tokenizer: PreTrainedTokenizerFast,
    seed: int,
    attn_implementation: str | None = None,
) -> LlamaForCausalLM:
    """A randomly initialised Llama whose weights depend only on `seed` and the shape (built on
    the CPU, so the same seed gives the same weights whatever device it is moved to)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **({"attn_implementation": attn_implementation} if attn_implementation else {}),
    )
    devices_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(devices_rng)
    return model
