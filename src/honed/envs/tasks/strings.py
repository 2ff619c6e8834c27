"""String manipulation tasks: reversing letters and sorting digits; the level is the length."""

from __future__ import annotations

import abc
import string
from typing import ClassVar

from honed.envs.tasks.base import Problem, TaskEnv, char_score
from honed.types import Item, Score


class _StringTask(TaskEnv):
    """A task whose input is any string of `level` characters over `alphabet`.

    The problem space is every such string, numbered as base-`len(alphabet)` integers, so the
    split machinery can draw from it by index.
    """

    min_level = 1
    max_level = 32
    default_levels = (3, 4, 5)
    alphabet: ClassVar[str]
    verb: ClassVar[str]

    @abc.abstractmethod
    def solve(self, text: str) -> str:
        """The correct answer for an input string (the reference solver)."""

    def space_size(self, level: int) -> int:
        return len(self.alphabet) ** level

    def problem_at(self, level: int, index: int) -> Problem:
        chars = []
        for _ in range(level):
            index, digit = divmod(index, len(self.alphabet))
            chars.append(self.alphabet[digit])
        text = "".join(reversed(chars))
        return Problem(ident=text, prompt=f"{self.verb} {text}=", answer=self.solve(text))

    def score(self, item: Item, completion: str) -> Score:
        return char_score(completion, item.data["answer"], self.alphabet, self.partial_credit)


class ReverseEnv(_StringTask):
    """Reverse a lowercase string: `"reverse abc="` -> `"cba"`."""

    alphabet = string.ascii_lowercase
    verb = "reverse"

    def solve(self, text: str) -> str:
        return text[::-1]


class SortEnv(_StringTask):
    """Sort the digits of a string: `"sort 3172="` -> `"1237"`."""

    alphabet = string.digits
    verb = "sort"

    def solve(self, text: str) -> str:
        return "".join(sorted(text))
