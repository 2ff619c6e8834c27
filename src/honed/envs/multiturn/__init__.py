"""Multi-turn episodes, token-exact: the reusable layer under every environment where the model
acts more than once (the `tools` environment; issue 19 moves the memory agent onto it).

- `toolcalls`: reading tool calls out of a turn, in the template's format (Hermes/Qwen
  `<tool_call>` blocks, Llama 3.1 JSON), with JSON repair; never raises;
- `template`: the chat template with tools: prompt ids, the bridge ids between turns, reference
  turns for warm-start;
- `episode`: one rollout's ids, loss mask, behaviour log-probs and conversation;
- `loop`: all episodes of a step advanced a turn at a time in batched generation.
"""

from honed.envs.multiturn.episode import Episode, Turn
from honed.envs.multiturn.loop import ChatGenerator, chat_format, run_episodes
from honed.envs.multiturn.template import ChatFormat
from honed.envs.multiturn.toolcalls import (
    TOOL_FORMATS,
    ParsedTurn,
    ToolCall,
    format_calls,
    openai_call,
    parse_tool_calls,
)

__all__ = [
    "TOOL_FORMATS",
    "ChatFormat",
    "ChatGenerator",
    "Episode",
    "ParsedTurn",
    "ToolCall",
    "Turn",
    "chat_format",
    "format_calls",
    "openai_call",
    "parse_tool_calls",
    "run_episodes",
]
