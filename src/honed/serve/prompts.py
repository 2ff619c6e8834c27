"""Requests' prompts as the token ids the model is given.

Completions take text (tokenised as it is, with the tokenizer's own special tokens, as vLLM
does) or token ids (used exactly). Chat messages are rendered by the model's chat template
with the request's tools, through `honed.envs.multiturn.template.ChatFormat`, the class honed's
own tool environments use: a template that does not render tools gets them described in a
system message in the format honed then parses calls in, so the model that answers and the
parser that reads its calls agree. Tool-call arguments sent as JSON text are given to the
template as objects, which is what Hugging Face chat templates expect (vLLM does the same).
"""

from __future__ import annotations

import json
from typing import Any

from honed.envs.multiturn.template import ChatFormat
from honed.envs.multiturn.toolcalls import ToolCall, format_calls
from honed.errors import HonedError
from honed.models.policy import Policy
from honed.serve.protocol import ChatMessage, ChatRequest, ServeError


def text_ids(policy: Policy, prompt: str | list[int]) -> list[int]:
    """A completion prompt's ids: token ids as given, text tokenised as it is."""
    if isinstance(prompt, list):
        vocab = len(policy.tokenizer)
        bad = [i for i in prompt if not 0 <= i < vocab]
        if bad:
            raise ServeError(400, f"prompt: token id {bad[0]} is outside the vocabulary")
        return list(prompt)
    return [int(i) for i in policy.tokenizer(prompt)["input_ids"]]


def _arguments(value: str | dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return value
    try:
        return json.loads(value) if value.strip() else {}
    except ValueError:
        return value  # the template gets the text the client sent


def _message(m: ChatMessage, fold_calls: str | None) -> dict[str, Any]:
    """One message as chat templates read it; with `fold_calls` (a tool-call format), an
    assistant's calls are written into its content, for templates that do not render them."""
    role = "system" if m.role == "developer" else m.role
    out: dict[str, Any] = {"role": role, "content": m.text()}
    if m.name:
        out["name"] = m.name
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        calls = [
            {
                "id": c.id or "",
                "type": "function",
                "function": {
                    "name": c.function.name,
                    "arguments": _arguments(c.function.arguments),
                },
            }
            for c in m.tool_calls
        ]
        if fold_calls is None:
            out["tool_calls"] = calls
        else:
            written = format_calls(
                [ToolCall(c["function"]["name"], _as_object(c)) for c in calls], fold_calls
            )
            out["content"] = "\n".join(p for p in (out["content"], written) if p)
    return out


def _as_object(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["function"]["arguments"]
    return arguments if isinstance(arguments, dict) else {"arguments": arguments}


def chat_format(policy: Policy, request: ChatRequest) -> ChatFormat:
    """The chat template with the request's tools (a 400 when the model has no template)."""
    if not policy.chat_template:
        raise ServeError(
            400,
            "this model has no chat template; use /v1/completions with a text prompt",
            param="messages",
        )
    tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
    # without tools no call is parsed: the format need not be found in the template
    tool_format = "auto" if tools else "hermes"
    try:
        return ChatFormat(policy.tokenizer, policy.end_of_turn_id, tools, tool_format)
    except HonedError as err:
        raise ServeError(400, str(err), param="tools") from None


def chat_ids(policy: Policy, request: ChatRequest, fmt: ChatFormat) -> list[int]:
    """The prompt of a chat request: its messages rendered with the generation prompt."""
    fold = fmt.tool_format if request.tools and not fmt.renders_tools else None
    messages = [_message(m, fold) for m in request.messages]
    try:
        return fmt.prompt_ids(messages)
    except HonedError as err:
        raise ServeError(400, str(err), param="messages") from None
