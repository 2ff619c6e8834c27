"""Supervised warm-start: what the loss covers, with and without the prompt's tokens."""

from __future__ import annotations

import pytest
import torch

from honed.config import PolicyConfig, SFTConfig, TinyModelConfig
from honed.models.policy import Policy
from honed.rl.sft import _batch, run_sft

EXAMPLES = [([1, 10, 11, 12], [20, 21, 2], [1, 1, 1]), ([1, 13], [22, 2], [1, 1])]
# A multi-turn reference: the model's turn, a tool result (mask 0), the model's answer.
TURNS = [([1, 10], [20, 2, 30, 31, 21, 2], [1, 1, 0, 0, 1, 1])]


def test_targets_only_by_default():
    batch, weights = _batch(EXAMPLES, pad_id=0, prompt_weight=0.0)
    assert batch.completion_ids.tolist() == [[20, 21, 2], [22, 2, 0]]
    assert weights.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_masked_target_tokens_are_not_trained_unless_prompts_are():
    _, weights = _batch(TURNS, pad_id=0, prompt_weight=0.0)
    assert weights.tolist() == [[1, 1, 0, 0, 1, 1]]
    _, weights = _batch(TURNS, pad_id=0, prompt_weight=0.25)
    assert weights.tolist() == [[0.25, 1, 1, 0.25, 0.25, 1, 1]]


def test_prompt_tokens_join_the_loss_at_their_weight():
    batch, weights = _batch(EXAMPLES, pad_id=0, prompt_weight=0.25)
    # The first prompt token (BOS) predicts the rest; only it stays on the prompt side.
    assert batch.completion_ids.tolist() == [[10, 11, 12, 20, 21, 2], [13, 22, 2, 0, 0, 0]]
    assert weights.tolist() == [[0.25] * 3 + [1] * 3, [0.25, 1, 1, 0, 0, 0]]
    assert batch.input_ids[:, -6:].tolist() == batch.completion_ids.tolist()


class _Env:
    name = "copy"

    def items(self, split):
        return ["a", "b"]

    def sft_examples(self, item):
        return [(f"say {item}{item}{item} then", f"{item}{item}")]


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_run_sft_trains_with_either_setting(weight):
    cfg = PolicyConfig(
        tiny=TinyModelConfig(
            hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    )
    policy = Policy.from_config(cfg, seed=0)
    before = [p.clone() for p in policy.model.parameters()]
    stats = run_sft(
        policy,
        {"copy": _Env()},
        SFTConfig(steps=3, batch_size=2, prompt_loss_weight=weight),
        seed=0,
    )
    assert stats["sft/steps"] == 3 and stats["sft/examples"] == 2
    assert any(
        not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True)
    )


def test_prompt_loss_weight_is_a_checked_config_key():
    assert SFTConfig().prompt_loss_weight == 0.0
    with pytest.raises(ValueError):
        SFTConfig(prompt_loss_weight=-1)
