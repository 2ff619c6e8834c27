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
    """1 when the episode called tools and every call was readable and ran without an error
    (an episode without calls gets nothing: skipping the tools is not clean, it is wrong)."""
    out = []
    for episode in trajectory:
        turns = episode["turns"]
        called = any(t["tool_calls"] for t in turns)
        unreadable = any(t["format_errors"] for t in turns)
        failed = any(r["error"] for t in turns for r in t["tool_results"])
        out.append(float(called and not unreadable and not failed))
    return out


def right_lookups(products, trajectory, **kwargs) -> list[float]:
    """The share of the products a question names that the episode looked up (partial credit
    for reading the right rows, whatever happens next)."""
    out = []
    for names, episode in zip(products, trajectory, strict=True):
        looked = {
            str(call["arguments"].get("name"))
            for turn in episode["turns"]
            for call in turn["tool_calls"]
            if call["name"] == "lookup"
        }
        out.append(sum(name in looked for name in names) / len(names))
    return out
