"""Generated instances shaped like Mem-α's data: long chunks, distractors, changes, a budget.

The `simple` generator (`data.py`) writes one short sentence per chunk, asks about every fact in
the chunk's own words and lets every memory grow without limit, so "store every sentence that is
not chatter" already answers everything. This one (`synthetic: paper`) makes what a memory
writer chooses matter, as the paper's data does:

- **long chunks**: each chunk is `chunk_min`..`chunk_max` characters (the embedded policy's
  tokens are characters), a few informative sentences among many sentences of chatter;
- **distractors**: sentences about the same people that use the same words as the real facts
  but are never the answer (`Kamo's cousin has settled in the city of Rome`);
- **changes**: a fact changes in a later chunk (`Kamo has since moved to the city of Lima`,
  the reference *updates* the old entry) or stops being true (`Kamo gave up the job as a cook
  for good`, the reference *deletes* it);
- **paraphrased questions**: a question shares the person's name and one anchor word with the
  fact (`Which city is Kamo living in?` for `Kamo has settled in the city of Oslo`), never the
  sentence; **two-fact questions** need a relation and the other person's fact (`Which city is
  home to Kamo's boss?`);
- **a memory budget**: each instance carries `budget`, 1.1 × the largest size the reference
  memory reaches (word tokens, rounded up), which is less than the relevant sentences verbatim
  (the facts, their changes and the retractions). An insert that would exceed it fails, so a
  writer that keeps everything loses the facts that come last.

The reference plan (the warm-start's target) inserts facts, events and relations verbatim,
updates the entry a change replaces, deletes the entry a retraction ends, and skips chatter and
distractors. Entities come from the same split-disjoint name pools as the simple generator.
"""

from __future__ import annotations

import math
import random
import re

from honed.envs.memory import data
from honed.envs.memory.data import NAMES, DataSpec, Instance, PlanOp, Question
from honed.envs.memory.store import EPISODIC, SEMANTIC, Memory, word_tokens
from honed.envs.memory.tools import execute
from honed.types import derive_seed

_CITIES = [
    "Oslo", "Lima", "Rome", "Kyiv", "Baku", "Doha", "Riga", "Bern", "Pune", "Cork", "Lyon",
    "Graz", "Kobe", "Fez", "Quito", "Turin",
]  # fmt: skip
_JOBS = ["cook", "nurse", "pilot", "baker", "judge", "tailor", "farmer", "dentist", "poet", "clerk"]
_PETS = ["cat", "dog", "parrot", "rabbit", "horse", "turtle", "goat", "hamster", "lizard", "pony"]
# attribute: (statements, changes, retraction, questions, distractors, values); {n} the person,
# {v} the value. Every statement, change, distractor and question of an attribute shares its
# anchor word (city, job, pet) and the person's name, nothing more.
_ATTRIBUTES = {
    "city": (
        ["{n} has settled in the city of {v}", "{n} rents a flat in the city of {v}"],
        ["{n} has since moved to the city of {v}", "{n} left and now stays in the city of {v}"],
        None,  # everyone lives somewhere: a city is changed, never retracted
        ["Which city is {n} living in?", "In what city can {n} be found?"],
        ["{n}'s cousin has settled in the city of {v}", "{n} dreams of a trip to the city of {v}"],
        _CITIES,
    ),
    "job": (
        ["{n} has a steady job as a {v}", "{n} earns a living with a job as a {v}"],
        ["{n} quit and took a new job as a {v}", "{n} has switched to a job as a {v}"],
        "{n} gave up the job as a {v} for good",
        ["What job does {n} do?", "Which job pays {n}'s bills?"],
        ["{n} once applied for a job as a {v}", "{n}'s brother has a job as a {v}"],
        _JOBS,
    ),
    "pet": (
        ["{n} keeps a pet {v} at home", "{n} looks after a pet {v}"],
        ["{n} gave the old pet away and got a pet {v}", "{n} now has a pet {v} instead"],
        "{n} no longer keeps the pet {v}",
        ["Which pet does {n} have?", "What kind of pet lives with {n}?"],
        ["{n}'s neighbour keeps a pet {v}", "{n} would love a pet {v} one day"],
        _PETS,
    ),
}
_EVENT_OBJECTS = [
    "the zoo", "the lake", "the museum", "the market", "the castle", "a kite", "a lamp",
    "a bike", "a rug", "a drum", "a ring", "a wallet", "a fence", "a boat",
]  # fmt: skip
_EVENTS = ["On day {d}, {n} went off to deal with {o}", "On day {d}, {n} spent the morning on {o}"]
_EVENT_DISTRACTORS = [
    "On day {d}, {n}'s friend talked about {o}",
    "{n} forgot about {o} on day {d}",
]
_EVENT_QUESTIONS = ["On which day did {n} deal with {o}?", "When was {n} busy with {o}?"]
# (statement, role); the two-fact question asks where the role lives
_RELATIONS = [
    ("{b} is the boss of {a}", "boss"),
    ("{a} rents a room from {b}, the landlord", "landlord"),
]
_TWO_HOP = ["Which city is home to {a}'s {r}?", "In what city does {a}'s {r} stay?"]
CHATTER = [
    "The weather stayed grey and cold for most of the afternoon",
    "Somebody left the radio on in the kitchen again",
    "We talked for a long while about old films and bad songs",
    "The bus was late and nobody seemed to mind very much",
    "Nothing much happened after lunch, as usual",
    "The soup at the corner cafe was far too salty",
    "A dog barked somewhere down the street all evening",
    "The wifi kept dropping out every few minutes",
    "Everyone agreed that the new bakery smells wonderful",
    "The meeting ran long and the coffee ran out",
    "It rained on and off the whole day",
    "The trains were crowded because of the football match",
    "{n} laughed at a joke that nobody else understood",
    "{n} was very tired after the long walk home",
    "{n} said hello to everyone at the door",
    "{n} talked about the weather for ten minutes",
]  # fmt: skip
_CHATTER_PATTERNS = [
    re.compile("^" + re.escape(c.rstrip(".")).replace(r"\{n\}", r"[A-Z][a-z]+") + r"\.?$")
    for c in (*CHATTER, *data.CHATTER)
]


