"""Chat templates for tests, written here to render tools the way real model families do.

- `QWEN_LIKE` renders as Qwen2.5-Instruct does: the tool schemas as JSON lines inside
  `<tools></tools>` in the system turn with the `<tool_call>` instructions, assistant tool calls
  as `<tool_call>\\n{json}\\n</tool_call>`, consecutive tool results grouped in one user turn as
  `<tool_response>` blocks, `<|im_end|>\\n` after every turn.
- `LLAMA31_LIKE` renders as Llama 3.1's JSON tool-calling template: headers between
  `<|start_header_id|>` and `<|end_header_id|>`, the tools as indented JSON in the first user
  turn, assistant calls as `{"name": ..., "parameters": ...}`, results in the `ipython` role as
  `{"output": ...}`, `<|eot_id|>` after every turn (contents trimmed).
- `NOT_PREFIX_PRESERVING` marks the last assistant turn differently from earlier ones (as
  templates that drop earlier reasoning do), so a conversation cannot be continued token-exact.

`tokenizer_with(specials)` is honed's character tokenizer with those special tokens added, so
these templates render into exact, special-token-aware ids without any download.
"""

from __future__ import annotations

from honed.models.tiny import build_char_tokenizer

QWEN_LIKE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}"
    "{% else %}You are a helpful assistant.{% endif %}"
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}"
    "<|im_start|>assistant{% if m.content %}\n{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}{% set f = c.function if c.function is defined else c %}"
    '\n<tool_call>\n{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_SPECIALS = ["<|im_start|>", "<|im_end|>"]

LLAMA31_LIKE = (
    "{{ bos_token }}"
    "{% set ns = namespace(rest=messages, system='') %}"
    "{% if messages[0].role == 'system' %}"
    "{% set ns.system = messages[0].content | trim %}{% set ns.rest = messages[1:] %}{% endif %}"
    "<|start_header_id|>system<|end_header_id|>\n\n"
    "{% if tools %}Environment: ipython\n{% endif %}{{ ns.system }}<|eot_id|>"
    "{% for m in ns.rest %}"
    "{% if loop.first and tools %}<|start_header_id|>user<|end_header_id|>\n\n"
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    "and its value}. Do not use variables.\n\n"
    "{% for t in tools %}{{ t | tojson(indent=4) }}\n\n{% endfor %}"
    "{{ m.content | trim }}<|eot_id|>"
    "{% elif m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>\n\n"
    '{{ {"output": m.content} | tojson }}<|eot_id|>'
    "{% elif m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% set f = m.tool_calls[0].function %}"
    '{"name": "{{ f.name }}", "parameters": {{ f.arguments | tojson }}}<|eot_id|>'
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# transformers renders chat templates with trim_blocks, which drops a newline that directly
# follows a block tag; real templates write those newlines as expressions, and so do these.
QWEN_LIKE = QWEN_LIKE.replace("%}\n", "%}{{ '\\n' }}")

LLAMA31_SPECIALS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"]

NOT_PREFIX_PRESERVING = (
    "{% for m in messages %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if loop.last and m.role == 'assistant' %} (latest){% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer_with(template: str, specials: list[str]):
    """honed's character tokenizer with `specials` added as special tokens and `template` as
    its chat template."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.chat_template = template
    return tokenizer
