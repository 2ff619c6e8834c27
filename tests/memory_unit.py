"""A memory task small enough that its best policy is known, for the GRPO unit-scale check.

Every instance has two chunks of one sentence each. The first is about the weather in a city
(the distractor: no question asks about it), the second says where someone lives (the fact: the
question asks it); the memory holds one of them (`budget` 4 word tokens, the length of each), so
a write in the first chunk makes the write of the fact fail. The first word tells them apart, so
the best policy can be read from the prompt alone. Per chunk the policy chooses one of three replies:
skip (`[]`), store the sentence as a fact (`{"i":"s","c":1}`) or as an event (`{"i":"e","c":1}`;
it has no time, so the rule judge calls it invalid). The best policy skips the distractor and
stores the fact as a fact: accuracy 1 at 4 memory tokens, the only way to answer the question.

Under Mem-α's chunk reward the first chunk's write is paid at once (r2 = 1, r4 = 1) while its
cost, the failed write of the fact, lands on the second chunk's r2 and on r1: a credit
assignment that gives each chunk only its own r2/r4 learns to store the distractor.

The warm-start is "random-ish": the SFT targets of every prompt the task can show are all three
replies, so the warm policy picks among them about uniformly; GRPO has to find the optimum.
Loaded by tests as `memory_unit:UnitMemoryEnv`.
"""

from __future__ import annotations

from typing import Any

from honed.envs.memory import MemoryEnv
from honed.envs.memory.data import Instance, Question
from honed.envs.memory.store import Memory
from honed.types import Item

NAMES = ("Kamo", "Tebu", "Rina", "Lopa", "Sefu", "Mira", "Dano", "Voli")
CITIES = ("Oslo", "Rome", "Lima", "Baku", "Riga", "Kobe", "Pune", "Nice")
REPLIES = ("[]", '[{"i":"s","c":1}]', '[{"i":"e","c":1}]')
BUDGET = 4  # word tokens: one "<name> lives in <city>" sentence


def unit_instance(index: int) -> Instance:
    """Instance `index`: the weather somewhere, then where someone lives."""
    asked = NAMES[index % len(NAMES)]
    city, elsewhere = CITIES[index % len(CITIES)], CITIES[(index + 5) % len(CITIES)]
    return Instance(
        f"unit-{index}",
        [f"It rained in {elsewhere}.", f"{asked} lives in {city}."],
        [Question(f"Where does {asked} live?", [city], evidence=[[asked, city]])],
        budget=BUDGET,
    )


class UnitMemoryEnv(MemoryEnv):
    """The memory environment on the two-chunk task; every other argument is MemoryEnv's."""

    def __init__(self, name: str = "memory", seed: int = 0, size: int = 8, **args: Any) -> None:
        super().__init__(name, seed, quote=True, recent=2, **args)
        instances = [unit_instance(i) for i in range(size)]
        items = [Item(inst.id, name, inst.to_dict()) for inst in instances]
        self._items = {"train": items, "validation": items, "test": items}

    def sft_examples(self, item: Item) -> list[tuple[str, str]]:
        """All three replies for every prompt the task can show: the first chunk on an empty
        memory, the second on an empty memory and on each memory the first can leave."""
        inst = Instance.from_dict(item.data)
        first, second = inst.chunks
        memories = [self._memory(inst)]
        for store in ("semantic", "episodic"):
            memory = self._memory(inst)
            memory.insert(store, first.rstrip("."))
            memories.append(memory)
        prompts = [self._prompt(memories[0], first).text]
        prompts += [self._prompt(m, second).text for m in memories]
        return [(prompt, reply) for prompt in prompts for reply in REPLIES]

    def best_memory(self, item: Item) -> Memory:
        """The memory of the best policy: the fact, as a fact."""
        inst = Instance.from_dict(item.data)
        memory = self._memory(inst)
        memory.insert("semantic", inst.chunks[1].rstrip("."))
        return memory
