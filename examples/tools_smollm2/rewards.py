"""The calculator task's rewards, in TRL's signature (`completions`: the messages after the
prompt; the last one is the final answer when the episode ended on one)."""

from __future__ import annotations

from honed.envs.answers import last_number


def correct(completions, answer, **kwargs) -> list[float]:
    """1 when the last number of the final answer is the expected one: a 135M chat model
    answers in a sentence ("The answer is 6912."), and the number is what is asked."""
    return [
        float(c[-1]["role"] == "assistant" and last_number(str(c[-1]["content"])) == a)
        for c, a in zip(completions, answer, strict=True)
    ]
