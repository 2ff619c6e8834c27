"""Samples as replies: OpenAI's completion and chat shapes with vLLM's token fields, and
SGLang's `/generate` shape.

A choice's token ids and log-probs are exactly what the sampler drew, the end-of-turn token
included when the completion stopped on it (its text is not in the reply's text), so a trainer
that reads them trains on the sampled tokens. Log-probs are those of the distribution sampled
from: the temperature applied, before top-p (vLLM's `--logprobs-mode processed_logprobs`);
greedy requests (temperature 0) report them at temperature 1.

Stop strings are found in the decoded text; the choice is cut after the token that completes
the first one (its text before the stop string, unless `include_stop_str_in_output`), so ids,
log-probs and text still agree. `return_token_ids` adds `prompt_token_ids` and `token_ids` as
vLLM (≥ 0.10.2) names them; `return_tokens_as_token_ids` writes each log-prob's token as
`token_id:<id>`.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from honed.envs.multiturn.toolcalls import parse_tool_calls
from honed.models.policy import Policy
from honed.serve.engine import Generated


@dataclass
class Choice:
    """One finished completion: its ids, log-probs and text after any stop string, and why
    it ended (`stop`, `length`; `stop_reason`: the stop string or extra stop token id)."""

    ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    stop_reason: str | int | None
    top: list[list[tuple[int, float]]] | None


def _decode(policy: Policy, ids: Sequence[int], skip_special: bool) -> str:
    return str(policy.tokenizer.decode(list(ids), skip_special_tokens=skip_special))


def finish(
    policy: Policy,
    out: Generated,
    stops: Sequence[str],
    extra_stop_ids: Sequence[int],
    skip_special: bool = True,
    include_stop: bool = False,
) -> Choice:
    """`out` with its stop string applied and its text decoded."""
    s = out.sample
    ids, logprobs = list(s.completion_ids), list(s.logprobs)
    ended = bool(ids) and not s.truncated
    body = ids[:-1] if ended else ids
    text = _decode(policy, body, skip_special)
    reason: str | int | None = None
    if ended and ids[-1] in extra_stop_ids:
        reason = ids[-1]
    found = [(text.find(stop), stop) for stop in stops if stop in text]
    if found:
        at, stop = min(found)
        keep = _tokens_covering(policy, body, at + len(stop), skip_special)
        ids, logprobs = ids[:keep], logprobs[:keep]
        text = text[: at + len(stop)] if include_stop else text[:at]
        top = out.top[:keep] if out.top is not None else None
        return Choice(ids, logprobs, text, "stop", stop, top)
    return Choice(ids, logprobs, text, "stop" if ended else "length", reason, out.top)


def _tokens_covering(policy: Policy, ids: list[int], chars: int, skip_special: bool) -> int:
    """The fewest leading tokens of `ids` whose text is at least `chars` characters long."""
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_decode(policy, ids[:mid], skip_special)) >= chars:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _token(policy: Policy, token_id: int, as_ids: bool) -> str:
    if as_ids:
        return f"token_id:{token_id}"
    return _decode(policy, [token_id], False)


def completion_logprobs(policy: Policy, c: Choice, as_ids: bool) -> dict[str, Any]:
    """The legacy completions `logprobs` object."""
    tokens = [_token(policy, i, as_ids) for i in c.ids]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    top = None
    if c.top is not None:
        top = [{_token(policy, i, as_ids): lp for i, lp in pairs} for pairs in c.top]
    return {
        "tokens": tokens,
        "token_logprobs": c.logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }


def _entry(policy: Policy, token_id: int, logprob: float, as_ids: bool) -> dict[str, Any]:
    token = _token(policy, token_id, as_ids)
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(policy: Policy, c: Choice, as_ids: bool) -> dict[str, Any]:
    """The chat `logprobs` object: one entry per token, with its alternatives."""
    content = []
    for pos, (token_id, lp) in enumerate(zip(c.ids, c.logprobs, strict=True)):
        entry = _entry(policy, token_id, lp, as_ids)
        pairs = c.top[pos] if c.top is not None else []
        entry["top_logprobs"] = [_entry(policy, i, v, as_ids) for i, v in pairs]
        content.append(entry)
    return {"content": content}


def usage(prompts: Sequence[Sequence[int]], choices: Sequence[Choice]) -> dict[str, int]:
    prompt = sum(len(p) for p in prompts)
    completion = sum(len(c.ids) for c in choices)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_body(
    policy: Policy,
    model: str,
    prompts: Sequence[list[int]],
    choices: Sequence[Choice],
    logprobs: int | None,
    token_ids: bool,
    as_ids: bool,
) -> dict[str, Any]:
    """`POST /v1/completions`'s reply; `choices` run prompt by prompt, `n` each."""
    n = len(choices) // len(prompts)
    out = []
    for index, c in enumerate(choices):
        choice: dict[str, Any] = {
            "index": index,
            "text": c.text,
            "logprobs": completion_logprobs(policy, c, as_ids) if logprobs is not None else None,
            "finish_reason": c.finish_reason,
            "stop_reason": c.stop_reason,
        }
        if token_ids:
            choice["prompt_token_ids"] = prompts[index // n]
            choice["token_ids"] = c.ids
        out.append(choice)
    return {
        "id": f"cmpl-{secrets.token_hex(12)}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": usage([prompts[i // n] for i in range(len(choices))], choices),
    }


def tool_message(text: str, tool_format: str) -> dict[str, Any]:
    """An assistant message with the tool calls read from `text`, if it makes any."""
    turn = parse_tool_calls(text, tool_format)
    if not turn.calls:
        return {"role": "assistant", "content": text}
    calls = [
        {
            "id": f"call_{secrets.token_hex(12)}",
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            },
        }
        for call in turn.calls
    ]
    return {"role": "assistant", "content": turn.content or None, "tool_calls": calls}


def chat_body(
    policy: Policy,
    model: str,
    prompt: list[int],
    choices: Sequence[Choice],
    tool_format: str | None,
    logprobs: bool,
    token_ids: bool,
    as_ids: bool,
) -> dict[str, Any]:
    """`POST /v1/chat/completions`'s reply; `tool_format` parses tool calls when given."""
    out = []
    for index, c in enumerate(choices):
        if tool_format is None:
            message: dict[str, Any] = {"role": "assistant", "content": c.text}
        else:
            message = tool_message(c.text, tool_format)
        finish_reason = "tool_calls" if message.get("tool_calls") else c.finish_reason
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "logprobs": chat_logprobs(policy, c, as_ids) if logprobs else None,
            "finish_reason": finish_reason,
            "stop_reason": c.stop_reason,
        }
        if token_ids:
            choice["token_ids"] = c.ids
        out.append(choice)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": usage([prompt] * len(choices), choices),
    }
    if token_ids:
        body["prompt_token_ids"] = prompt
    return body


def generate_body(
    policy: Policy, prompt: list[int], c: Choice, logprob: bool, top: int
) -> dict[str, Any]:
    """One result of SGLang's `/generate`: text, output ids and `meta_info`."""
    finish_reason: dict[str, Any] = {"type": c.finish_reason}
    if c.finish_reason == "stop":
        finish_reason["matched"] = c.stop_reason if c.stop_reason is not None else c.ids[-1]
    meta: dict[str, Any] = {
        "id": secrets.token_hex(16),
        "finish_reason": finish_reason,
        "prompt_tokens": len(prompt),
        "completion_tokens": len(c.ids),
    }
    if logprob:
        meta["output_token_logprobs"] = [
            [lp, i, None] for i, lp in zip(c.ids, c.logprobs, strict=True)
        ]
        if top and c.top is not None:
            meta["output_top_logprobs"] = [[[v, i, None] for i, v in pairs] for pairs in c.top]
    return {"text": c.text, "output_ids": c.ids, "meta_info": meta}
