"""honed: train LLM agents by reinforcement (GRPO) and by reflection (skill optimisation)."""

__version__ = "0.1.0"
