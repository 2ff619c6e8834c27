"""Reading the final answer out of a model's reply, before a task's scorer sees it.

Task scorers compare an answer with the gold one; a reply is usually more than an answer. A
small chat model wraps it in a sentence ("The final answer is 2."), and a scorer given the
whole sentence gives no credit, so what RL would have to learn first is the format, not the
task. These extractors take the part that is scored:

- `last_number`: the last number written in the reply (see `last_number` for what counts);
- `last_line`: the last non-empty line;
- `raw`: the whole reply.

Each gives the text without surrounding whitespace, or `None` when the reply holds no answer of
that kind (an empty reply included), so that "no answer" is told apart from a wrong one.
"""

from __future__ import annotations

import re

# A sign counts only where it cannot be an operator: not after a letter, digit or point, so
# "5-3" reads as 3 and "= -4" as -4. The body is a fraction ("3/4"), a number with thousands
# separators in groups of three ("1,234.5"), or a plain integer or decimal ("-0.25"); a point
# not followed by a digit ends the sentence ("is 2.") and is not part of the number.
_NUMBER = re.compile(
    r"(?P<sign>(?<![\w.])[-+\u2212])?"
    r"(?P<body>\d+/\d+|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
)


def last_number(reply: str) -> str | None:
    """The last number in `reply` as plain text: thousands separators removed, a leading `+`
    dropped, a Unicode minus written `-`; fractions stay fractions (`3/4`) and decimals keep
    their digits as written (`2.50`), for the task's scorer to compare as it does.

    Currency signs, units and percent signs around the number are ignored ("$1,200" -> `1200`,
    "50%" -> `50`). Not read: scientific notation (`1e3` reads as 3), spaces as thousands
    separators, and numbers written in words.
    """
    matches = list(_NUMBER.finditer(reply))
    if not matches:
        return None
    found = matches[-1]
    sign = "-" if found["sign"] in ("-", "\u2212") else ""
    return sign + found["body"].replace(",", "")


def last_line(reply: str) -> str | None:
    """The last line of `reply` that is not blank, without surrounding whitespace."""
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    return lines[-1] if lines else None


def raw(reply: str) -> str | None:
    """The whole reply without surrounding whitespace (`None` when nothing is left)."""
    return reply.strip() or None
