"""Where a policy runs and in which precision: `policy.device` and `policy.dtype` resolved.

The model, the reference, every batch and every loss tensor live on the policy's device;
environments and rewards stay on the CPU. Nothing in honed branches on CUDA: the device and the
dtype are values passed down, so the CPU tests run the very code a GPU runs (bf16 included).

Precision (README, "Train on a GPU"): the weights are kept in the policy's dtype, and so are the
optimizer's moments (AdamW allocates them like the parameters). In bfloat16 that halves the
memory of weights, gradients and Adam state against float32 (there is no float32 master copy),
at the price of updates smaller than a weight's rounding step being lost. Log-probs are always
computed in float32 from the logits (`honed.models.scoring`), so the ratio π/π_old and the KL
terms do not round in bf16.
For float32 master weights on a GPU, keep `policy.dtype: float32` (and let kernels use TF32).
"""

from __future__ import annotations

import os
import resource
import sys
from typing import get_args

import torch

from honed.config import DtypeName
from honed.errors import HonedError

# The dtypes `policy.dtype` (and a reward model's `dtype`) name, each torch's own of that name.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in get_args(DtypeName)}


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device `policy.device` names.

    `auto` is CUDA when available, else Apple's MPS, else the CPU. In a multi-process run
    (`LOCAL_RANK` set by torchrun) `auto` and a bare `cuda` mean this process's own GPU,
    `cuda:LOCAL_RANK`. A device that is not there is an error naming it. (The config checks
    the spelling: auto, cpu, cuda, cuda:N or mps.)
    """
    local_rank = os.environ.get("LOCAL_RANK")
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda" and local_rank is not None:
        name = f"cuda:{int(local_rank)}"
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if device.index is not None and device.index >= count:
            raise HonedError(
                f"policy.device: {name} is not available (this machine has {count} CUDA "
                "device(s)); use auto or cpu"
            )
        if count == 0:
            raise HonedError("policy.device: cuda, but torch sees no CUDA device; use auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise HonedError("policy.device: mps, but torch sees no MPS device; use auto or cpu")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The torch dtype `policy.dtype` names; `auto` is bfloat16 on a CUDA device that supports
    it and float32 anywhere else (bf16 matmuls on a CPU are slower than float32 ones)."""
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's first parameter (where its inputs must be)."""
    return next(model.parameters()).device


def peak_memory_gb(device: torch.device) -> float:
    """The peak memory of `device` since the last `reset_peak_memory`, in GB (1e9 bytes).

    On an accelerator, its allocator's peak (`torch.accelerator`'s memory statistics); on the
    CPU, the peak resident memory of this process since it started (Linux reports KiB, macOS
    bytes), which cannot be reset.
    """
    if device.type == "cpu":
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * (1 if sys.platform == "darwin" else 1024) / 1e9
    return torch.accelerator.max_memory_allocated(device) / 1e9


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak for `peak_memory_gb` (each training step logs its own)."""
    if device.type != "cpu":
        torch.accelerator.reset_peak_memory_stats(device)
