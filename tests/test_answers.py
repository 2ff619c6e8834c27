"""Answer extraction from realistic replies: what a task's scorer is given."""

from __future__ import annotations

import pytest

from honed.envs.answers import last_line, last_number, raw


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            "The final answer is 2.",
            "2",
        ),  # the sentence SmolLM2 writes; the full stop is not a decimal
        ("5 - 9 = -4", "-4"),
        ("The answer is (-12).", "-12"),
        ("5-3", "3"),  # a minus between numbers is an operator, not a sign
        ("x-5", "5"),
        ("It comes to \u22127 degrees", "-7"),  # a Unicode minus
        ("+8", "8"),
        ("The total is 1,234,567 legs.", "1234567"),
        ("$1,200.50 in all", "1200.50"),
        ("I count 1,2,3 so 3", "3"),  # commas that are not thousands separators
        ("3.14159", "3.14159"),
        ("It is 2.50", "2.50"),  # decimals are kept as written, for the task to compare
        ("Simplified: 3/4", "3/4"),
        ("-1/2 is the slope", "-1/2"),
        ("About 50% of them", "50"),
        ("**Answer:** 42\n\nLet me know if you need more help!", "42"),
        ("The GCD of 12 and 20 is 4.", "4"),
        ("<answer>17</answer>", "17"),
        ("There are no numbers here.", None),
        ("", None),
    ],
)
def test_last_number(reply, expected):
    assert last_number(reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Let me think.\nThe sum is 12.\n\nFinal: 12  \n\n", "Final: 12"),
        ("one line", "one line"),
        ("\n  \n", None),
        ("", None),
    ],
)
def test_last_line(reply, expected):
    assert last_line(reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [("  The final answer is 2.\n", "The final answer is 2."), (" \n ", None), ("a\nb", "a\nb")],
)
def test_raw(reply, expected):
    assert raw(reply) == expected
