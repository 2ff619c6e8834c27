"""The skill loop's target acting in a `tools` environment, through the server's own tool calling.

Weight training rolls a `tools` environment out token by token and parses the policy's calls
itself; the skill loop drives a served model, so it speaks the server's native tool calling
(OpenAI chat completions): each request carries the environment's tool schemas as `tools`, a
reply's `tool_calls` are run by the environment's toolbox (the same tools, time limit and error
messages as in training), and the results go back as `tool` messages answering each call by its
`tool_call_id`. The conversation ends on a reply without calls (the answer), after the
environment's `max_turns` replies (the last one's calls still run, as in training), or on a
reply cut at `max_tokens`. All conversations of a
batch advance together, one round of requests per turn, and the calls of a round run together
(async tools concurrently).

A call the server sends but that cannot be read (arguments that are not a JSON object, no name)
is answered with an error message, as in training. A request that fails (retries spent) fails
the whole conversation: the rollout has no answer and is left out of the scores.

The conversation, tool calls and results included, is what the environment scores (its reward
functions read `messages` and `trajectory` as in training) and what the reflector reads.

Environments that play episodes of their own (`ChatEpisodes`: verifiers environments) are driven
the same way, except that the environment answers each reply (its tools, its `env_response`) and
says when the episode is over; each request offers the tools that episode has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from honed.envs.base import ChatEpisodes
from honed.envs.multiturn import ToolCall, openai_call
from honed.envs.tools.env import TOOL_ERROR_NAME, ToolEnv
from honed.models.chat import ChatClient, ChatFailure, ChatReply, Messages
from honed.types import Item, Message


def is_tool_env(env: object) -> bool:
    """Whether the skill loop drives `env` as a multi-turn tool environment."""
    return isinstance(env, ToolEnv | ChatEpisodes)


@dataclass
class Conversation:
    """One target's episode: the request so far, and what the target has said in it."""

    messages: Messages
    start: int  # where the target's part begins (after the system message and the prompt)
    truncated: bool = False
    reasoning: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def after_prompt(self) -> list[Message]:
        return list(self.messages[self.start :])

    @property
    def answer(self) -> str:
        """The last assistant turn's text (the answer when the conversation ended on one)."""
        for message in reversed(self.messages[self.start :]):
            if message.get("role") == "assistant":
                content = message.get("content")
                return content if isinstance(content, str) else ""
        return ""


def run_conversations(
    client: ChatClient,
    env: ToolEnv | ChatEpisodes,
    requests: Sequence[Messages],
    stage: str,
    give_up: float = 1.0,
    items: Sequence[Item] = (),
) -> Iterator[tuple[int, Conversation | ChatFailure]]:
    """Each request played out as a conversation with the tools (see the module docstring),
    yielded (index, conversation or the failure that ended it) as each ends. Once more than
    `give_up` of the batch has failed, no further request is sent and the conversations still
    going fail too. A `ChatEpisodes` environment plays the episodes of `items` (one per
    request)."""
    if not isinstance(env, ToolEnv):
        yield from _run_episodes(client, env, items, requests, stage, give_up)
        return
    conversations = [Conversation(list(m), len(m)) for m in requests]
    active = list(range(len(conversations)))
    failures = 0
    for _ in range(env.max_turns):
        if not active:
            return
        calling: list[int] = []
        replies = client.complete_many(
            [conversations[i].messages for i in active], stage, tools=env.toolbox.schemas
        )
        for k, result in replies:
            index = active[k]
            if isinstance(result, ChatFailure):
                failures += 1
                if failures > give_up * len(conversations):
                    replies.cancel()
                yield index, result
                continue
            conversation = conversations[index]
            if _take_reply(conversation, result):
                calling.append(index)
            else:
                yield index, conversation
        if failures > give_up * len(conversations):
            for index in calling:
                yield index, ChatFailure("not sent: too many of the batch's requests had failed")
            return
        calling.sort()
        _run_calls(env, [conversations[i] for i in calling])
        active = calling
    for index in active:  # the last turn's calls ran, as in training, but the turns are spent
        yield index, conversations[index]


