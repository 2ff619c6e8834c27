"""The environment protocol and the single-turn helper.

An environment owns its items (with disjoint splits), drives the policy through a `Generator`,
and scores what comes back. It never sees the trainer: the same environment serves the GRPO
loop, evaluation, supervised warm-start and the skill loop.

Rollouts take a batch of items at once so that a single-turn environment can put every
completion of a step into one batched generation call, and a multi-turn one can advance all its
rollouts a turn at a time.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from honed.types import (  # Sample is re-exported: it lived here before
    Group,
    Item,
    Message,
    Prompt,
    Sample,
    Score,
    Trajectory,
    derive_seed,
    prompt_text,
)


@runtime_checkable
class Generator(Protocol):
    """What an environment may ask of the policy: encode a prompt, sample completions.

    Sampling settings (temperature, top-p, maximum length) belong to the generator, not to the
    environment, so evaluation can reuse an environment with greedy decoding. `seeds` holds one
    seed per prompt: the same (prompt, seed) gives the same completion in any batch or process.
    """

    def encode(self, prompt: Prompt) -> list[int]: ...

    def generate(
        self, prompts: Sequence[Prompt | list[int]], seeds: Sequence[int]
    ) -> list[Sample]: ...


@runtime_checkable
class Environment(Protocol):
    """A source of items that can roll out a policy on them and score the result."""

    name: str

    def items(self, split: str) -> Sequence[Item]:
        """The items of a split (`train`, `validation`, `test`); splits are disjoint."""
        ...

    def rollout(
        self, items: Sequence[Item], generator: Generator, num_generations: int, seed: int
    ) -> list[Group]:
        """One group of `num_generations` trajectories per item, in the order of `items`.

        Optionally a keyword `first_generation: int = 0`: the trajectories are then generations
        `first_generation`, ... of each item's group, each seeded as it would be in the whole
        group (`rollout_seed(seed, item.key, generation)`). Screening (`trainer.screening`)
        asks for the rest of a group this way, so that it is the unscreened group; the
        environments honed ships take it."""
        ...

    def sft_examples(self, item: Item) -> list[tuple[Prompt, str]]:
        """(prompt, target completion) pairs from the reference solution, for warm-start."""
        ...


@dataclass
class Table:
    """An environment's own evaluation report: one row per policy or baseline.

    Cells are numbers, text, or `None` where a column does not apply to a row.
    """

    title: str
    columns: list[str]
    rows: list[list[Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "rows": [dict(zip(self.columns, row, strict=True)) for row in self.rows],
        }


@runtime_checkable
class StepMetrics(Protocol):
    """An environment with metrics of its own for each step's groups (optional): the trainer
    logs them with the step and `honed eval` reports them (turns and tool calls per episode,
    reward functions' timeouts, ...). Keys are full metric names."""

    def step_metrics(self, groups: Sequence[Group]) -> dict[str, float]: ...


@runtime_checkable
class TokenReferences(Protocol):
    """An environment whose reference solutions are token sequences with a loss mask (optional;
    multi-turn ones: the model's turns are trained on, tool results are not). Warm-start uses
    `sft_sequences` instead of `sft_examples` when an environment has it; `policy` gives the
    tokenizer and chat template."""

    def sft_sequences(
        self, item: Item, policy: Any
    ) -> list[tuple[list[int], list[int], list[int]]]: ...


@runtime_checkable
class Reporting(Protocol):
    """An environment whose evaluation says more than one accuracy (optional).

    `honed eval` calls `report` with the run's policies by label (the warm-started and the
    trained one) so the environment can set them beside its own baselines on the same items.
    """

    def report(
        self, agents: Mapping[str, Generator], split: str, num_items: int | None, seed: int
    ) -> Table: ...


@dataclass
class ChatEpisode:
    """One episode a chat model served elsewhere plays in a `ChatEpisodes` environment: the
    tools its requests offer (OpenAI schemas) and the environment's own record of it."""

    tools: list[dict[str, Any]]
    handle: Any


@runtime_checkable
class ChatEpisodes(Protocol):
    """An environment whose episodes a served chat model plays turn by turn through the
    server's native tool calling (optional; the skill loop's target, beside `tools`
    environments, which it drives with their toolbox).

    `open_chats` starts one episode per item; `advance_chats` takes each episode's reply (the
    assistant message as the conversation records it, and whether it was cut at `max_tokens`)
    and returns the messages the conversation goes on with, or `None` once the episode is over;
    `score_conversations` scores conversations after the prompt (one just played, or one read
    back from a cache); `reference_turns` is the expected answer the reflector is shown;
    `max_turns` bounds the replies of an episode.
    """

    max_turns: int

    def open_chats(self, items: Sequence[Item]) -> list[ChatEpisode]: ...

    def advance_chats(
        self,
        chats: Sequence[ChatEpisode],
        messages: Sequence[Message],
        truncated: Sequence[bool],
    ) -> list[list[Message] | None]: ...

    def score_conversations(
        self,
        items: Sequence[Item],
        conversations: Sequence[Sequence[Message]],
        truncated: Sequence[bool] | None = None,
    ) -> list[Trajectory]: ...

    def reference_turns(self, item: Item) -> list[Message] | None: ...


def rollout_seed(seed: int, item_key: str, generation: int) -> int:
    """The seed of one rollout: the same wherever and in whatever batch it is generated."""
    return derive_seed(seed, item_key, generation)


class SingleTurnEnv(abc.ABC):
    """An environment where one prompt gets one completion and a score.

    Subclasses give `items`, `prompt`, `score` (or `score_batch`, for scorers that work on
    lists, like TRL-style reward functions) and `reference`. The skill loop uses `prompt` and
    `score_batch` directly with a chat model's reply.
    """

    name: str

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    def items(self, split: str) -> Sequence[Item]: ...

    @abc.abstractmethod
    def prompt(self, item: Item) -> Prompt:
        """What the policy sees for this item: text, or chat messages (`honed.types.Prompt`)."""

    def score(self, item: Item, completion: str) -> Score:
        """Score one completion; override this or `score_batch`."""
        raise NotImplementedError(f"{type(self).__name__} must implement score or score_batch")

    def score_batch(self, items: Sequence[Item], completions: Sequence[str]) -> list[Score]:
        return [self.score(item, c) for item, c in zip(items, completions, strict=True)]

    def reference(self, item: Item) -> str | None:
        """A correct completion for the item, if the environment knows one."""
        return None

    def sft_examples(self, item: Item) -> list[tuple[Prompt, str]]:
        ref = self.reference(item)
        return [] if ref is None else [(self.prompt(item), ref)]

    def rollout(
        self,
        items: Sequence[Item],
        generator: Generator,
        num_generations: int,
        seed: int,
        first_generation: int = 0,
    ) -> list[Group]:
        prompts = [self.prompt(item) for item in items]
        flat_items = [item for item in items for _ in range(num_generations)]
        flat_prompts = [p for p in prompts for _ in range(num_generations)]
        generations = range(first_generation, first_generation + num_generations)
        seeds = [rollout_seed(seed, item.key, g) for item in items for g in generations]
        samples = generator.generate(flat_prompts, seeds)
        scores = self.score_batch(flat_items, [s.text for s in samples])
        groups = []
        for i, item in enumerate(items):
            trajectories = []
            for g in range(num_generations):
                k = i * num_generations + g
                sample, score = samples[k], scores[k]
                trajectories.append(
                    Trajectory(
                        segments=[sample.segment()],
                        reward=float(score.reward),
                        success=float(score.success),
                        components=dict(score.components),
                        prompt_text=prompt_text(prompts[i]),
                        completion_text=sample.text,
                        info=dict(score.info),
                    )
                )
            groups.append(Group(self.name, item.key, trajectories, level=item.level))
        return groups
