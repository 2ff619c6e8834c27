"""The user's own task: a JSONL file of prompts plus any columns, and reward functions.

A reward function has the TRL signature, so one written for `GRPOTrainer` works here as is:

    def exact(completions, answer, **kwargs) -> list[float]: ...

It is called with `prompts`, `completions` (raw text, not stripped), `completion_ids` and every
other column of the file as a keyword argument holding a list aligned with the completions (rows
without a column give `None`). A function without `**kwargs` gets only the arguments it names.
Several functions with `reward_weights`, `async def` ones and the built-in `llm_judge` and
`reward_model` are `honed.envs.rewards`.
The prompt column holds text or a list of chat messages (system, user, few-shot turns; rendered
by the tokenizer's chat template, so `policy.chat_template: true`); as in TRL, a chat prompt's
completion is passed as `[{"role": "assistant", "content": text}]`.

Splits are disjoint: explicit `test_path` / `validation_path` files, or else a carve-out of the
main file by a hash of each prompt, so a prompt always lands in the same split whatever the line
order or the seed. A prompt that appears several times is kept every time, under keys
`<name>:<hash>`, `<name>:<hash>#2`, ... (all copies fall in the same split).

`JsonlEnv` holds the file reading and splitting, which the question-answering environment
(`honed.envs.qa`) shares.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from honed.envs.base import SingleTurnEnv
from honed.envs.rewards import Rewarded, RewardSet
from honed.errors import HonedError, finite_number
from honed.types import SPLITS, Group, Item, Prompt, Score, message_problem, prompt_text

log = logging.getLogger(__name__)

# Keyword arguments honed itself passes to the reward function; no column may take these names.
RESERVED = ("prompts", "completions", "completion_ids")


def prompt_hash(prompt: Prompt) -> str:
    return hashlib.sha1(prompt_text(prompt).encode()).hexdigest()


def read_jsonl(
    path: str | Path,
    prompt_field: str,
    check_row: Callable[[dict[str, Any]], str | None] | None = None,
) -> list[dict[str, Any]]:
    """The rows of a JSONL file; blank lines are skipped, anything else malformed is an error
    naming the file and the 1-based line number.

    `check_row` lets an environment add its own per-row rules (the QA environment's answers): it
    returns a problem description, or `None` for a good row, and the problem is reported with
    the line number like every other.
    """
    path = Path(path)
    if not path.is_file():
        raise HonedError(f"dataset file not found: {path}")
    rows = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # BOM-tolerant
            except UnicodeDecodeError as exc:
                raise HonedError(f"{where}: not UTF-8 text ({exc})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise HonedError(f"{where}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise HonedError(f"{where}: expected a JSON object, got {type(row).__name__}")
            if prompt_field not in row:
                raise HonedError(
                    f"{where}: missing the prompt field '{prompt_field}' "
                    f"(fields: {', '.join(row) or 'none'})"
                )
            problem = message_problem(row[prompt_field])
            if problem:
                raise HonedError(f"{where}: the prompt field '{prompt_field}': {problem}")
            problem = check_row(row) if check_row is not None else None
            if problem:
                raise HonedError(f"{where}: {problem}")
            rows.append(row)
    if not rows:
        raise HonedError(f"dataset file {path} has no rows")
    return rows


class JsonlData:
    """What every environment over JSONL files shares: reading the files (errors with line
    numbers), disjoint splits by prompt hash, items keyed by `<name>:<hash>`, argument checks.

    Subclasses call `_load` from their constructor and add prompts and scoring; single-turn
    ones through `JsonlEnv`, multi-turn ones (`honed.envs.tools`) directly.
    """

    type_name: ClassVar[str] = "jsonl"  # as errors name it: "environment 'x' (dataset): ..."

    def __init__(self, name: str, seed: int, prompt_field: str) -> None:
        self.name = name
        if not isinstance(prompt_field, str):
            raise self._fail(f"prompt_field must be a string, got {prompt_field!r}")
        self.seed = seed
        self.prompt_field = prompt_field

    def _load(
        self,
        path: str,
        test_path: str | None,
        validation_path: str | None,
        test_fraction: float,
        validation_fraction: float,
        check_row: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Read the files, assign the splits, and return every row read (in file order)."""
        test_fraction = self._check_fraction("test_fraction", test_fraction)
        validation_fraction = self._check_fraction("validation_fraction", validation_fraction)
        files = {"train": path, "test": test_path, "validation": validation_path}
        carved: dict[str, float] = {}  # held-out splits cut from the main file, in this order
        if test_path is None:
            carved["test"] = test_fraction
        if validation_path is None:
            carved["validation"] = validation_fraction
        if sum(carved.values()) > 1.0:
            raise self._fail(
                f"test_fraction + validation_fraction must be at most 1, got {sum(carved.values())}"
            )
        rows = {
            s: read_jsonl(f, self.prompt_field, check_row)
            for s, f in files.items()
            if f is not None
        }
        self._splits = self._assign(rows, carved)
        return [r for split_rows in rows.values() for r in split_rows]

    def _assign(
        self, rows: dict[str, list[dict[str, Any]]], carved: dict[str, float]
    ) -> dict[str, list[Item]]:
        """Items per split: carve held-out splits from the main file by prompt hash, and drop
        from a lower split any prompt that a higher one (test > validation > train) holds."""
        by_split: dict[str, list[dict[str, Any]]] = {s: list(rows.get(s, [])) for s in SPLITS}
        train = by_split["train"]
        by_split["train"] = []
        for row in train:
            position = int(prompt_hash(row[self.prompt_field])[:15], 16) / 16**15
            split = "train"
            low = 0.0
            for held_out, fraction in carved.items():
                if low <= position < low + fraction:
                    split = held_out
                    break
                low += fraction
            by_split[split].append(row)

        taken: set[str] = set()
        items: dict[str, list[Item]] = {}
        occurrences: dict[str, int] = {}
        for split in ("test", "validation", "train"):
            kept = [r for r in by_split[split] if prompt_text(r[self.prompt_field]) not in taken]
            if len(kept) < len(by_split[split]):
                log.warning(
                    "environment '%s': dropped %d %s rows whose prompt is also in a held-out split",
                    self.name,
                    len(by_split[split]) - len(kept),
                    split,
                )
            taken.update(prompt_text(r[self.prompt_field]) for r in kept)
            items[split] = []
            for row in kept:
                digest = prompt_hash(row[self.prompt_field])[:12]
                occurrences[digest] = occurrences.get(digest, 0) + 1
                suffix = "" if occurrences[digest] == 1 else f"#{occurrences[digest]}"
                items[split].append(
                    Item(key=f"{self.name}:{digest}{suffix}", env=self.name, data=row)
                )
        return items

    def _score_columns(
        self,
        rows: list[dict[str, Any]],
        reserved: Sequence[str],
        reference_field: str | None,
        reward: Any,
        reward_weights: Any,
        reward_timeout: float | None,
    ) -> None:
        """Set what every JSONL environment scores with: the data's columns (each passed to the
        reward functions by name; none may take a `reserved` name), the column holding the
        reference (checked to be one of them) and the reward functions."""
        self.columns = data_columns(rows, self.prompt_field, reserved, self._fail)
        if reference_field is not None and reference_field not in self.columns:
            raise self._fail(
                f"reference_field '{reference_field}' is not a column of the data "
                f"(columns: {', '.join(self.columns) or 'none'})"
            )
        self.reference_field = reference_field
        self.rewards = RewardSet(
            self.where,
            reward,
            reward_weights,
            reward_timeout,
            passed=(*reserved, *self.columns),
            columns=self.columns,
        )

    def reward_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """The step's reward-function timeouts and unreadable verdicts (`reward_problems`)."""
        return reward_problems(self.name, self.rewards.names, groups)

    def items(self, split: str) -> list[Item]:
        if split not in self._splits:
            raise HonedError(
                f"environment '{self.name}' has no split '{split}'; valid splits: "
                + ", ".join(SPLITS)
            )
        return list(self._splits[split])

    def prompt(self, item: Item) -> Prompt:
        return item.data[self.prompt_field]

    # Argument checks -----------------------------------------------------------------------

    @property
    def where(self) -> str:
        """How messages name this environment: `environment 'x' (dataset)`."""
        return f"environment '{self.name}' ({self.type_name})"

    def _fail(self, message: str) -> HonedError:
        return HonedError(f"{self.where}: {message}")

    def _check_fraction(self, arg: str, value: float) -> float:
        value = finite_number(self.where, arg, value)
        if not 0.0 <= value <= 1.0:
            raise self._fail(f"{arg} must be between 0 and 1, got {value!r}")
        return value


class JsonlEnv(JsonlData, SingleTurnEnv):
    """A single-turn environment over JSONL files (`dataset`, `qa`)."""


class DatasetEnv(JsonlEnv):
    """Prompts from a JSONL file, scored by the user's reward functions (`module:function` or
    `path/to/file.py:function`, one or several with `reward_weights`, or built-ins:
    `honed.envs.rewards`).

    `success` is `reward >= success_threshold` (the weighted sum). `seed` is accepted for the
    common constructor but nothing depends on it: splits come from prompt hashes and items keep
    file order.
    """

    type_name = "dataset"

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        path: str,
        reward: Any,
        reward_weights: Any = None,
        reward_timeout: float | None = 60.0,
        prompt_field: str = "prompt",
        reference_field: str | None = None,
        test_path: str | None = None,
        validation_path: str | None = None,
        test_fraction: float = 0.1,
        validation_fraction: float = 0.0,
        success_threshold: float = 1.0,
    ) -> None:
        super().__init__(name, seed, prompt_field)
        self.success_threshold = finite_number(self.where, "success_threshold", success_threshold)
        rows = self._load(path, test_path, validation_path, test_fraction, validation_fraction)
        self.reward_spec = reward
        self._score_columns(rows, RESERVED, reference_field, reward, reward_weights, reward_timeout)

    def reference(self, item: Item) -> str | None:
        if self.reference_field is None:
            return None
        value = item.data.get(self.reference_field)
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value)

    def score_batch(
        self,
        items: Sequence[Item],
        completions: Sequence[str],
        completion_ids: Sequence[Sequence[int]] | None = None,
    ) -> list[Score]:
        if not items:
            return []
        prompts = [self.prompt(item) for item in items]
        kwargs: dict[str, Any] = {
            "prompts": prompts,
            # as TRL passes them: a chat prompt's completion is the assistant's message
            "completions": [
                [{"role": "assistant", "content": c}] if isinstance(p, list) else c
                for p, c in zip(prompts, completions, strict=True)
            ],
            "completion_ids": None if completion_ids is None else [list(c) for c in completion_ids],
        }
        for column in self.columns:
            kwargs[column] = [item.data.get(column) for item in items]
        return scores_of(self.rewards(items, kwargs), self.success_threshold)

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        return self.reward_metrics(groups)


