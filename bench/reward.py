"""The benchmark's reward function, with the TRL signature so both frameworks call it as is.

Exact match alone would give an untrained model all-zero groups; honed then skips the update
and TRL still runs it, and the two would no longer do the same work. Partial credit (the share
of the answer's characters in place) gives nearly every group some spread.
"""

from __future__ import annotations


def partial_match(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 for the exact answer, else the share of the answer's characters at their positions."""
    scores = []
    for completion, target in zip(completions, answer, strict=True):
        text = completion.strip()
        if text == target:
            scores.append(1.0)
            continue
        hits = sum(a == b for a, b in zip(text, target, strict=False))
        scores.append(0.5 * hits / max(len(target), len(text), 1))
    return scores
