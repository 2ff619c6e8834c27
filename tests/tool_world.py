"""Tools, reward functions, data and a scripted generator for the `tools` environment's tests.

`ScriptedGenerator` stands in for sampling only: its turns are written in advance (by a
function of the conversation so far), turned into ids by the real tokenizer (or given as ids),
and everything else (template, bridges, parsing, tools, rewards, metrics) is the product path.
The same environment runs on the real samplers in the tests that need real sampling.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from honed.models.generation import SamplingParams
from honed.types import Sample

PRICES = {"ab": 12, "cd": 30, "ef": 7}
CONCURRENCY = {"now": 0, "max": 0}
_lock = threading.Lock()


def lookup(name: str) -> int:
    """The price of a product.

    Args:
        name: the product's name
    """
    return PRICES[name]


def calc(expression: str) -> int:
    """Multiply or add two whole numbers.

    Args:
        expression: like 3*12 or 12+30
    """
    if "*" in expression:
        a, b = expression.split("*")
        return int(a) * int(b)
    a, b = expression.split("+")
    return int(a) + int(b)


def slow(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "slept"


async def fetch(key: str) -> str:
    """Fetch a value after a short wait (runs concurrently with other calls).

    Args:
        key: what to fetch
    """
    with _lock:
        CONCURRENCY["now"] += 1
        CONCURRENCY["max"] = max(CONCURRENCY["max"], CONCURRENCY["now"])
    try:
        await asyncio.sleep(0.05 if key != "forever" else 60)
    finally:
        with _lock:
            CONCURRENCY["now"] -= 1
    return key.upper()


def no_docstring(x: int) -> int:
    return x


def correct(completions, answer, **kwargs):
    """1 when the last message is the assistant's answer and equals the expected one."""
    return [
        float(c[-1]["role"] == "assistant" and c[-1]["content"].strip() == a)
        for c, a in zip(completions, answer, strict=True)
    ]


def used_tools(trajectory, **kwargs):
    return [float(any(t["tool_calls"] for t in tr["turns"])) for tr in trajectory]


SEEN: list[dict] = []


def record(**kwargs):
    """Keeps every call's arguments (tests read `SEEN`) and scores 0."""
    SEEN.append(kwargs)
    return [0.0] * len(kwargs["completions"])


def call(tool: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": tool, "arguments": arguments}}


ROWS = [
    {
        "prompt": "price of ab?",
        "answer": "12",
        "reference": [
            {"role": "assistant", "content": "", "tool_calls": [call("lookup", name="ab")]},
            {"role": "assistant", "content": "12"},
        ],
    },
    {
        "prompt": "3 cd cost?",
        "answer": "90",
        "reference": [
            {"role": "assistant", "content": "", "tool_calls": [call("lookup", name="cd")]},
            {"role": "tool", "content": "ignored: the tools are run again"},
            {"role": "assistant", "content": "", "tool_calls": [call("calc", expression="3*30")]},
            {"role": "assistant", "content": "90"},
        ],
    },
    {"prompt": "price of ef?", "answer": "7", "reference": None},
]


def write_data(path: Path, rows: Sequence[dict] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def hermes(tool: str, **arguments) -> str:
    """A Hermes-style call, as the tiny policy writes one."""
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


class ScriptedGenerator:
    """A `ChatGenerator` whose turns come from `script(context_text, seed)`: text (tokenised by
    the policy's tokenizer, then the end-of-turn token) or a list of ids, sampled as is. Every
    turn's tokens get log-prob -0.5; turns longer than `max_tokens` are cut (truncated)."""

    def __init__(
        self, policy, script: Callable[[str, int], str | list[int]], max_tokens: int = 200
    ) -> None:
        self.policy = policy
        self.script = script
        self.params = SamplingParams(1.0, 1.0, max_tokens)
        self.prompts: list[list[int]] = []

    def encode(self, prompt):
        return self.policy.encode(prompt)

    def generate(self, prompts, seeds) -> list[Sample]:
        out = []
        tokenizer = self.policy.tokenizer
        for ids, seed in zip(prompts, seeds, strict=True):
            self.prompts.append(list(ids))
            reply = self.script(tokenizer.decode(ids, skip_special_tokens=False), seed)
            if isinstance(reply, str):
                reply = [
                    *tokenizer(reply, add_special_tokens=False)["input_ids"],
                    self.policy.end_id,
                ]
            reply = list(reply)[: self.params.max_tokens]
            ended = bool(reply) and reply[-1] in self.policy.stop_ids
            out.append(
                Sample(
                    list(ids),
                    reply,
                    [-0.5] * len(reply),
                    self.policy.decode(reply[:-1] if ended else reply),
                    not ended,
                )
            )
        return out


def needs_solution(completions, solution):
    return [0.0] * len(completions)


def always_12(row: dict) -> str:
    """A rule baseline: the same answer for every question."""
    return "12"
