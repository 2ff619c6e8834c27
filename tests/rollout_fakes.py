"""A generator and an environment whose outcomes are known per item, without a model: for the
tests of skipping before rollout and of screening, which count what is generated."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from honed.envs.base import SingleTurnEnv
from honed.types import Item, Sample, Score


class CountingGenerator:
    """Completions that depend only on the seed (`"<seed>"`, one token per 8 digits), counted
    per prompt: `calls[prompt]` is how many completions that prompt got, `seeds` every seed
    asked for, in order."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seeds: list[int] = []
        self.tokens = 0

    def encode(self, prompt: object) -> list[int]:
        return [len(str(prompt))]

    def generate(self, prompts: Sequence[object], seeds: Sequence[int]) -> list[Sample]:
        out = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            self.calls[str(prompt)] += 1
            self.seeds.append(seed)
            ids = [seed % 1000, len(str(seed)) % 8]
            self.tokens += len(ids)
            out.append(Sample([1], ids, [-1.0] * len(ids), str(seed), truncated=False))
        return out

    @property
    def total(self) -> int:
        return sum(self.calls.values())


class OutcomeEnv(SingleTurnEnv):
    """Items whose every rollout succeeds (`solved<i>`), fails (`failed<i>`) or varies with the
    completion (`mixed<i>`: reward and success from the seed's parity). The prompt is the item's
    key, so `CountingGenerator.calls` counts per item. `difficulty_key` is the kind."""

    def __init__(self, name: str = "outcomes", seed: int = 0, per_kind: int = 6) -> None:
        super().__init__(name)
        kinds = ("solved", "failed", "mixed")
        self._items = [Item(f"{k}{i}", name, {"kind": k}) for k in kinds for i in range(per_kind)]

    def items(self, split: str) -> list[Item]:
        return self._items if split == "train" else self._items[:3]

    def prompt(self, item: Item) -> str:
        return item.key

    def difficulty_key(self, item: Item) -> str:
        return item.data["kind"]

    def score(self, item: Item, completion: str) -> Score:
        kind = item.data["kind"]
        if kind == "mixed":
            ok = float(int(completion) % 2)
        else:
            ok = float(kind == "solved")
        return Score(reward=ok, success=ok)
