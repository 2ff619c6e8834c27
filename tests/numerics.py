"""Comparing floats computed with different batch shapes, on any CPU; and the naive log-probs
that honed's chunked scoring is checked against (`token_logprobs`).

The same model on the same tokens gives log-probs that differ in the last bits when the batch
has another shape: BLAS kernels block and vectorise by shape, and differently on each CPU
vendor (a batch of 24 and two of 12 differ by ~5e-7 on an AMD EPYC and not at all on an Intel
Xeon). Tests therefore assert bit-identity only where the very same computation repeats with
the same shapes (resume against an uninterrupted run, the same micro-batching, the same worker
layout), and use these tolerances where shapes differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

# float32 log-probs of magnitude up to ~10 carry an absolute rounding error of ~1e-6 from a
# reordered sum of a few hundred products; 1e-5 is ten times that and far below any real bug.
LOGPROB_ATOL = 1e-5
# Weights after a few optimizer steps on such log-probs: each tensor's difference, relative to
# its norm. Measured differences are ~2e-8; a wrong gradient moves weights by ~1e-3 relative.
WEIGHTS_RTOL = 1e-5
# The same after AdamW steps at a large learning rate (1e-2): Adam's first steps move every
# element by about the learning rate whatever its gradient's size, so an element whose tiny
# gradient changes sign by rounding moves 2 x lr the other way. Measured ~5e-5 relative; a
# gradient missing one process's share moves tensors by 1e-2 to 0.7 relative.
ADAM_WEIGHTS_RTOL = 1e-3


def assert_logprobs_close(a: Sequence[float], b: Sequence[float]) -> None:
    assert len(a) == len(b)
    diff = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
    assert diff <= LOGPROB_ATOL, f"log-probs differ by {diff}"


def assert_weights_close(
    a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], rtol: float = WEIGHTS_RTOL
) -> None:
    """Every tensor of `a` within `rtol` of `b`'s norm (same keys)."""
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key].double(), b[key].double()
        assert float((x - y).norm()) <= rtol * float(y.norm()), key


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The naive computation: log-probs of `tokens` [B, C] from the whole float32 log-softmax of
    `logits` [B, C, V] tempered, and their entropy. The reference that
    `honed.models.scoring.head_logprobs` is checked against (tests, `bench/memory.py`); training
    never calls it."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
