"""Learning-rate schedules with warm-up, as `torch.optim.lr_scheduler.LambdaLR` multipliers.

A schedule is a setting, not state: on resume it is rebuilt from the config in force and
positioned at the restored step (`build_lr_scheduler(..., start_step=n)`), so that a run
resumed with another `learning_rate`, `lr_scheduler_type`, `warmup_steps` or `max_steps` uses
at every later step exactly the learning rate a run started with that config would use.
"""

from __future__ import annotations

import math
from typing import get_args

import torch

from honed.config import LrSchedulerType

LR_SCHEDULER_TYPES: tuple[str, ...] = get_args(LrSchedulerType)


class WarmupDecay:
    """Linear warm-up over `warmup` steps, then constant, linear or cosine decay to 0 at `total`."""

    def __init__(self, kind: str, warmup: int, total: int) -> None:
        if kind not in LR_SCHEDULER_TYPES:
            raise ValueError(
                f"lr_scheduler_type must be one of {', '.join(LR_SCHEDULER_TYPES)}, not {kind!r}"
            )
        self.kind, self.warmup, self.total = kind, warmup, max(total, 1)

    def __call__(self, step: int) -> float:
        if self.warmup and step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        if self.kind == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        if self.kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, kind: str, warmup: int, total: int, start_step: int = 0
) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule over `total` steps, positioned after `start_step` optimizer steps.

    Each parameter group's peak learning rate is its `lr` at this call (after a resume, the
    config's: see `apply_optimizer_settings`), and its `lr` is set to the schedule's value at
    `start_step`, which is the learning rate of the next optimizer step.
    """
    for group in optimizer.param_groups:
        group["initial_lr"] = group["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupDecay(kind, warmup, total), last_epoch=start_step - 1
    )


def apply_optimizer_settings(
    optimizer: torch.optim.Optimizer, lr: float, weight_decay: float, betas: tuple[float, float]
) -> None:
    """Put the config's settings into every parameter group of a restored optimizer.

    `Optimizer.load_state_dict` restores the groups' hyperparameters with the moments; on
    resume the moments are state but the learning rate, weight decay and betas are settings.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
        group["weight_decay"] = weight_decay
        group["betas"] = betas


def build_optimizer(
    params, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.99)
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, with the fused kernel where torch has one.

    The fused kernel updates each tensor in one pass instead of a dozen elementwise ops
    (`bench/optimizer.py` measures what that saves).
    """
    params = [p for p in params if p.requires_grad]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(
        params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused and bool(params)
    )