def data_columns(
    rows: list[dict[str, Any]],
    prompt_field: str,
    reserved: Sequence[str],
    fail: Callable[[str], HonedError],
) -> list[str]:
    """Every field but the prompt, in order of first appearance; none may take a name honed
    passes to the reward functions itself."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update((k, None) for k in row if k != prompt_field)
    for column in columns:
        if column in reserved:
            raise fail(
                f"column '{column}' clashes with an argument honed passes to the reward "
                f"function ({', '.join(reserved)}); rename it in the data"
            )
    return list(columns)


def scores_of(rewarded: Rewarded, success_threshold: float) -> list[Score]:
    """Scores from a batch's rewards: success is the weighted reward reaching the threshold;
    the functions' timeouts and unreadable verdicts go into the trajectory's info."""
    return [
        Score(
            reward=r,
            success=float(r >= success_threshold),
            components=components,
            info={"reward_problems": problems} if problems else {},
        )
        for r, components, problems in zip(
            rewarded.rewards, rewarded.components, rewarded.problems, strict=True
        )
    ]


def reward_problems(env: str, names: Sequence[str], groups: Sequence[Group]) -> dict[str, float]:
    """`reward/<env>/<function>/timeouts` and `.../errors`: completions of the step whose
    function timed out, or whose verdict could not be read (a stand-in score was used)."""
    counts = {f"reward/{env}/{n}/{kind}s": 0.0 for n in names for kind in ("timeout", "error")}
    for group in groups:
        for trajectory in group.trajectories:
            for name, kind in trajectory.info.get("reward_problems", {}).items():
                counts[f"reward/{env}/{name}/{kind}s"] += 1.0
    return counts
