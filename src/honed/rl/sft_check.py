"""The warm-start's held-out check: does the model already do what GRPO needs it to do?

A fixed number of warm-start steps is a knife edge for a model built from scratch: the tiny
policy learns to copy names and numbers from its context late and abruptly, and floating-point
differences between CPUs (or thread counts) move that moment by hundreds of steps. Stopping the
warm-start on a measurement instead makes every seed and machine start GRPO from a model that
copies.

Both metrics are computed under teacher forcing on held-out reference solutions (one batched
scoring pass, no sampling), and a token counts as right when the model gives it more than half
the probability, so that greedy decoding would pick it whatever the other tokens get:

- `copy_accuracy`: of the *copied words* of the references' own turns (maximal runs of letters
  and digits that occur earlier in the same example's context: its prompt, its tool results,
  its earlier turns), the share whose every token is right. Words that every checked example's
  prompt holds (instructions, tool schemas) are not counted: they are the same in every
  example and say nothing about copying what an instance brings.
- `token_accuracy`: the share of the references' own tokens (loss-masked tokens excluded) that
  are right.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import torch

from honed.models.batching import make_batch
from honed.models.dropout import eval_mode
from honed.models.policy import Policy
from honed.models.scoring import score

Example = tuple[list[int], list[int], list[int]]  # prompt ids, target ids, target loss mask

WORD = re.compile(r"[^\W_]{2,}")
RIGHT = math.log(0.5)  # log-probability above which a token is greedy decoding's choice


def copied_words(
    example: Example, decode: Callable[[list[int]], str], common: frozenset[str]
) -> list[list[int]]:
    """The target-token positions of each copied word of `example`'s own turns (see the module
    docstring); `common` holds the words that every checked prompt has."""
    prompt, target, mask = example
    pieces = [decode([token]) for token in target]
    text = "".join(pieces)
    owner: list[int] = []  # the target position each character of `text` came from
    for position, piece in enumerate(pieces):
        owner += [position] * len(piece)
    context = decode(prompt)
    seen = set(WORD.findall(context))
    words: list[list[int]] = []
    start = 0
    for match in WORD.finditer(text):
        seen.update(WORD.findall(text[start : match.start()]))
        start = match.start()
        positions = sorted(set(owner[match.start() : match.end()]))
        word = match.group()
        own = all(mask[p] for p in positions)
        if own and word in seen and word not in common:
            words.append(positions)
    return words


def common_prompt_words(
    examples: Sequence[Example], decode: Callable[[list[int]], str]
) -> frozenset[str]:
    """The words every example's prompt holds (none for a single example: what is common cannot
    be told from one)."""
    sets = [set(WORD.findall(decode(prompt))) for prompt, _, _ in examples]
    return frozenset(set.intersection(*sets)) if len(sets) > 1 else frozenset()


def _right_tokens(policy: Policy, examples: Sequence[Example], batch_size: int) -> list[list[bool]]:
    """For each example, whether each target token gets more than half the probability."""
    right: list[list[bool]] = []
    with torch.no_grad(), eval_mode(policy.model):
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            batch = make_batch(
                [p for p, _, _ in chunk],
                [t for _, t, _ in chunk],
                [[1] * len(t) for _, t, _ in chunk],
                policy.pad_id,
            )
            logprobs = score(policy.model, batch).logprobs.float().cpu()
            for row, (_, target, _) in enumerate(chunk):
                right.append((logprobs[row, : len(target)] > RIGHT).tolist())
    return right


def check_accuracy(
    policy: Policy, examples: Sequence[Example], metric: str, batch_size: int
) -> float:
    """`metric` (`copy_accuracy` or `token_accuracy`) of `policy` on `examples`; NaN when the
    examples hold nothing to measure (no copied word, no own token)."""
    right = _right_tokens(policy, examples, batch_size)
    hits = total = 0
    if metric == "token_accuracy":
        for (_, _, mask), row in zip(examples, right, strict=True):
            own = [r for r, m in zip(row, mask, strict=True) if m]
            hits += sum(own)
            total += len(own)
    else:
        decode = policy.decode  # special tokens (BOS, EOS) decode to nothing: they are no words
        common = common_prompt_words(examples, decode)
        for example, row in zip(examples, right, strict=True):
            for positions in copied_words(example, decode, common):
                hits += all(row[p] for p in positions)
                total += 1
    return hits / total if total else float("nan")