def _run_episodes(
    client: ChatClient,
    env: ChatEpisodes,
    items: Sequence[Item],
    requests: Sequence[Messages],
    stage: str,
    give_up: float,
) -> Iterator[tuple[int, Conversation | ChatFailure]]:
    """`run_conversations` for an environment that answers the replies itself: each round, one
    request per episode still going (those offering the same tools sent together), then the
    environment's answers; an episode ends when the environment says so."""
    chats = env.open_chats(items)
    conversations = [Conversation(list(m), len(m)) for m in requests]
    active = list(range(len(conversations)))
    failures = 0
    for _ in range(env.max_turns):
        if not active:
            return
        offering: dict[str, list[int]] = {}
        for index in active:
            offering.setdefault(json.dumps(chats[index].tools, sort_keys=True), []).append(index)
        answered: list[int] = []
        for members in offering.values():
            replies = client.complete_many(
                [conversations[i].messages for i in members],
                stage,
                tools=chats[members[0]].tools or None,
            )
            for k, result in replies:
                index = members[k]
                if isinstance(result, ChatFailure):
                    failures += 1
                    if failures > give_up * len(conversations):
                        replies.cancel()
                    yield index, result
                    continue
                _take_reply(conversations[index], result)
                answered.append(index)
        if failures > give_up * len(conversations):
            for index in answered:
                yield (
                    index,
                    ChatFailure("not sent: too many of the batch's requests had failed", "gave_up"),
                )
            return
        answered.sort()
        answers = env.advance_chats(
            [chats[i] for i in answered],
            [conversations[i].messages[-1] for i in answered],
            [conversations[i].truncated for i in answered],
        )
        active = []
        for index, answer in zip(answered, answers, strict=True):
            if answer is None:
                yield index, conversations[index]
            else:
                conversations[index].messages += answer
                active.append(index)
    for index in active:  # the environment wanted more, but the replies are spent
        yield index, conversations[index]


def _take_reply(conversation: Conversation, reply: ChatReply) -> bool:
    """Append the target's reply; whether it calls tools (and was not cut short)."""
    message: Message = {"role": "assistant", "content": reply.text}
    entries = reply.message.get("tool_calls")
    calls = entries if isinstance(entries, list) else []
    if calls:
        message["tool_calls"] = calls
    conversation.messages.append(message)
    if reply.reasoning:
        conversation.reasoning.append(reply.reasoning)
    conversation.truncated = reply.truncated
    return bool(calls) and not reply.truncated


def _run_calls(env: ToolEnv, conversations: list[Conversation]) -> None:
    """Run the last turn's calls of every conversation together and answer each call."""
    batch: list[ToolCall] = []
    plans: list[list[tuple[str, ToolCall | None, str]]] = []
    for conversation in conversations:
        plan = []
        for j, entry in enumerate(conversation.messages[-1]["tool_calls"]):
            call, problem = openai_call(entry)
            ident = _entry_id(entry) or f"call_{len(conversation.messages)}_{j}"
            if isinstance(entry, dict) and not _entry_id(entry):
                entry["id"] = ident  # a server that gave no id gets one, so results match
            if call is not None:
                call.id = ident
                batch.append(call)
            plan.append((ident, call, f"Error: {problem}"))
        plans.append(plan)
    results = iter(env.toolbox.run(batch))
    for conversation, plan in zip(conversations, plans, strict=True):
        for ident, call, problem in plan:
            content = next(results).content if call is not None else problem
            conversation.messages.append(
                {"role": "tool", "tool_call_id": ident, "content": content}
            )


def _entry_id(entry: Any) -> str | None:
    ident = entry.get("id") if isinstance(entry, dict) else None
    return ident if isinstance(ident, str) and ident else None


def render_conversation(messages: Sequence[Message]) -> str:
    """The target's part of a conversation as the reflector reads it: each turn's text, each
    call with its arguments, each result."""
    names: dict[str, str] = {}
    lines = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if text.strip() or not calls:
                lines.append(f"[assistant] {text}")
            for entry in calls if isinstance(calls, list) else []:
                call, problem = openai_call(entry)
                ident = _entry_id(entry) or ""
                if call is None:
                    names[ident] = TOOL_ERROR_NAME
                    lines.append(f"[call, unreadable] {problem}")
                    continue
                names[ident] = call.name
                arguments = json.dumps(call.arguments, ensure_ascii=False)
                lines.append(f"[call] {call.name}({arguments})")
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "tool")
            lines.append(f"[result of {name}] {text}")
    return "\n".join(lines)
