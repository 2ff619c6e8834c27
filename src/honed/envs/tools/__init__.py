"""The `tools` environment: a dataset of tasks, the user's Python functions as tools, the user's
reward functions; multi-turn episodes through `honed.envs.multiturn`."""

from honed.envs.tools.env import ToolEnv
from honed.envs.tools.functions import Tool, load_tools
from honed.envs.tools.toolbox import ToolBox, ToolResult

__all__ = ["Tool", "ToolBox", "ToolEnv", "ToolResult", "load_tools"]
