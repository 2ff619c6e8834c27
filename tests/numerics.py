"""Comparing floats computed with different batch shapes, on any CPU.

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

# float32 log-probs of magnitude up to ~10 carry an absolute rounding error of ~1e-6 from a
# reordered sum of a few hundred products; 1e-5 is ten times that and far below any real bug.
LOGPROB_ATOL = 1e-5
# Weights after a few optimizer steps on such log-probs: each tensor's difference, relative to
# its norm. Measured differences are ~2e-8; a wrong gradient moves weights by ~1e-3 relative.
WEIGHTS_RTOL = 1e-5


def assert_logprobs_close(a: Sequence[float], b: Sequence[float]) -> None:
    assert len(a) == len(b)
    diff = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
    assert diff <= LOGPROB_ATOL, f"log-probs differ by {diff}"


def assert_weights_close(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> None:
    """Every tensor of `a` within `WEIGHTS_RTOL` of `b`'s norm (same keys)."""
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key].double(), b[key].double()
        assert float((x - y).norm()) <= WEIGHTS_RTOL * float(y.norm()), key
