"""Generate the calculator task for `examples/tools_smollm2.yaml`: arithmetic a 135M chat model
cannot do in its head, and a `calculator` tool (examples/tools/tools.py) that makes it solvable.

    python examples/tools_smollm2/data.py     # rewrites train.jsonl and test.jsonl

Questions are asked in words, three kinds, drawn with equal weight:

- `add`:   "What is 4821 + 3967?"         four-digit sums
- `sub`:   "What is 9305 - 2748?"         four-digit differences, never negative
- `mul`:   "What is 482 * 37?"            three digits times two

Each prompt is one solved example conversation (a sum worked out with `calculator`, then the
number), then the question: a 135M chat model told about a tool only in its system message
seldom calls it; with one example of a call it does, often (the README has both measured).
Which kinds it then solves, how it writes the call for a kind the example does not show (the
example only adds), and whether it copies the result into its answer, is what the reward
teaches. Each row holds its
answer, its kind and a reference conversation (the reference solver's row in `honed eval`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
SEED = 0
TRAIN, TEST = 800, 200
KINDS = ("add", "sub", "mul")
EXAMPLE = ("1234 + 5678", 6912)  # the solved example in every prompt; never asked


def hermes(tool: str, **arguments: object) -> str:
    """A call as the model writes it (the Hermes format honed's parser reads)."""
    return "<tool_call>\n" + json.dumps({"name": tool, "arguments": arguments}) + "\n</tool_call>"


def expression(rng: random.Random, kind: str) -> tuple[str, int]:
    if kind == "add":
        a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
        return f"{a} + {b}", a + b
    if kind == "sub":
        a, b = sorted((rng.randint(1000, 9999), rng.randint(1000, 9999)), reverse=True)
        return f"{a} - {b}", a - b
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    return f"{a} * {b}", a * b


def row(rng: random.Random) -> dict:
    kind = rng.choice(KINDS)
    text, answer = expression(rng, kind)
    example, result = EXAMPLE
    messages = [
        {"role": "user", "content": f"What is {example}?"},
        {"role": "assistant", "content": hermes("calculator", expression=example)},
        {"role": "tool", "content": str(result)},
        {"role": "assistant", "content": str(result)},
        {"role": "user", "content": f"What is {text}?"},
    ]
    reference = [
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "calculator", "arguments": {"expression": text}}}],
        },
        {"role": "assistant", "content": str(answer)},
    ]
    return {
        "prompt": messages,
        "question": f"What is {text}?",
        "answer": str(answer),
        "kind": kind,
        "reference": reference,
    }


def main() -> None:
    rng = random.Random(SEED)
    seen = {f"What is {EXAMPLE[0]}?"}
    for split, size in (("test", TEST), ("train", TRAIN)):
        rows: list[dict] = []
        while len(rows) < size:
            candidate = row(rng)
            if candidate["question"] not in seen:  # a question is in one split only
                seen.add(candidate["question"])
                rows.append(candidate)
        with (HERE / f"{split}.jsonl").open("w") as out:
            for r in rows:
                out.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
