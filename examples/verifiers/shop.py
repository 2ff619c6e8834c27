"""A verifiers environment as its authors write one: `load_environment(**env_args)` returns a
`vf.ToolEnv`. honed trains on it unchanged (`examples/verifiers.yaml`, README "Bring a verifiers
environment"); `vf-eval` and prime-rl would run the same file.

The model answers questions about a price list it can only read through the `price` tool
("What do 3 pears cost?": look the pear up, multiply, answer). The rubric pays 1 for the right
total as the last number of the final answer and logs the tool calls (weight 0).
"""

from __future__ import annotations

import random
import re

import verifiers as vf
from datasets import Dataset

PRICES = {
    "apple": 3, "pear": 4, "plum": 2, "melon": 9, "lemon": 5, "mango": 7, "peach": 6,
    "grape": 8, "kiwi": 2, "cherry": 12, "fig": 11, "lime": 3, "date": 13, "guava": 10,
}  # fmt: skip


def price(fruit: str) -> int:
    """The price of one piece of a fruit, in cents.

    Args:
        fruit: the fruit's name, e.g. "apple"
    """
    return PRICES[fruit.strip().lower()]


def correct(completion, answer, **kwargs) -> float:
    """1 when the last number of the final answer is the total."""
    numbers = re.findall(r"-?\d+", str(completion[-1]["content"] or ""))
    return float(bool(numbers) and numbers[-1] == answer)


def _questions(fruits_and_counts: list[tuple[str, int]]) -> Dataset:
    return Dataset.from_list(
        [
            {"question": f"What do {n} {fruit}s cost, in cents?", "answer": str(n * PRICES[fruit])}
            for fruit, n in fruits_and_counts
        ]
    )


def load_environment(num_examples: int = 300, num_eval_examples: int = 64, seed: int = 0):
    """Questions on every fruit and count from 2 to 30, shuffled: the first `num_eval_examples`
    are the eval set, the next `num_examples` the training set (no question in both)."""
    pairs = [(fruit, n) for fruit in sorted(PRICES) for n in range(2, 31)]
    random.Random(seed).shuffle(pairs)
    return vf.ToolEnv(
        dataset=_questions(pairs[num_eval_examples : num_eval_examples + num_examples]),
        eval_dataset=_questions(pairs[:num_eval_examples]),
        tools=[price],
        system_prompt="Look prices up with the price tool, then give the total in cents.",
        rubric=vf.Rubric(funcs=[correct]),
        max_turns=3,
    )
