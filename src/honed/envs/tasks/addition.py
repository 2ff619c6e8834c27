"""Multi-digit addition: `"37+85="` -> `"122"`; the level is the number of digits per operand."""

from __future__ import annotations

import string

from honed.envs.tasks.base import Problem, TaskEnv, char_score
from honed.types import Item, Score


class AdditionEnv(TaskEnv):
    """Add two numbers of `level` digits each (level 1 includes 0, so it has exactly 100 sums).

    The classic first task for a from-scratch policy: short prompts, a verifiable answer, and a
    difficulty that grows smoothly with the number of digits (carries).
    """

    min_level = 1
    max_level = 18
    default_levels = (1, 2, 3)

    def _operands(self, level: int) -> tuple[int, int]:
        """The first operand value and how many values an operand can take."""
        low = 0 if level == 1 else 10 ** (level - 1)
        return low, 10**level - low

    def space_size(self, level: int) -> int:
        return self._operands(level)[1] ** 2

    def problem_at(self, level: int, index: int) -> Problem:
        low, count = self._operands(level)
        a, b = (low + v for v in divmod(index, count))
        return Problem(ident=f"{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b))

    def score(self, item: Item, completion: str) -> Score:
        return char_score(completion, item.data["answer"], string.digits, self.partial_credit)
