"""Between verifiers' messages and the OpenAI-style dictionaries honed renders and records.

verifiers (0.2 on) keeps a conversation as pydantic messages (`SystemMessage`, `UserMessage`,
`AssistantMessage` with provider-agnostic `ToolCall(id, name, arguments)` whose arguments are
JSON text, `ToolMessage`, and `TextMessage` for a completion-style prompt) and offers tools as
`Tool(name, description, parameters)`. honed's chat template, its run files and chat servers
speak OpenAI's format. Converting is all that happens here; no text is tokenised.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from honed.envs.multiturn.toolcalls import ParsedTurn
from honed.errors import HonedError
from honed.types import Message


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or content parts that are all text (joined).
    Images and audio have no place in a text policy's turn, so they are refused by name."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        kind = part.get("type") if hasattr(part, "get") else None
        if kind != "text":
            raise HonedError(
                f"{where}: a message holds a {kind or type(part).__name__} content part; honed "
                "trains text policies, so only text content is supported"
            )
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def openai_message(message: Any, where: str) -> Message:
    """One verifiers message as an OpenAI chat message (a completion-style `text` prompt is the
    user's turn); tool calls in OpenAI's wire format, arguments as the JSON text they hold."""
    role = message.get("role")
    out: Message = {
        "role": "user" if role == "text" else role,
        "content": text_of(message.get("content"), where),
    }
    calls = message.get("tool_calls") if role == "assistant" else None
    if calls:
        out["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("arguments")},
            }
            for call in calls
        ]
    if role == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
    return out


def openai_messages(messages: Sequence[Any], where: str) -> list[Message]:
    return [openai_message(m, where) for m in messages]


def tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """verifiers' `Tool`s as the OpenAI function schemas chat templates and servers take."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def from_parsed(vf: Any, turn: ParsedTurn, text: str, index: int) -> tuple[Any, bool]:
    """The assistant message a policy turn amounts to, and whether its calls were unreadable.

    Readable calls become `ToolCall`s with ids `call_<turn>_<k>` and their arguments as JSON
    text. A turn with a call that cannot be read keeps its whole text as content and calls
    nothing, as vLLM's Hermes parser answers a call it cannot decode: the environment sees
    what the model wrote, and honed counts it (`tool_call_format_errors`).
    """
    if turn.errors:
        return vf.AssistantMessage(content=text), True
    calls = [
        vf.ToolCall(
            id=f"call_{index}_{k}",
            name=call.name,
            arguments=json.dumps(call.arguments, ensure_ascii=False),
        )
        for k, call in enumerate(turn.calls)
    ]
    return vf.AssistantMessage(
        content=turn.content if calls else text, tool_calls=calls or None
    ), False


def from_openai(vf: Any, message: Message) -> Any:
    """A chat server's assistant message (OpenAI format) as verifiers' `AssistantMessage`:
    arguments stay the text the server sent, so the environment reads them as it would
    from verifiers' own client (and reports what it cannot parse)."""
    calls = []
    for entry in message.get("tool_calls") or []:
        function = entry.get("function") if isinstance(entry, dict) else None
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments", "")
        calls.append(
            vf.ToolCall(
                id=str(entry.get("id") or ""),
                name=str(function.get("name") or ""),
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    content = message.get("content")
    return vf.AssistantMessage(
        content=content if isinstance(content, str) else "", tool_calls=calls or None
    )


def response(
    vf: Any,
    message: Any,
    truncated: bool,
    prompt_tokens: int,
    completion_tokens: int,
    tokens: tuple[Sequence[int], Sequence[int], Sequence[float]] | None = None,
) -> Any:
    """A `vf.Response` for a turn honed produced, as verifiers' clients build one: the message,
    why it ended, its usage (which the environment's token limits read) and, from the policy,
    its tokens (prompt ids, completion ids, behaviour log-probs)."""
    finish = "length" if truncated else "tool_calls" if message.tool_calls else "stop"
    ids = None
    if tokens is not None:
        prompt_ids, completion_ids, logprobs = tokens
        ids = vf.ResponseTokens(
            prompt_ids=list(prompt_ids),
            prompt_mask=[0] * len(prompt_ids),
            completion_ids=list(completion_ids),
            completion_mask=[1] * len(completion_ids),
            completion_logprobs=list(logprobs),
        )
    return vf.Response(
        id="honed",
        created=int(time.time()),
        model="honed",
        usage=vf.Usage(
            prompt_tokens=prompt_tokens,
            reasoning_tokens=0,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        ),
        message=vf.ResponseMessage(
            content=message.content,
            tool_calls=message.tool_calls,
            finish_reason=finish,
            is_truncated=truncated,
            tokens=ids,
        ),
    )
