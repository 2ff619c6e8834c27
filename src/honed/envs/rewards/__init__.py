"""Reward functions for the environments that take them (`dataset`, `tools`): several, weighted,
TRL's signature, async with a time limit (`functions.py`), and two built-ins: `llm_judge`
(`judge.py`) and `reward_model` (`reward_model.py`)."""

from honed.envs.rewards.functions import BUILTINS, Rewarded, RewardSet

__all__ = ["BUILTINS", "RewardSet", "Rewarded"]