def is_chatter(sentence: str) -> bool:
    """Whether a sentence is one of the chatter sentences of either generator (any person's
    name in it): what the rule baseline skips."""
    sentence = sentence.strip()
    return any(p.match(sentence) for p in _CHATTER_PATTERNS)


def generate(split: str, spec: DataSpec, seed: int = 0) -> list[Instance]:
    """`spec.size(split)` paper-shaped instances of a split, the same for the same seed."""
    spec.check()
    return [
        _instance(split, i, spec, random.Random(derive_seed(seed, "memory-paper", split, i)))
        for i in range(spec.size(split))
    ]


# One informative sentence: its text (no final "."), its kind, the reference op (or None: skip),
# and for a fact the (person, attribute) it states.
_Sentence = tuple[str, str, PlanOp | None]


def _instance(split: str, index: int, spec: DataSpec, rng: random.Random) -> Instance:
    """One instance; all draws from `rng` in a fixed order, so the same seed gives the same."""
    names = rng.sample(NAMES[split], spec.entities)
    sentences: list[_Sentence] = []
    facts: dict[tuple[str, str], str] = {}  # (person, attribute) -> the fact's sentence
    value: dict[tuple[str, str], str] = {}
    for n in names:
        for attr in ["city", *rng.sample(["job", "pet"], spec.facts - 1)]:
            statements, _, _, _, _, values = _ATTRIBUTES[attr]
            value[n, attr] = rng.choice(values)
            text = rng.choice(statements).format(n=n, v=value[n, attr])
            facts[n, attr] = text
            sentences.append((text, "fact", PlanOp("insert", SEMANTIC, text)))
    questions: list[Question] = []
    days = rng.sample(range(1, 31), spec.events + spec.distractors)
    for d, o in zip(days, rng.sample(_EVENT_OBJECTS, spec.events), strict=False):
        n = rng.choice(names)
        text = rng.choice(_EVENTS).format(d=d, n=n, o=o)
        sentences.append((text, "event", PlanOp("insert", EPISODIC, text)))
        question = rng.choice(_EVENT_QUESTIONS).format(n=n, o=o)
        questions.append(Question(question, [f"day {d}"], "event-time"))
    relations = []
    for a in rng.sample(names, spec.relations):
        b = rng.choice([m for m in names if m != a])
        statement, role = rng.choice(_RELATIONS)
        text = statement.format(a=a, b=b)
        sentences.append((text, "relation", PlanOp("insert", SEMANTIC, text)))
        relations.append((a, role, b))
    sentences += _distractors(names, spec, rng, days[spec.events :])
    rng.shuffle(sentences)
    chunk_of = _spread(len(sentences), spec.chunks, rng)
    retracted = _changes(sentences, chunk_of, facts, value, spec, rng)
    questions = _fact_questions(value, retracted, rng) + questions
    questions += [
        Question(rng.choice(_TWO_HOP).format(a=a, r=role), [value[b, "city"]], "two-hop")
        for a, role, b in relations
    ]
    chunks, plan = _chunks(sentences, chunk_of, names, spec, rng)
    instance = Instance(f"{split}-{index}", chunks, questions, plan)
    instance.budget = budget_of(instance)
    return instance


def _distractors(
    names: list[str], spec: DataSpec, rng: random.Random, days: list[int]
) -> list[_Sentence]:
    """`spec.distractors` sentences about the instance's people that share a fact's anchor word
    and hold a value of the same kind, but answer no question."""
    out: list[_Sentence] = []
    for i in range(spec.distractors):
        n = rng.choice(names)
        kind = rng.choice(["city", "job", "pet", "event"])
        if kind == "event":
            o = rng.choice(_EVENT_OBJECTS)
            text = rng.choice(_EVENT_DISTRACTORS).format(n=n, o=o, d=days[i])
        else:
            _, _, _, _, distractors, values = _ATTRIBUTES[kind]
            text = rng.choice(distractors).format(n=n, v=rng.choice(values))
        out.append((text, "distractor", None))
    return out


