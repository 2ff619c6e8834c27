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


def _call_went_wrong(episode) -> bool:
    """Whether any call of the episode was unreadable or its tool failed."""
    turns = episode["turns"]
    return any(t["format_errors"] for t in turns) or any(
        r["error"] for t in turns for r in t["tool_results"]
    )


def call_errors(trajectory, **kwargs) -> list[float]:
    """-1 when any call of the episode was unreadable or failed, else 0: a penalty that never
    ranks a wrong answer above running out of turns (a bonus for "answered" would, and GRPO
    then reinforces wrong answers in groups where nothing is right)."""
    return [-float(_call_went_wrong(episode)) for episode in trajectory]


def clean_calls(trajectory, **kwargs) -> list[float]:
    """1 when the episode answered after calling tools, every call readable and error-free (an
    episode without calls, or one that ran out of turns, gets nothing)."""
    return [
        float(
            episode["stop"] == "answer"
            and any(t["tool_calls"] for t in episode["turns"])
            and not _call_went_wrong(episode)
        )
        for episode in trajectory
    ]


def right_lookups(products, trajectory, **kwargs) -> list[float]:
    """The share of the products a question names that the episode looked up, if it answered
    (partial credit for reading the right rows; running out of turns earns none)."""
    out = []
    for names, episode in zip(products, trajectory, strict=True):
        if episode["stop"] != "answer":
            out.append(0.0)
            continue
        looked = {
            str(call["arguments"].get("name"))
            for turn in episode["turns"]
            for call in turn["tool_calls"]
            if call["name"] == "lookup"
        }
        out.append(sum(name in looked for name in names) / len(names))
    return out
