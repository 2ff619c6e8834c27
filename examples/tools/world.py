"""Generate the example's world: a price table the model can only read through `lookup`, and
questions that need one or two lookups and some arithmetic (through `calc`).

    python examples/tools/world.py   # rewrites world.json, train.jsonl, test.jsonl, validation.jsonl

Products have two-letter names and prices from 10 to 99, drawn at random, so no rule can guess
a price and the table is too large for a small model to learn by heart from its warm-start.
Three kinds of question, each row with its answer, the products it names, and a reference
conversation (the calls a solver makes, then the answer) for warm-start:

- `price`: "price of kx?"   lookup(kx)                    -> 47
- `times`: "3 kx cost?"     lookup(kx); calc(3*47)        -> 141
- `sum`:   "kx + qd?"       lookup(kx), lookup(qd); calc(47+85) -> 132

The demonstrations are correct but not all fit the environment: for 70% of the training sum
questions (`SEQUENTIAL`) they come from an agent that looked the two products up one per turn
(lookup, lookup, calc, answer: four turns), as if logged with a larger turn budget. The
example allows three turns (`max_turns: 3`), so an agent that imitates them runs out of turns
on sums before it answers; only the reward teaches it to call both lookups in one turn. The
held-out questions' references all do: the test split's (the reference solver) and the
validation split's, on which the warm-start's check measures copying (`sft.check`). The check
reads names and numbers copied in the turn GRPO must learn, so a warm-start passes it only
once it copies the second product's name in a one-turn pair, which the mostly sequential
demonstrations rarely show it; checked on training-like references instead, some seeds
passed with a warm-start that miscopied it, and GRPO then had no right one-turn answer to
reinforce.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

HERE = Path(__file__).parent
SEED = 0
PRODUCTS = 200
TRAIN, TEST, VALIDATION = 800, 200, 80
KINDS = ("price", "times", "sum")
WEIGHTS = (0.2, 0.4, 0.4)
# Share of the training sum questions whose demonstration looks the two products up one per
# turn (four turns in all) rather than both in one turn (three turns).
SEQUENTIAL = 0.7


def call(tool: str, **arguments: object) -> dict:
    return {"function": {"name": tool, "arguments": arguments}}


def turn(*calls: dict) -> dict:
    return {"role": "assistant", "tool_calls": list(calls)}


def question(rng: random.Random, prices: dict[str, int], sequential_share: float) -> dict:
    kind = rng.choices(KINDS, WEIGHTS)[0]
    names = rng.sample(sorted(prices), 2)
    a, b = prices[names[0]], prices[names[1]]
    if kind == "price":
        prompt, answer = f"price of {names[0]}?", a
        reference = [turn(call("lookup", name=names[0]))]
    elif kind == "times":
        count = rng.randint(2, 9)
        prompt, answer = f"{count} {names[0]} cost?", count * a
        reference = [
            turn(call("lookup", name=names[0])),
            turn(call("calc", expression=f"{count}*{a}")),
        ]
    else:
        prompt, answer = f"{names[0]} + {names[1]}?", a + b
        lookups = [call("lookup", name=names[0]), call("lookup", name=names[1])]
        one_by_one = rng.random() < sequential_share
        reference = [turn(c) for c in lookups] if one_by_one else [turn(*lookups)]
        reference.append(turn(call("calc", expression=f"{a}+{b}")))
    reference.append({"role": "assistant", "content": str(answer)})
    products = names[:1] if kind != "sum" else names
    return {
        "prompt": prompt,
        "answer": str(answer),
        "kind": kind,
        "products": products,
        "reference": reference,
    }


def main() -> None:
    rng = random.Random(SEED)
    names = rng.sample(
        [x + y for x in string.ascii_lowercase for y in string.ascii_lowercase], PRODUCTS
    )
    prices = {name: rng.randint(10, 99) for name in sorted(names)}
    (HERE / "world.json").write_text(json.dumps({"prices": prices}) + "\n")
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {"test": [], "train": [], "validation": []}
    for split, size in (("test", TEST), ("train", TRAIN), ("validation", VALIDATION)):
        while len(splits[split]) < size:
            row = question(rng, prices, SEQUENTIAL if split == "train" else 0.0)
            if row["prompt"] not in seen:  # a question is in one split only
                seen.add(row["prompt"])
                splits[split].append(row)
        with (HERE / f"{split}.jsonl").open("w") as out:
            for row in splits[split]:
                out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
