"""Mem-α: an agent that writes a structured memory from chunks, scored by questions on it.

`MemoryEnv` is the environment; the modules are its parts: `store` (the three-store memory),
`tools` and `parsing` (tool schemas, call formats, never-failing parsing), `prompt`, `data`
(generator and JSONL loader), `retrieval` (BM25 and readers), `rewards`, `baselines`.
"""

from honed.envs.memory.env import GROUPINGS, MemoryEnv

__all__ = ["GROUPINGS", "MemoryEnv"]
