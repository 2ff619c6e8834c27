"""Group-relative advantages.

GRPO's baseline is the mean reward of the item's own group, never the batch's: an easy item's
completions must compete with each other, not with a hard item's. The unit that carries a reward
is normally a trajectory; when an environment gives credit per call (segment rewards, as the
memory agent does), every segment of the group is a unit and all of them share the group's
statistics, which is Mem-α's grouping of all chunk samples of one instance.
"""

from __future__ import annotations

from typing import get_args

import torch

from honed.config import ScaleRewards
from honed.rewards.units import GroupUnits, group_units  # re-exported: they lived here

__all__ = [
    "SCALE_REWARDS",
    "STD_EPS",
    "GroupUnits",
    "compute_advantages",
    "group_std",
    "group_units",
]

SCALE_REWARDS: tuple[str, ...] = get_args(ScaleRewards)

# Added to the standard deviation: keeps near-constant groups from blowing up under std scaling.
STD_EPS = 1e-4


def group_std(rewards: torch.Tensor) -> torch.Tensor:
    """Sample standard deviation (n - 1), as TRL computes it; 0 for a single unit."""
    return rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())


def compute_advantages(
    unit_rewards: list[list[float]], scale_rewards: str
) -> tuple[list[list[float]], list[float]]:
    """Advantages for each group's units, and each group's reward standard deviation.

    `scale_rewards`: `group` divides by the group's std (GRPO), `batch` by the std of every unit
    in the batch (Lite PPO's middle ground), `none` only centres (Dr. GRPO).
    """
    tensors = [torch.tensor(r, dtype=torch.float64, device="cpu") for r in unit_rewards]
    stds = [float(group_std(t)) for t in tensors]
    batch_std = None
    if scale_rewards == "batch":
        flat = torch.cat(tensors) if tensors else torch.zeros(0, dtype=torch.float64, device="cpu")
        batch_std = float(group_std(flat))
    out = []
    for t, std in zip(tensors, stds, strict=True):
        centred = t - t.mean()
        if scale_rewards == "group":
            centred = centred / (std + STD_EPS)
        elif scale_rewards == "batch":
            centred = centred / (batch_std + STD_EPS)
        elif scale_rewards != "none":
            raise ValueError(
                f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}, not {scale_rewards!r}"
            )
        out.append(centred.tolist())
    return out, stds
