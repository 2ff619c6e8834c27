"""Countdown: reach a target from a few small numbers with `+ - * /`, each number at most once.

The prompt `"make 22 from 3 5 7="` has, for example, the answer `"3*5+7"`. The level is how many
numbers are given. Only solvable instances are generated: the problem space of a level is every
(numbers, target) pair that the brute-force solver can reach, which also yields the reference.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Sequence

from honed.envs.tasks.base import Problem, TaskEnv
from honed.envs.tasks.expression import ExpressionError, evaluate
from honed.types import Item, Score

# A solver expression: a number, or (operator, left, right).
Node = int | tuple[str, "Node", "Node"]

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@functools.cache
def _exact_values(numbers: tuple[int, ...]) -> dict[int, Node]:
    """Every positive integer made from all of the sorted `numbers`, each used once.

    Intermediate results stay positive integers (the rule of the game show), which keeps the
    search small; the scorer is more lenient and accepts any exact rational arithmetic. Memoised
    on the multiset, so sub-multisets shared between problems are solved once.
    """
    if len(numbers) == 1:
        return {numbers[0]: numbers[0]}
    found: dict[int, Node] = {}
    n = len(numbers)
    for mask in range(1, (1 << n) - 1):
        left = tuple(numbers[i] for i in range(n) if mask >> i & 1)
        right = tuple(numbers[i] for i in range(n) if not mask >> i & 1)
        for a, a_node in _exact_values(left).items():
            for b, b_node in _exact_values(right).items():
                found.setdefault(a + b, ("+", a_node, b_node))
                found.setdefault(a * b, ("*", a_node, b_node))
                if a > b:
                    found.setdefault(a - b, ("-", a_node, b_node))
                if b > 1 and a % b == 0:
                    found.setdefault(a // b, ("/", a_node, b_node))
    return found


@functools.cache
def solutions(numbers: tuple[int, ...]) -> dict[int, Node]:
    """Every value reachable from the sorted `numbers`, using each at most once and at least two.

    Expressions with fewer numbers are preferred: they make shorter, easier reference answers.
    """
    found: dict[int, Node] = {}
    for size in range(2, len(numbers) + 1):
        for subset in sorted(set(itertools.combinations(numbers, size))):
            for value, node in _exact_values(subset).items():
                found.setdefault(value, node)
    return found


def render(node: Node) -> str:
    """Expression text with only the parentheses that change the value."""
    return _render(node)[0]


def _render(node: Node) -> tuple[str, int]:
    if isinstance(node, int):
        return str(node), 3
    op, left, right = node
    precedence = _PRECEDENCE[op]
    left_text, left_prec = _render(left)
    right_text, right_prec = _render(right)
    if left_prec < precedence:
        left_text = f"({left_text})"
    if right_prec < precedence or (right_prec == precedence and op in "-/"):
        right_text = f"({right_text})"
    return f"{left_text}{op}{right_text}", precedence


class CountdownEnv(TaskEnv):
    """Make `target` from `level` numbers in 1..`max_number` (targets in 1..`max_target`).

    Targets equal to one of the given numbers are left out, as they need no arithmetic. Numbers
    are shown in ascending order. Partial credit goes to a valid expression (parses, uses only
    allowed numbers) with the wrong value, in proportion to how close it comes.
    """

    min_level = 2
    max_level = 4
    default_levels = (2, 3, 4)

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        levels: Sequence[int] | None = None,
        train_size: int = 4000,
        validation_size: int = 200,
        test_size: int = 200,
        partial_credit: float = 0.0,
        max_number: int = 9,
        max_target: int = 99,
    ) -> None:
        super().__init__(
            name,
            seed,
            levels=levels,
            train_size=train_size,
            validation_size=validation_size,
            test_size=test_size,
            partial_credit=partial_credit,
        )
        self.max_number = self._check_int("max_number", max_number, 2, 15)
        self.max_target = self._check_int("max_target", max_target, 1, 1000)
        self._spaces: dict[int, list[tuple[tuple[int, ...], int]]] = {}

    def _check_int(self, arg: str, value: int, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self._fail(f"{arg} must be an integer from {low} to {high}, got {value!r}")
        return value

    def _space(self, level: int) -> list[tuple[tuple[int, ...], int]]:
        if level not in self._spaces:
            self._spaces[level] = [
                (numbers, target)
                for numbers in itertools.combinations_with_replacement(
                    range(1, self.max_number + 1), level
                )
                for target in sorted(solutions(numbers))
                if target <= self.max_target and target not in numbers
            ]
        return self._spaces[level]

    def space_size(self, level: int) -> int:
        return len(self._space(level))

    def problem_at(self, level: int, index: int) -> Problem:
        numbers, target = self._space(level)[index]
        shown = " ".join(map(str, numbers))
        return Problem(
            ident=f"{','.join(map(str, numbers))}->{target}",
            prompt=f"make {target} from {shown}=",
            answer=render(solutions(numbers)[target]),
            data={"numbers": list(numbers), "target": target},
        )

    def score(self, item: Item, completion: str) -> Score:
        target = item.data["target"]
        try:
            result = evaluate(completion.strip())
        except ExpressionError:
            result = None
        valid = result is not None and not Counter(result.numbers) - Counter(item.data["numbers"])
        exact = float(valid and result.value == target)
        partial = 0.0
        if valid and not exact:
            partial = max(0.0, 1.0 - float(abs(result.value - target)) / target)
        return Score(
            reward=exact + self.partial_credit * partial,
            success=exact,
            components={"exact": exact, "partial": partial, "format": float(valid)},
        )
