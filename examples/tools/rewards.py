"""The example's reward functions, in TRL's signature.

`completions` are the messages after the prompt; the last one is the final answer when the
episode ended on one.
"""

from __future__ import annotations


def correct(completions, answer, **kwargs) -> list[float]:
    """1 when the final answer is the expected number, else 0."""
    return [
        float(c[-1]["role"] == "assistant" and c[-1]["content"].strip() == str(a))
        for c, a in zip(completions, answer, strict=True)
    ]


def clean_calls(trajectory, **kwargs) -> list[float]:
    """1 when every tool call of the episode was readable and ran without an error."""
    return [
        float(
            not any(t["format_errors"] for t in episode["turns"])
            and not any(r["error"] for t in episode["turns"] for r in t["tool_results"])
        )
        for episode in trajectory
    ]
