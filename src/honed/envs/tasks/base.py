"""The shared machinery of the embedded verifiable tasks: problem spaces, levels and splits.

Each task describes, per difficulty level, an *indexable* space of problems (`space_size` and
`problem_at`). That one shape gives every task exact, disjoint splits: a level's problems are
drawn without replacement (by index), so no problem can land in two splits, and a level with few
problems is used whole and divided proportionally instead of failing.
"""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from honed.envs.base import SingleTurnEnv
from honed.envs.tasks.allocation import apportion, share_evenly
from honed.errors import HonedError
from honed.types import SPLITS, Item, Score, derive_seed

# A space this small is shuffled whole; a larger one is sampled by rejection, which then needs
# few draws because the items wanted are at most a quarter of the space.
_SHUFFLE_LIMIT_FACTOR = 4


@dataclass(frozen=True)
class Problem:
    """One problem of a task: `ident` is unique within the task and becomes the item key."""

    ident: str
    prompt: str
    answer: str
    data: dict[str, Any] = field(default_factory=dict)


class TaskEnv(SingleTurnEnv):
    """A single-turn task with difficulty levels, disjoint splits and a reference solver.

    Items of a split are balanced over `levels` (a level with too few problems gives its share
    to the others) and come out in a fixed order derived from `seed` and the environment name.
    `partial_credit` (0 by default) adds reward for near misses; success stays exact.
    """

    min_level: ClassVar[int]
    max_level: ClassVar[int]
    default_levels: ClassVar[tuple[int, ...]]

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
    ) -> None:
        super().__init__(name)
        self.seed = seed
        self.levels = self._check_levels(levels)
        self.sizes = {
            "train": self._check_size("train_size", train_size),
            "validation": self._check_size("validation_size", validation_size),
            "test": self._check_size("test_size", test_size),
        }
        self.partial_credit = self._check_fraction("partial_credit", partial_credit)
        self._splits: dict[str, list[Item]] | None = None

    # What a task defines -------------------------------------------------------------------

    @abc.abstractmethod
    def space_size(self, level: int) -> int:
        """How many distinct problems the level has."""

    @abc.abstractmethod
    def problem_at(self, level: int, index: int) -> Problem:
        """The problem with this index in `range(space_size(level))`."""

    @abc.abstractmethod
    def score(self, item: Item, completion: str) -> Score: ...

    # The environment -----------------------------------------------------------------------

    def prompt(self, item: Item) -> str:
        return item.data["prompt"]

    def reference(self, item: Item) -> str:
        return item.data["answer"]

    def items(self, split: str) -> list[Item]:
        if split not in SPLITS:
            raise HonedError(
                f"environment '{self.name}' has no split '{split}'; valid splits: "
                + ", ".join(SPLITS)
            )
        if self._splits is None:
            self._splits = self._build_splits()
        return list(self._splits[split])

    def _build_splits(self) -> dict[str, list[Item]]:
        wanted = sum(self.sizes.values())
        capacities = [self.space_size(level) for level in self.levels]
        per_level = share_evenly(wanted, capacities)
        available = sum(per_level)
        split_totals = dict(
            zip(SPLITS, apportion(available, list(self.sizes.values())), strict=True)
        )
        # Held-out splits are carved first, each in proportion to what every level has left,
        # so no level is overdrawn; train takes the rest of every level.
        left = list(per_level)
        counts: dict[str, list[int]] = {}
        for split in ("test", "validation"):
            counts[split] = apportion(split_totals[split], left)
            left = [a - b for a, b in zip(left, counts[split], strict=True)]
        counts["train"] = left

        splits: dict[str, list[Item]] = {split: [] for split in SPLITS}
        for i, level in enumerate(self.levels):
            problems = self._draw(level, per_level[i])
            start = 0
            for split in ("test", "validation", "train"):
                stop = start + counts[split][i]
                splits[split].extend(self._item(level, p) for p in problems[start:stop])
                start = stop
        for split, items in splits.items():
            random.Random(derive_seed("honed.tasks.order", self.name, self.seed, split)).shuffle(
                items
            )
        return splits

    def _draw(self, level: int, count: int) -> list[Problem]:
        """`count` distinct problems of a level, in an order fixed by seed and name."""
        rng = random.Random(derive_seed("honed.tasks.draw", self.name, self.seed, level))
        size = self.space_size(level)
        if size <= _SHUFFLE_LIMIT_FACTOR * count:
            indices = list(range(size))
            rng.shuffle(indices)
            indices = indices[:count]
        else:
            chosen: dict[int, None] = {}
            while len(chosen) < count:
                chosen[rng.randrange(size)] = None
            indices = list(chosen)
        return [self.problem_at(level, index) for index in indices]

    def _item(self, level: int, problem: Problem) -> Item:
        data = {"prompt": problem.prompt, "answer": problem.answer, **problem.data}
        return Item(key=f"{self.name}:{problem.ident}", env=self.name, data=data, level=level)

    # Argument checks -----------------------------------------------------------------------

    def _fail(self, message: str) -> HonedError:
        return HonedError(f"environment '{self.name}' ({type(self).__name__}): {message}")

    def _check_levels(self, levels: Sequence[int] | None) -> list[int]:
        if levels is None:
            return list(self.default_levels)
        valid = f"integers from {self.min_level} to {self.max_level}"
        if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence) or not levels:
            raise self._fail(f"levels must be a non-empty list of {valid}, got {levels!r}")
        for level in levels:
            if isinstance(level, bool) or not isinstance(level, int):
                raise self._fail(f"levels must be {valid}, got {level!r}")
            if not self.min_level <= level <= self.max_level:
                raise self._fail(f"level {level} is out of range; levels must be {valid}")
        if len(set(levels)) != len(levels):
            raise self._fail(f"levels must not repeat, got {list(levels)}")
        return list(levels)

    def _check_size(self, arg: str, value: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(f"{arg} must be an integer >= 0, got {value!r}")
        return value

    def _check_fraction(self, arg: str, value: float) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0.0 <= value <= 1.0
        ):
            raise self._fail(f"{arg} must be a number between 0 and 1, got {value!r}")
        return float(value)


def char_score(completion: str, answer: str, alphabet: str, partial_credit: float) -> Score:
    """Score a string answer: exact match, plus optional position-wise partial credit.

    Components decompose the reward linearly, `reward = exact + partial_credit * partial`, so a
    weighted-sum reward pipeline can rebuild it; `format` (only allowed characters, non-empty) is
    for diagnosis and is not part of the reward. Dividing matches by the longer length keeps a
    long run of guesses from earning credit.
    """
    text = completion.strip()
    exact = float(text == answer)
    fmt = float(bool(text) and all(c in alphabet for c in text))
    partial = 0.0
    if not exact:
        matches = sum(a == b for a, b in zip(text, answer, strict=False))
        partial = matches / max(len(text), len(answer))
    return Score(
        reward=exact + partial_credit * partial,
        success=exact,
        components={"exact": exact, "partial": partial, "format": fmt},
    )
