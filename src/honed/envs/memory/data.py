"""Memory instances: the embedded generator and the JSONL loader for real data.

An instance is an ordered list of chunks plus questions about them. The embedded generator
writes short, very regular chunks, so that a tiny character-level policy can learn the task
from scratch on a CPU; each chunk holds at most one piece of information, padded with chatter,
and a reference plan says what a good memory writer does with it. Every reference entry is the
informative sentence copied verbatim (a change reads "now ..." and replaces the old entry), so
the policy has to learn what to keep and where, not how to paraphrase:

| chunk (chatter optional)               | reference operation                         |
|----------------------------------------|---------------------------------------------|
| `Kamo lives in Oslo. It rained.`        | insert semantic `Kamo lives in Oslo`          |
| `Day 4: Kamo visited the zoo.`          | insert episodic `Day 4: Kamo visited the zoo` |
| `Kamo works for Tebu.`                  | insert semantic `Kamo works for Tebu`         |
| `Kamo now lives in Lima.` (a change)    | update that entry to `Kamo now lives in Lima` |
| `The bus was late. Tebu smiled.`        | nothing                                     |

Questions: *fact* ("Where does Kamo live?"), *updated-fact* (the same about a value that
changed: the latest value is the answer), *event-time* ("When did Kamo visit the zoo?" ->
"day 4") and *two-hop* ("Where does Kamo's boss live?" -> Tebu's latest city). Every fact is
asked about and no chatter is, so the best memory keeps the facts, follows the changes and
drops the chatter: that beats storing every chunk on size at equal accuracy.

Entities (synthetic two-syllable names) are assigned to train / validation / test by a hash of
the name, so the splits are disjoint by entity whatever the seed and the sizes.

**JSONL schema** for real data (e.g. MemoryAgentBench converted to chunks), one instance a line:

    {"id": "doc-1", "split": "test",
     "chunks": ["first chunk text", "second chunk text"],
     "questions": [{"question": "Where does Ann live?", "answer": "Oslo", "type": "fact"},
                   {"question": "Summarise the story.", "keywords": ["war", "ship"],
                    "type": "summary"}]}

`id` defaults to `line<N>`, `split` to `test`; `answer` is a string or a list of accepted
strings; `keywords` (scored by the share found) may replace `answer`; `type` defaults to
`fact`; `evidence` (optional, see `Question`) is a list of lists of strings. Blank lines are skipped; every malformed line is reported by its number.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from honed.envs.memory.store import EPISODIC, SEMANTIC, Memory
from honed.envs.memory.tools import DELETE, INSERT, UPDATE, ToolCall
from honed.errors import HonedError
from honed.types import SPLITS, derive_seed


@dataclass
class Question:
    """A question with its accepted answers; `keywords` replace answers for summaries.

    `evidence` lists groups of strings that must each occur together on one line of the
    context (one memory entry, one chunk) for the ideal reader to count the question answered:
    `[["Kamo", "Oslo"]]` stops "Oslo" stored about someone else from passing, and a two-hop
    question needs both of its links. Only the ideal reader uses it.
    """

    question: str
    answers: list[str]
    type: str = "fact"
    keywords: list[str] = field(default_factory=list)
    evidence: list[list[str]] = field(default_factory=list)


@dataclass
class PlanOp:
    """One reference memory operation; an update or a delete names the text it replaces or
    removes, not an id (a delete's `content` is the sentence that says so, never written).

    Ids depend on the memory's history and an update is only possible when the policy can see
    the entry it changes, so `call` resolves the target against the live memory and the ids
    shown in the prompt, and falls back to inserting the new text when the target is hidden
    (a delete of a hidden entry is left out: `None`).
    """

    op: str
    store: str
    content: str
    target: str | None = None

    def call(self, memory: Memory, visible: set[str]) -> ToolCall | None:
        if self.op == "delete":
            for memory_id, text in memory.items(self.store):
                if text == self.target and memory_id in visible:
                    return ToolCall(DELETE, {"memory_type": self.store, "memory_id": memory_id})
            return None
        if self.op == "update":
            for memory_id, text in memory.items(self.store):
                if text == self.target and memory_id in visible:
                    return ToolCall(
                        UPDATE,
                        {
                            "memory_type": self.store,
                            "new_content": self.content,
                            "memory_id": memory_id,
                        },
                    )
        return ToolCall(INSERT, {"memory_type": self.store, "content": self.content})


@dataclass
class Instance:
    """Chunks to read in order, questions about them, and (synthetic data) a reference plan.

    `source` is the data set the instance comes from (Mem-α's `data_source`, e.g. `squad`,
    `icl_banking77_5900shot_balance`; `honed` for honed's own): it picks the metric that scores
    its questions (`metrics.py`) and groups the evaluation table by data set.

    `budget`, when set, caps the memory's tokens (an insert or update past it fails)."""

    id: str
    chunks: list[str]
    questions: list[Question]
    plan: list[list[PlanOp]] | None = None
    budget: int | None = None
    source: str = "honed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mentioned(self) -> set[str]:
        """Every sentence the reference plan writes, changes or retracts with (none without a
        plan): a non-chatter sentence outside it is a distractor."""
        return {op.content for ops in self.plan or [] for op in ops}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Instance:
        plan = data.get("plan")
        return cls(
            id=data["id"],
            chunks=list(data["chunks"]),
            questions=[Question(**q) for q in data["questions"]],
            plan=None if plan is None else [[PlanOp(**op) for op in step] for step in plan],
            budget=data.get("budget"),
            source=data.get("source", "honed"),
        )


@dataclass
class DataSpec:
    """Sizes of the generated data; every field is an environment argument."""

    train_size: int = 256
    validation_size: int = 32
    test_size: int = 32
    entities: int = 2  # people per instance
    facts: int = 2  # facts per person (1-3); the first is always where they live
    events: int = 2  # dated events per instance
    updates: int = 1  # facts that change later
    relations: int = 1  # "A works for B" facts, each asked as a two-hop question
    chatter: int = 2  # chatter-only chunks
    chatter_rate: float = 1.0  # chance that an informative chunk also carries chatter
    # `paper` (paperdata.py): long chunks, distractors, changes and deletions, paraphrased
    # questions, a memory budget; the fields below are read only by it
    synthetic: str = "simple"
    chunks: int = 4  # chunks per instance
    chunk_min: int = 400  # characters per chunk (the embedded policy's tokens)
    chunk_max: int = 1500
    distractors: int = 3  # sentences like a fact that answer nothing
    deletions: int = 1  # facts that stop being true later (the reference deletes them)

    def size(self, split: str) -> int:
        return {
            "train": self.train_size,
            "validation": self.validation_size,
            "test": self.test_size,
        }[split]

    def check(self) -> None:
        if self.synthetic not in SYNTHETIC:
            raise HonedError(
                f"memory data: synthetic must be one of {', '.join(SYNTHETIC)}, not "
                f"{self.synthetic!r}"
            )
        if self.chunks < 1 or not 0 < self.chunk_min <= self.chunk_max:
            raise HonedError("memory data: need chunks >= 1 and 0 < chunk_min <= chunk_max")
        if self.synthetic == "paper" and self.events + self.distractors > len(_DAYS):
            raise HonedError(f"memory data: at most {len(_DAYS)} events and distractors")
        if self.entities < 1:
            raise HonedError("memory data: entities must be at least 1")
        if not 1 <= self.facts <= len(_ATTRIBUTES):
            raise HonedError(f"memory data: facts must be between 1 and {len(_ATTRIBUTES)}")
        if self.relations and self.entities < 2:
            raise HonedError("memory data: relations need at least 2 entities")
        if self.updates > self.entities * self.facts:
            raise HonedError("memory data: more updates than facts to update")
        if self.relations > self.entities:
            raise HonedError("memory data: at most one relation per entity")
        kinds = self.entities * sum(len(objs) for _, _, objs in _EVENTS)
        if self.events > min(len(_DAYS), kinds):
            raise HonedError(f"memory data: at most {min(len(_DAYS), kinds)} events")
        for f in fields(self):
            if f.name not in ("chatter_rate", "synthetic") and getattr(self, f.name) < 0:
                raise HonedError(f"memory data: {f.name} must not be negative")


_CITIES = [
    "Oslo", "Lima", "Rome", "Kyiv", "Baku", "Doha", "Riga", "Bern", "Pune", "Cork", "Lyon",
    "Graz", "Kobe", "Fez", "Quito", "Turin",
]  # fmt: skip
_JOBS = [
    "cook", "nurse", "pilot", "baker", "judge", "tailor", "farmer", "dentist", "poet", "clerk",
    "miner", "barber",
]  # fmt: skip
_PETS = ["cat", "dog", "parrot", "rabbit", "horse", "turtle", "goat", "hamster", "lizard", "pony"]
# attribute: (statement, question, statement after a change, values)
_ATTRIBUTES = {
    "city": ("{n} lives in {v}", "Where does {n} live?", "{n} now lives in {v}", _CITIES),
    "job": ("{n} works as a {v}", "What is {n}'s job?", "{n} now works as a {v}", _JOBS),
    "pet": ("{n} has a pet {v}", "What pet does {n} have?", "{n} now has a pet {v}", _PETS),
}
# (past tense, base form, objects)
_EVENTS = [
    ("visited", "visit", ["the zoo", "the lake", "the museum", "the market", "the beach", "the castle"]),
    ("bought", "buy", ["a kite", "a lamp", "a bike", "a hat", "a rug", "a drum"]),
    ("lost", "lose", ["a key", "a ring", "a glove", "a wallet", "a scarf"]),
    ("painted", "paint", ["a fence", "a boat", "a door", "a wall", "a chair"]),
]  # fmt: skip
_RELATIONS = [("works for", "boss"), ("rents from", "landlord")]
CHATTER = [
    "It rained all day long.", "The tea was cold again.", "We talked about old films.",
    "The bus was very late.", "Nothing much happened after lunch.", "The soup was far too salty.",
    "We sang a silly song.", "The wifi was slow again.", "{n} smiled at everyone.",
    "{n} was very tired.", "{n} told a long joke.", "{n} said hello to us.",
]  # fmt: skip
_DAYS = range(1, 31)
SYNTHETIC = ("simple", "paper")
_NAME = re.compile(r"\b[A-Z][a-z]{3}\b")


def _vocabulary() -> set[str]:
    words: set[str] = set()
    texts = [t for a in _ATTRIBUTES.values() for t in (*a[:3], *a[3])]
    texts += [t for past, base, objs in _EVENTS for t in (past, base, *objs)]
    texts += [t for pair in _RELATIONS for t in pair] + CHATTER + ["day"]
    for text in texts:
        words.update(w.strip(".?'{}").lower() for w in text.split())
    return words


def _names() -> dict[str, list[str]]:
    """Two-syllable names by split; a hash of the name decides its split (80/10/10)."""
    taken = _vocabulary()
    names = [
        f"{a}{b}{c}{d}".capitalize()
        for a in "bdfgklmnprstvz"
        for b in "aeiou"
        for c in "bdfgklmnprstvz"
        for d in "aiou"  # no final "e": fewer names that are English words (Rude, Mile)
    ]
    by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
    for name in names:
        if name.lower() in taken:
            continue
        bucket = derive_seed("memory-entity", name) % 10
        by_split["train" if bucket < 8 else "validation" if bucket == 8 else "test"].append(name)
    return by_split


NAMES = _names()


def entities_of(instance: Instance) -> set[str]:
    """The generated names an instance mentions (for checking that splits are disjoint)."""
    pool = {n for names in NAMES.values() for n in names}
    return set(_NAME.findall(" ".join(instance.chunks))) & pool


def generate(split: str, spec: DataSpec, seed: int = 0) -> list[Instance]:
    """`spec.size(split)` instances of a split, the same for the same seed."""
    spec.check()
    return [
        _instance(split, i, spec, random.Random(derive_seed(seed, "memory", split, i)))
        for i in range(spec.size(split))
    ]


# An informative chunk of a generated instance: its sentence and the reference plan's ops for it
# ("", [] for a chunk of pure chatter).
_Chunk = tuple[str, list[PlanOp]]


def _instance(split: str, index: int, spec: DataSpec, rng: random.Random) -> Instance:
    """One generated instance. Every random draw comes from `rng`, in a fixed order (facts,
    events, relations, shuffle, updates, chatter): the helpers below are called in that order,
    so an instance is the same for the same seed."""
    names = rng.sample(NAMES[split], spec.entities)
    facts, value = _fact_chunks(names, spec, rng)
    events, event_questions = _event_chunks(names, spec, rng)
    relation_chunks, relations = _relation_chunks(names, spec, rng)
    chunks = facts + events + relation_chunks + [("", []) for _ in range(spec.chatter)]
    rng.shuffle(chunks)
    updated = _insert_updates(chunks, value, spec, rng)
    questions = _questions(value, updated, event_questions, relations)
    texts = [_with_chatter(text, names, spec, rng) for text, _ in chunks]
    return Instance(f"{split}-{index}", texts, questions, [ops for _, ops in chunks])


def _fact_chunks(
    names: list[str], spec: DataSpec, rng: random.Random
) -> tuple[list[_Chunk], dict[tuple[str, str], str]]:
    """`spec.facts` facts per entity (a city, then a job and/or a pet), each inserted into the
    semantic store; with the value of each (entity, attribute), which the updates change and
    the fact and two-hop questions ask about."""
    chunks: list[_Chunk] = []
    value: dict[tuple[str, str], str] = {}
    for n in names:
        for attr in ["city", *rng.sample(["job", "pet"], spec.facts - 1)]:
            statement, _, _, values = _ATTRIBUTES[attr]
            value[n, attr] = rng.choice(values)
            text = statement.format(n=n, v=value[n, attr])
            chunks.append((text + ".", [PlanOp("insert", SEMANTIC, text)]))
    return chunks, value


def _event_chunks(
    names: list[str], spec: DataSpec, rng: random.Random
) -> tuple[list[_Chunk], list[Question]]:
    """`spec.events` dated events on distinct days, each inserted into the episodic store, with
    the event-time question that asks for its day."""
    chunks: list[_Chunk] = []
    questions = []
    kinds = [(n, past, base, obj) for n in names for past, base, objs in _EVENTS for obj in objs]
    for day, (n, past, base, obj) in zip(
        rng.sample(list(_DAYS), spec.events), rng.sample(kinds, spec.events), strict=True
    ):
        text = f"Day {day}: {n} {past} {obj}"
        chunks.append((text + ".", [PlanOp("insert", EPISODIC, text)]))
        questions.append(
            Question(
                f"When did {n} {base} {obj}?",
                [f"day {day}"],
                "event-time",
                evidence=[[n, f"day {day}"]],
            )
        )
    return chunks, questions


def _relation_chunks(
    names: list[str], spec: DataSpec, rng: random.Random
) -> tuple[list[_Chunk], list[tuple[str, str, str]]]:
    """`spec.relations` relations "a works for b", each inserted into the semantic store; with
    (a, role, b), from which the two-hop questions are made."""
    chunks: list[_Chunk] = []
    relations = []
    for a in rng.sample(names, spec.relations):
        b = rng.choice([m for m in names if m != a])
        verb, role = rng.choice(_RELATIONS)
        text = f"{a} {verb} {b}"
        chunks.append((text + ".", [PlanOp("insert", SEMANTIC, text)]))
        relations.append((a, role, b))
    return chunks, relations


def _insert_updates(
    chunks: list[_Chunk],
    value: dict[tuple[str, str], str],
    spec: DataSpec,
    rng: random.Random,
) -> set[tuple[str, str]]:
    """Change `spec.updates` facts: each change is inserted into the shuffled `chunks` somewhere
    after the fact it replaces (so the reference updates an entry that exists) and `value`
    takes the new value, which the questions ask for. Returns the (entity, attribute) changed."""
    updated = set(rng.sample(sorted(value), spec.updates))
    for n, attr in sorted(updated):
        statement, _, changed, values = _ATTRIBUTES[attr]
        old = statement.format(n=n, v=value[n, attr])
        value[n, attr] = rng.choice([v for v in values if v != value[n, attr]])
        new = changed.format(n=n, v=value[n, attr])
        after = next(i for i, (_, ops) in enumerate(chunks) if ops and ops[0].content == old)
        op = PlanOp("update", SEMANTIC, new, target=old)
        chunks.insert(rng.randint(after + 1, len(chunks)), (new + ".", [op]))
    return updated


def _questions(
    value: dict[tuple[str, str], str],
    updated: set[tuple[str, str]],
    events: list[Question],
    relations: list[tuple[str, str, str]],
) -> list[Question]:
    """Every fact asked about at its latest value (updated-fact when it changed), then the
    event-time questions, then one two-hop question per relation; no chatter is asked about."""
    questions = [
        Question(
            _ATTRIBUTES[a][1].format(n=n),
            [v],
            "updated-fact" if (n, a) in updated else "fact",
            evidence=[[n, v]],
        )
        for (n, a), v in value.items()
    ]
    questions += events
    questions += [
        Question(
            f"Where does {a}'s {role} live?",
            [value[b, "city"]],
            "two-hop",
            evidence=[[a, b], [b, value[b, "city"]]],
        )
        for a, role, b in relations
    ]
    return questions


def _with_chatter(text: str, names: list[str], spec: DataSpec, rng: random.Random) -> str:
    def chatter() -> str:
        return rng.choice(CHATTER).format(n=rng.choice(names))

    if not text:
        return f"{chatter()} {chatter()}"
    if rng.random() >= spec.chatter_rate:
        return text
    return f"{chatter()} {text}" if rng.random() < 0.5 else f"{text} {chatter()}"


def load_jsonl(path: str | Path, default_split: str = "test") -> dict[str, list[Instance]]:
    """Instances by split from a JSONL file in the schema of the module docstring.

    Raises `HonedError` naming every malformed line (up to ten) with its number.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HonedError(f"memory data: cannot read {path}: {exc.strerror or exc}") from None
    out: dict[str, list[Instance]] = {s: [] for s in SPLITS}
    problems: list[str] = []
    ids: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            split, instance = _parse_line(line, number, default_split)
            if instance.id in ids:
                raise ValueError(f"duplicate id {instance.id!r}")
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
            continue
        ids.add(instance.id)
        out[split].append(instance)
    if problems:
        shown = "; ".join(problems[:10]) + (
            f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        )
        raise HonedError(f"memory data {path}: {len(problems)} malformed line(s): {shown}")
    return out


def _parse_line(line: str, number: int, default_split: str) -> tuple[str, Instance]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    return parse_record(record, number, default_split)


def parse_record(record: object, number: int, default_split: str) -> tuple[str, Instance]:
    """(split, instance) of one record of honed's schema; `number` names it in a default id.
    Raises `ValueError` saying what is wrong."""
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    split = record.get("split", default_split)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    chunks = record.get("chunks")
    if (
        not isinstance(chunks, list)
        or not chunks
        or not all(isinstance(c, str) and c.strip() for c in chunks)
    ):
        raise ValueError("'chunks' must be a non-empty list of non-empty strings")
    raw_questions = record.get("questions")
    if not isinstance(raw_questions, list) or not raw_questions:
        raise ValueError("'questions' must be a non-empty list")
    questions = [_parse_question(q, i) for i, q in enumerate(raw_questions)]
    return split, Instance(str(record.get("id", f"line{number}")), chunks, questions)


def _parse_question(q: object, i: int) -> Question:
    if (
        not isinstance(q, dict)
        or not isinstance(q.get("question"), str)
        or not q["question"].strip()
    ):
        raise ValueError(f"questions[{i}] needs a 'question' string")
    answer = q.get("answer", [])
    answers = [answer] if isinstance(answer, str) else answer
    keywords = q.get("keywords", [])
    if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
        raise ValueError(f"questions[{i}]: 'answer' must be a string or a list of strings")
    if not isinstance(keywords, list) or not all(
        isinstance(k, str) and k.strip() for k in keywords
    ):
        raise ValueError(f"questions[{i}]: 'keywords' must be a list of strings")
    if not answers and not keywords:
        raise ValueError(f"questions[{i}] needs an 'answer' or 'keywords'")
    qtype = q.get("type", "fact")
    if not isinstance(qtype, str):
        raise ValueError(f"questions[{i}]: 'type' must be a string")
    evidence = q.get("evidence", [])
    if not isinstance(evidence, list) or not all(
        isinstance(g, list) and g and all(isinstance(x, str) for x in g) for g in evidence
    ):
        raise ValueError(f"questions[{i}]: 'evidence' must be a list of lists of strings")
    return Question(q["question"], answers, qtype, keywords, evidence)
