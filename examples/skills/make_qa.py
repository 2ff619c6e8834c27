"""Regenerate `qa.jsonl`: questions whose answers follow conventions that a skill can teach.

Each kind has one convention the scorer insists on (exact match after SQuAD normalisation, which
lower-cases and drops punctuation and articles), so a model that knows the facts still fails
until its skill states the convention:

- units:   metric conversions; the answer is the bare number in the unit asked for ("320").
- dates:   date arithmetic; the answer is an ISO date ("2024-03-31").
- letters: counting a letter in a word; the answer is a digit ("3"), and spelling the word out
           letter by letter is what gets it right.
- clock:   24-hour times in 12-hour form without a leading zero ("2:05 pm").
- percent: percentages of numbers; the bare number ("12.5").

    python examples/skills/make_qa.py     # writes examples/skills/qa.jsonl (deterministic)
"""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path

PER_KIND = 40
UNITS = [  # (from, to, factor)
    ("metres", "centimetres", 100),
    ("kilometres", "metres", 1000),
    ("kilograms", "grams", 1000),
    ("litres", "millilitres", 1000),
    ("centimetres", "millimetres", 10),
]
WORDS = [
    "strawberry",
    "banana",
    "mississippi",
    "committee",
    "bookkeeper",
    "parallel",
    "assessment",
    "occurrence",
    "necessary",
    "embarrass",
    "millennium",
    "possession",
    "referee",
    "coffee",
    "balloon",
    "letter",
    "address",
    "success",
    "pepper",
    "giraffe",
    "raspberry",
    "cinnamon",
    "tomorrow",
    "accommodate",
    "recommend",
    "broccoli",
    "tennessee",
    "hippopotamus",
    "butterfly",
    "grammar",
]


def number(x: float) -> str:
    """A number as people write it: no trailing zeros, no trailing point."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def units(rng: random.Random) -> tuple[str, str]:
    source, target, factor = rng.choice(UNITS)
    value = rng.randint(2, 99) / 10
    return f"How many {target} are in {number(value)} {source}?", number(value * factor)


def dates(rng: random.Random) -> tuple[str, str]:
    start = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 700))
    days = rng.randint(3, 60)
    direction = rng.choice(["after", "before"])
    end = start + datetime.timedelta(days=days if direction == "after" else -days)
    return f"What date is {days} days {direction} {start.isoformat()}?", end.isoformat()


def letters(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    letter = rng.choice(sorted(set(word)))
    return f"How many times does the letter '{letter}' appear in '{word}'?", str(word.count(letter))


def clock(rng: random.Random) -> tuple[str, str]:
    hour, minute = rng.randint(0, 23), rng.choice(range(0, 60, 5))
    twelve = hour % 12 or 12
    return (
        f"Write the 24-hour time {hour:02d}:{minute:02d} in 12-hour clock form.",
        f"{twelve}:{minute:02d} {'am' if hour < 12 else 'pm'}",
    )


def percent(rng: random.Random) -> tuple[str, str]:
    share, whole = rng.choice([5, 10, 12.5, 15, 20, 25, 30, 40, 75]), rng.randint(2, 60) * 4
    return f"What is {number(share)}% of {whole}?", number(share * whole / 100)


def main() -> None:
    rng = random.Random(0)
    rows, seen = [], set()
    for kind, make in [
        ("units", units),
        ("dates", dates),
        ("letters", letters),
        ("clock", clock),
        ("percent", percent),
    ]:
        made = 0
        while made < PER_KIND:
            question, answer = make(rng)
            if question in seen:
                continue
            seen.add(question)
            rows.append({"question": question, "answer": answer, "kind": kind})
            made += 1
    out = Path(__file__).with_name("qa.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} questions to {out}")


if __name__ == "__main__":
    main()
