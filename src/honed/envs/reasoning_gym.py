"""reasoning-gym's procedural tasks as a honed environment (`type: reasoning_gym`).

reasoning-gym (`pip install 'honed[reasoning-gym]'`) generates question/answer items for about a
hundred tasks (arithmetic, algebra, logic, games, ...), each with a config of difficulty
settings and a scorer of its own. This environment runs them unchanged: items come from
reasoning-gym's generators (`create_dataset`, and its `CompositeDataset` over `DatasetSpec`s,
which picks a task per item by weight, when several tasks are named), and every reply is scored
by the item's own task (`score_answer`), partial credit included; success is a score of 1.

What honed adds is what training needs around them:

- **Splits that never leak.** Train, validation and test are generated from three seeds derived
  from the environment's seed, and then made disjoint by question: at easy settings a generator
  repeats itself (two-term sums of one-digit numbers have a few hundred questions), so a
  question already in test is dropped from validation and train, one in validation from train,
  and a repeat within a split is dropped too; replacements are drawn until the split is full or
  the draws run out (the settings have fewer questions than asked), and both are logged.
- **Stable, unique keys**, `<env>:<task>:<hash of the question>`, so the same question has the
  same key in every run and process, and the curriculum tracks it by that key.
- **Difficulty kept on the item.** `data["difficulty"]` is the task's own difficulty metadata
  (the ranges of its config that reasoning-gym's curricula move, e.g. `{"num_terms": [2, 2],
  "num_digits": [1, 2]}`), and `difficulty_key(item)` turns task and difficulty into one string:
  items that never repeat (a generated task at hard settings) can have their outcomes tracked by
  it instead of by item.
- **Answer extraction before scoring** (`answer_format`): `tags` (the text between the last
  `<answer>` and `</answer>`, by reasoning-gym's own `extract_answer`, as its system prompts
  ask), `last_number`, `last_line` or `raw` (`honed.envs.answers`). On a small chat model the
  format decides everything: SmolLM2-135M-Instruct wraps its answer in a sentence, which the
  task scorers give no credit.
- **Per-task metrics**: `reward/<env>/<task>/mean`, `success/<env>/<task>/mean` and, when groups
  have several completions, `reward/<env>/<task>/groups_with_spread` (the share of groups whose
  rewards differ, the ones GRPO learns from).

A scorer that raises on a reply (some parse the answer, and a model writes anything) scores it 0;
the error is logged once per task, kept in the trajectory's `info["score_error"]`, and counted
in `reward/<env>/score_errors`. A scorer that returns anything but a number in [0, 1] stops the
run: that is a fault of the task, not of the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import numbers
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from honed.envs import answers
from honed.envs.base import SingleTurnEnv
from honed.errors import HonedError, did_you_mean
from honed.types import SPLITS, Group, Item, Prompt, Score, derive_seed

log = logging.getLogger(__name__)

INSTALL = "pip install 'honed[reasoning-gym]'"
ANSWER_FORMATS = ("tags", "last_number", "last_line", "raw")
_EXTRACTORS: dict[str, Callable[[str], str | None]] = {
    "last_number": answers.last_number,
    "last_line": answers.last_line,
    "raw": answers.raw,
}
_TASK_KEYS = ("name", "config", "weight")
# A task's config may not set what the environment sets for every split.
_SET_BY_ENV = ("seed", "size")
# Draws allowed per split, beyond which a split stays short: enough to fill it when a few
# questions repeat, bounded when the settings have fewer questions than asked.
_DRAWS_PER_ITEM = 3
_EXTRA_DRAWS = 100
# Built first, so that held-out questions are never lost to the train split.
_BUILD_ORDER = ("test", "validation", "train")


def import_reasoning_gym() -> ModuleType:
    """The reasoning_gym package, or a one-line error saying how to install it."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise HonedError(
            f"the reasoning_gym environment needs the reasoning-gym package: {INSTALL}"
        ) from exc
    return reasoning_gym


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task of the environment: a reasoning-gym dataset name, its config and its weight."""

    name: str
    config: dict[str, Any]
    weight: float


class ReasoningGymEnv(SingleTurnEnv):
    """reasoning-gym tasks, single-turn (see the module docstring).

    `tasks` lists the tasks: `{name, config, weight}` (config and weight optional, weight 1 by
    default) or just a name. `size` is the train split's size, `validation_size` and
    `test_size` the held-out ones'. `system_prompt` is one of reasoning-gym's system prompts by
    name (`default`, `direct`, `simple`, `DeepSeekZero`, `chain_of_draft`), a text of your own,
    or null for none. The defaults, the `default` system prompt with `tags`, are how
    reasoning-gym prompts its tasks; a small chat model that answers in a sentence does better
    read by `last_number` (see the README). `data_seed` fixes the items whatever the run's seed
    (by default they follow it, as every environment's do).
    """

    def __init__(
        self,
        name: str,
        seed: int = 0,
        *,
        tasks: Sequence[str | Mapping[str, Any]],
        size: int = 1000,
        validation_size: int = 200,
        test_size: int = 200,
        system_prompt: str | None = "default",
        answer_format: str = "tags",
        data_seed: int | None = None,
    ) -> None:
        super().__init__(name)
        rg = import_reasoning_gym()
        self.tasks = self._check_tasks(tasks, rg)
        self.sizes = {
            "train": self._check_count("size", size),
            "validation": self._check_count("validation_size", validation_size),
            "test": self._check_count("test_size", test_size),
        }
        if answer_format not in ANSWER_FORMATS:
            raise self._fail(
                f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got "
                f"{answer_format!r}{did_you_mean(str(answer_format), ANSWER_FORMATS)}"
            )
        self.answer_format = answer_format
        self._extract = _EXTRACTORS.get(answer_format) or self._tagged_answer
        self._extract_tagged = rg.utils.extract_answer
        self.system_prompt = self._check_system_prompt(system_prompt, rg.utils.SYSTEM_PROMPTS)
        if answer_format == "tags" and "<answer>" not in (self.system_prompt or ""):
            log.warning(
                "environment '%s': answer_format is tags but no system prompt asks for "
                "<answer> tags, so replies without them score 0; set system_prompt (e.g. "
                "default or direct) or another answer_format",
                self.name,
            )
        if data_seed is not None and (
            isinstance(data_seed, bool) or not isinstance(data_seed, int)
        ):
            raise self._fail(f"data_seed must be an integer or null, got {data_seed!r}")
        self.seed = seed if data_seed is None else data_seed
        # One dataset per split, built now so that a config the task rejects is reported
        # before anything runs; items are generated when a split is first asked for.
        self._datasets = {split: self._dataset(rg, split) for split in SPLITS}
        self._splits: dict[str, list[Item]] = {}
        self._taken: set[str] = set()
        self._warned_tasks: set[str] = set()

    # The environment -----------------------------------------------------------------------

    def items(self, split: str) -> list[Item]:
        if split not in SPLITS:
            raise self._fail(f"has no split '{split}'; valid splits: {', '.join(SPLITS)}")
        for earlier in _BUILD_ORDER[: _BUILD_ORDER.index(split) + 1]:
            if earlier not in self._splits:
                self._splits[earlier] = self._generate(earlier)
        return list(self._splits[split])

    def prompt(self, item: Item) -> Prompt:
        """The question as text, or as chat messages after the system prompt when there is one."""
        question = item.data["entry"]["question"]
        if self.system_prompt is None:
            return question
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": question},
        ]

    def reference(self, item: Item) -> str | None:
        """The gold answer, in the form `answer_format` reads (inside `<answer>` tags for
        `tags`); none for a task whose items have no single gold answer."""
        answer = item.data["entry"].get("answer")
        if not isinstance(answer, str):
            return None
        return f"<answer>{answer}</answer>" if self.answer_format == "tags" else answer

    def item_kind(self, item: Item) -> str:
        """The item's task: the skill loop reports its scores per task."""
        return item.data["task"]

    def difficulty_key(self, item: Item) -> str:
        """The item's task and difficulty settings as one string, the same for every item
        generated with the same settings (`chain_sum:{"num_digits":[1,2],"num_terms":[2,2]}`)."""
        return item.data["difficulty_key"]

    def extract(self, reply: str) -> str | None:
        """The part of a reply the task scores, by `answer_format`; `None` when there is none."""
        return self._extract(reply)

    def score_batch(self, items: Sequence[Item], completions: Sequence[str]) -> list[Score]:
        return [self._score(item, reply) for item, reply in zip(items, completions, strict=True)]

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]:
        """Reward and success per task, the share of groups with spread per task (with more
        than one completion per group), and the count of replies a scorer failed on."""
        by_task: dict[str, list[Group]] = defaultdict(list)
        for group in groups:
            by_task[_task_of_key(group.item_key)].append(group)
        out: dict[str, float] = {}
        for task, task_groups in sorted(by_task.items()):
            trajectories = [t for g in task_groups for t in g.trajectories]
            out[f"reward/{self.name}/{task}/mean"] = _mean([t.reward for t in trajectories])
            out[f"success/{self.name}/{task}/mean"] = _mean([t.success for t in trajectories])
            if any(len(g.trajectories) > 1 for g in task_groups):
                spread = [len({t.reward for t in g.trajectories}) > 1 for g in task_groups]
                out[f"reward/{self.name}/{task}/groups_with_spread"] = _mean(spread)
        out[f"reward/{self.name}/score_errors"] = float(
            sum("score_error" in t.info for g in groups for t in g.trajectories)
        )
        return out

    # Items ---------------------------------------------------------------------------------

    def _dataset(self, rg: ModuleType, split: str) -> Any:
        """The split's reasoning-gym composite of the tasks, seeded for the split alone.

        Its virtual size is the most items the split may draw; items are generated by index, so
        nothing is generated here. The seeds are far apart because reasoning-gym seeds item i
        with `seed + i`: neighbouring seeds would give the splits the same items, shifted.
        """
        wanted = self.sizes[split]
        specs = [rg.composite.DatasetSpec(t.name, t.weight, dict(t.config)) for t in self.tasks]
        try:
            return rg.create_dataset(
                "composite",
                seed=derive_seed("honed.reasoning_gym", self.seed, split) % 2**31,
                size=max(1, _DRAWS_PER_ITEM * wanted + _EXTRA_DRAWS),
                datasets=specs,
            )
        except (AssertionError, ValueError, TypeError, KeyError) as exc:
            raise self._fail(f"reasoning-gym rejected the tasks' configs: {_reason(exc)}") from exc

    def _generate(self, split: str) -> list[Item]:
        """`sizes[split]` items with questions in no split built before and no repeats."""
        dataset = self._datasets[split]
        wanted = self.sizes[split]
        items: list[Item] = []
        held_out = repeats = draws = 0
        seen_here: set[str] = set()
        while len(items) < wanted and draws < len(dataset):
            entry = self._entry(dataset, draws, split)
            draws += 1
            question = entry["question"]
            if question in seen_here:
                repeats += 1
                continue
            seen_here.add(question)
            if question in self._taken:
                held_out += 1
                continue
            items.append(self._item(entry))
        self._taken |= seen_here
        if held_out or repeats:
            # Replacements come from any task by weight, so a task with few questions ends
            # up with less than its weight's share: the counts say how much.
            dropped = [f"{held_out} questions already in a held-out split"] if held_out else []
            dropped += [f"{repeats} repeats"] if repeats else []
            counts = Counter(item.data["task"] for item in items)
            log.warning(
                "environment '%s': the %s split dropped %s, drawing others instead; it holds %s",
                self.name,
                split,
                " and ".join(dropped),
                ", ".join(f"{task} {counts[task]}" for task in self._task_names()),
            )
        if len(items) < wanted:
            log.warning(
                "environment '%s': the %s split has %d distinct questions of the %d asked after "
                "%d draws; these task settings have few questions: ask for fewer or make them "
                "harder",
                self.name,
                split,
                len(items),
                wanted,
                draws,
            )
        return items

    def _entry(self, dataset: Any, index: int, split: str) -> dict[str, Any]:
        try:
            entry = dataset[index]
        except Exception as exc:  # a generator's own failure, reported with where it happened
            raise self._fail(
                f"reasoning-gym failed to generate item {index} of the {split} split: "
                f"{_reason(exc)}"
            ) from exc
        task = entry.get("metadata", {}).get("source_dataset")
        if not isinstance(entry.get("question"), str) or task not in self._task_names():
            raise self._fail(
                f"reasoning-gym item {index} of the {split} split has no question text or an "
                f"unknown source_dataset ({task!r})"
            )
        return entry

    def _item(self, entry: dict[str, Any]) -> Item:
        task = entry["metadata"]["source_dataset"]
        difficulty = _plain(entry["metadata"].get("difficulty"))
        digest = hashlib.sha1(entry["question"].encode()).hexdigest()[:12]
        canonical = json.dumps(difficulty, sort_keys=True, separators=(",", ":"))
        return Item(
            key=f"{self.name}:{task}:{digest}",
            env=self.name,
            data={
                "entry": entry,
                "task": task,
                "difficulty": difficulty,
                "difficulty_key": f"{task}:{canonical}",
            },
        )

    # Scoring -------------------------------------------------------------------------------

    def _tagged_answer(self, reply: str) -> str | None:
        return self._extract_tagged(reply) or None

    def _score(self, item: Item, reply: str) -> Score:
        answer = self._extract(reply)
        task = item.data["task"]
        info: dict[str, Any] = {"task": task, "answer": answer}
        try:
            value = self._datasets["train"].score_answer(answer, item.data["entry"])
        except Exception as exc:  # the task's scorer choked on what the model wrote
            info["score_error"] = _reason(exc)
            if task not in self._warned_tasks:
                self._warned_tasks.add(task)
                log.warning(
                    "environment '%s': task %s's scorer failed on a reply (%s); such replies "
                    "score 0 and are counted in reward/%s/score_errors",
                    self.name,
                    task,
                    info["score_error"],
                    self.name,
                )
            value = 0.0
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or not 0.0 <= value <= 1.0
        ):
            raise self._fail(
                f"task {task}'s scorer returned {value!r} for item {item.key}; scores must be "
                "numbers in [0, 1]"
            )
        value = float(value)
        return Score(
            reward=value,
            success=float(value >= 1.0),
            components={"format": float(answer is not None)},
            info=info,
        )

    # Argument checks -----------------------------------------------------------------------

    def _fail(self, message: str) -> HonedError:
        return HonedError(f"environment '{self.name}' (reasoning_gym): {message}")

    def _task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def _check_tasks(self, tasks: object, rg: ModuleType) -> list[TaskSpec]:
        if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Sequence) or not tasks:
            raise self._fail(
                "tasks must be a non-empty list of task names or {name, config, weight} "
                f"entries, got {tasks!r}"
            )
        registered = {n: c for n, (_, c) in rg.factory.DATASETS.items() if n != "composite"}
        specs = [self._check_task(i, entry, registered) for i, entry in enumerate(tasks)]
        names = [s.name for s in specs]
        for task in names:
            if names.count(task) > 1:
                raise self._fail(
                    f"task {task} is named twice; reasoning-gym's composite takes each task "
                    "once: for two settings of one task, use two environments with weights"
                )
        return specs

    def _check_task(self, i: int, entry: object, registered: dict[str, type]) -> TaskSpec:
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, Mapping):
            raise self._fail(f"tasks[{i}] must be a task name or a mapping, got {entry!r}")
        for key in entry:
            if key not in _TASK_KEYS:
                raise self._fail(
                    f"tasks[{i}] has an unknown key '{key}'{did_you_mean(str(key), _TASK_KEYS)}; "
                    f"a task takes {', '.join(_TASK_KEYS)}"
                )
        task = entry.get("name")
        if task not in registered:
            raise self._fail(
                f"tasks[{i}]: unknown reasoning-gym task {task!r}"
                f"{did_you_mean(str(task), registered)}; reasoning-gym has {len(registered)} "
                '(python -c "import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))")'
            )
        config = entry.get("config") or {}
        if not isinstance(config, Mapping):
            raise self._fail(f"task {task}: config must be a mapping, got {config!r}")
        accepted = [
            f.name for f in dataclasses.fields(registered[task]) if f.name not in _SET_BY_ENV
        ]
        for key in config:
            if key in _SET_BY_ENV:
                raise self._fail(
                    f"task {task}: config key '{key}' is set by the environment (from its seed "
                    "and split sizes) and cannot be given"
                )
            if key not in accepted:
                raise self._fail(
                    f"task {task}: unknown config key '{key}'{did_you_mean(str(key), accepted)}; "
                    f"{task} accepts {', '.join(accepted)}"
                )
        weight = entry.get("weight", 1.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, numbers.Real)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise self._fail(f"task {task}: weight must be a number > 0, got {weight!r}")
        return TaskSpec(task, dict(config), float(weight))

    def _check_count(self, arg: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(f"{arg} must be an integer >= 0, got {value!r}")
        return value

    def _check_system_prompt(self, value: object, named: Mapping[str, str]) -> str | None:
        """A reasoning-gym system prompt by name, a text of the user's own, or none. A single
        word that is no name is taken for a misspelt name rather than sent as a prompt."""
        if value is None or value in named:
            return None if value is None else named[value]
        if not isinstance(value, str) or not value.strip():
            raise self._fail(f"system_prompt must be a name, a text or null, got {value!r}")
        if len(value.split()) == 1:
            raise self._fail(
                f"unknown system prompt {value!r}{did_you_mean(value, named)}; reasoning-gym's "
                f"are {', '.join(named)} (or give a text of several words)"
            )
        return value


def _task_of_key(key: str) -> str:
    """The task in an item key, `<env>:<task>:<hash>` (an environment name may hold ':')."""
    return key.rsplit(":", 2)[-2]


def _plain(value: Any) -> Any:
    """Difficulty metadata as JSON values: tuples become lists, anything else unknown text."""
    return json.loads(json.dumps(value, default=str))


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
