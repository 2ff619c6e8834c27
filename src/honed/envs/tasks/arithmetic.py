"""Arithmetic asked in words, for pretrained chat models: "What is 47 + 39? Reply with the
number only." -> success when the last number in the reply is 86.

`addition` asks a policy trained from scratch in its own terse format (`"47+39="`); this task asks
a pretrained instruct model the way a user would, and accepts any phrasing of the answer ("47 +
39 = 86.") because what RL should improve here is the arithmetic, not the format. The reward is
exact success; the `format` component says whether the reply held a number at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from honed.envs.tasks.base import Problem, TaskEnv
from honed.types import Item, Score

OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
DEFAULT_TEMPLATE = "What is {expression}? Reply with the number only."
_NUMBER = re.compile(r"-?\d[\d,]*")


def last_number(text: str) -> int | None:
    """The last integer written in `text` (thousands separators allowed), if any."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    digits = found[-1].replace(",", "")
    return int(digits) if digits.lstrip("-") else None


class ArithmeticEnv(TaskEnv):
    """`terms` operands of `level` digits each, joined by `op` (`+`, `-` or `*`), evaluated left
    to right (`-` may give a negative answer).

    `template` is the question, with `{expression}` where "47 + 39" goes; the default asks for
    the number only. Level 1 operands include 0.
    """

    min_level = 1
    max_level = 9
    default_levels = (2,)

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        op: str = "+",
        terms: int = 2,
        template: str = DEFAULT_TEMPLATE,
        levels: Sequence[int] | None = None,
        train_size: int = 4000,
        validation_size: int = 200,
        test_size: int = 200,
    ) -> None:
        self.op, self.terms, self.template = op, terms, template
        super().__init__(
            name,
            seed,
            levels=levels,
            train_size=train_size,
            validation_size=validation_size,
            test_size=test_size,
        )
        if op not in OPERATORS:
            raise self._fail(f"op must be one of {', '.join(OPERATORS)}, got {op!r}")
        if not isinstance(terms, int) or isinstance(terms, bool) or not 2 <= terms <= 6:
            raise self._fail(f"terms must be an integer from 2 to 6, got {terms!r}")
        if not isinstance(template, str) or "{expression}" not in template:
            raise self._fail(
                f"template must be a string containing {{expression}}, got {template!r}"
            )

    def _operands(self, level: int) -> tuple[int, int]:
        """The first operand value and how many values an operand can take."""
        low = 0 if level == 1 else 10 ** (level - 1)
        return low, 10**level - low

    def space_size(self, level: int) -> int:
        return self._operands(level)[1] ** self.terms

    def problem_at(self, level: int, index: int) -> Problem:
        low, count = self._operands(level)
        values = []
        for _ in range(self.terms):
            index, digit = divmod(index, count)
            values.append(low + digit)
        answer = values[0]
        for v in values[1:]:
            answer = OPERATORS[self.op](answer, v)
        expression = f" {self.op} ".join(map(str, values))
        return Problem(
            ident=expression.replace(" ", ""),
            prompt=self.template.format(expression=expression),
            answer=str(answer),
        )

    def score(self, item: Item, completion: str) -> Score:
        found = last_number(completion)
        exact = float(found is not None and str(found) == item.data["answer"])
        return Score(reward=exact, success=exact, components={"format": float(found is not None)})
