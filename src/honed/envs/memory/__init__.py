"""Mem-α: an agent that writes a structured memory from chunks, scored by questions on it.

`MemoryEnv` is the environment; the modules are its parts: `store` (the three-store memory),
`tools` and `parsing` (tool schemas, call formats, never-failing parsing), `prompt`, `data`
(generator and JSONL loader), `formats` (Mem-α's and MemoryAgentBench's data on disk),
`retrieval` (BM25 and readers), `metrics` (per-data-set scoring), `rewards`, `baselines`,
`report` (the evaluation table).
"""

from honed.envs.memory.env import GROUPINGS, MemoryEnv

__all__ = ["GROUPINGS", "MemoryEnv"]
