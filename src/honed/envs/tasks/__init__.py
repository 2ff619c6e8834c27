"""The embedded verifiable tasks, each with difficulty levels and a reference solver."""

from honed.envs.tasks.addition import AdditionEnv
from honed.envs.tasks.arithmetic import ArithmeticEnv
from honed.envs.tasks.base import Problem, TaskEnv
from honed.envs.tasks.countdown import CountdownEnv
from honed.envs.tasks.strings import ReverseEnv, SortEnv

__all__ = [
    "AdditionEnv",
    "ArithmeticEnv",
    "CountdownEnv",
    "Problem",
    "ReverseEnv",
    "SortEnv",
    "TaskEnv",
]
