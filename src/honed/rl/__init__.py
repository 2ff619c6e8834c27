"""Reinforcement on the weights: group advantages, the GRPO objective, the update, the trainer.

`advantages.py` and `loss.py` are the mathematics of a step, `update.py` its micro-batching and
optimizer step, `trainer.py` the order of a step and what its checkpoint holds.
"""