def _spread(count: int, chunks: int, rng: random.Random) -> list[int]:
    """A chunk index for each of `count` shuffled sentences: in order, every chunk gets one at
    least when there are enough."""
    cuts = sorted(rng.sample(range(1, count), min(chunks, count) - 1)) if count > 1 else []
    out, chunk = [], 0
    for i in range(count):
        while chunk < len(cuts) and i >= cuts[chunk]:
            chunk += 1
        out.append(chunk)
    return out


def _changes(
    sentences: list[_Sentence],
    chunk_of: list[int],
    facts: dict[tuple[str, str], str],
    value: dict[tuple[str, str], str],
    spec: DataSpec,
    rng: random.Random,
) -> set[tuple[str, str]]:
    """`spec.updates` facts change and `spec.deletions` facts stop being true, each in a chunk
    after the fact's own (the reference then updates or deletes an entry it can see). `value`
    takes each change's new value; returns the retracted facts (not asked about)."""
    last = max(chunk_of)
    position = {text: i for i, (text, _, _) in enumerate(sentences)}
    candidates = [k for k in sorted(facts) if chunk_of[position[facts[k]]] < last]
    changed = rng.sample(candidates, min(spec.updates, len(candidates)))
    rest = [k for k in candidates if k not in changed and _ATTRIBUTES[k[1]][2] is not None]
    retracted = rng.sample(rest, min(spec.deletions, len(rest)))
    for key in [*changed, *retracted]:
        n, attr = key
        _, changes, retraction, _, _, values = _ATTRIBUTES[attr]
        old = facts[key]
        if key in changed:
            value[key] = rng.choice([v for v in values if v != value[key]])
            text = rng.choice(changes).format(n=n, v=value[key])
            op = PlanOp("update", SEMANTIC, text, target=old)
        else:
            text = str(retraction).format(n=n, v=value[key])
            op = PlanOp("delete", SEMANTIC, text, target=old)
        after = chunk_of[position[old]]
        chunk = rng.randint(after + 1, last)
        where = rng.randint(chunk_of.index(chunk), len(chunk_of) - chunk_of[::-1].index(chunk))
        sentences.insert(where, (text, "change", op))
        chunk_of.insert(where, chunk)
        position = {t: i for i, (t, _, _) in enumerate(sentences)}
    return set(retracted)


def _fact_questions(
    value: dict[tuple[str, str], str], retracted: set[tuple[str, str]], rng: random.Random
) -> list[Question]:
    return [
        Question(rng.choice(_ATTRIBUTES[a][3]).format(n=n), [v], "fact")
        for (n, a), v in value.items()
        if (n, a) not in retracted
    ]


def _chunks(
    sentences: list[_Sentence],
    chunk_of: list[int],
    names: list[str],
    spec: DataSpec,
    rng: random.Random,
) -> tuple[list[str], list[list[PlanOp]]]:
    """The chunk texts, informative sentences in order with chatter mixed in until each chunk is
    `chunk_min`..`chunk_max` characters long, and the reference ops of each chunk."""
    chunks, plan = [], []
    for c in range(max(chunk_of) + 1):
        mine = [s for s, k in zip(sentences, chunk_of, strict=True) if k == c]
        texts = [t for t, _, _ in mine]
        target = rng.randint(spec.chunk_min, spec.chunk_max)
        used: set[str] = set()
        while len(". ".join(texts)) + 1 < target:
            template = rng.choice([c for c in CHATTER if c not in used] or CHATTER)
            used.add(template)
            chatter = template.format(n=rng.choice(names))
            if len(". ".join([*texts, chatter])) + 1 > spec.chunk_max and len(texts) > len(mine):
                break
            texts.insert(rng.randint(0, len(texts)), chatter)
        chunks.append(". ".join(texts) + ".")
        plan.append([op for _, _, op in mine if op is not None])
    return chunks, plan


def budget_of(instance: Instance, ratio: float = 1.1) -> int:
    """`ratio` × the most word tokens the reference memory holds at any point, rounded up, and
    less than the relevant sentences verbatim (`relevant_tokens`) when the plan allows."""
    memory = Memory()
    peak = 0
    for ops in instance.plan or []:
        visible = {i for store in (SEMANTIC, EPISODIC) for i, _ in memory.items(store)}
        for op in ops:
            call = op.call(memory, visible)
            if call is not None:
                execute(memory, call)
        peak = max(peak, memory.tokens())
    return max(peak, min(math.ceil(ratio * peak), relevant_tokens(instance) - 1))


def relevant_tokens(instance: Instance) -> int:
    """Word tokens of the sentences the reference plan writes from (facts, events, relations,
    changes and retractions), verbatim: what keeping all that matters would cost."""
    return sum(word_tokens(op.content) for ops in instance.plan or [] for op in ops)


__all__ = ["CHATTER", "budget_of", "generate", "is_chatter", "relevant_tokens", "word_tokens"]
