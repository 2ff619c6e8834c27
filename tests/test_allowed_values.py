"""Each set of allowed values is declared once, as a `Literal` in the lowest module that needs it,
and the config fields and the code that acts on a value both read that declaration.

These tests fail when the two fall out of step: a value the config accepts that the code behind
it does not handle (the run would fail after loading), or a field that spells its values out
again instead of naming the declaration.
"""

from __future__ import annotations

import inspect
from typing import get_args

import pytest
import torch

from honed.config import (
    DtypeName,
    KlEstimator,
    LossType,
    LrSchedulerType,
    PolicyConfig,
    RewardNormConfig,
    ScaleRewards,
    SFTConfig,
    TrainerConfig,
)
from honed.models.device import DTYPES
from honed.rewards.normalizer import NormMode, RewardNormalizer
from honed.rl.advantages import compute_advantages
from honed.rl.loss import kl_penalty, token_weights
from honed.rl.schedule import WarmupDecay
from honed.skills.config import EditBudgetConfig
from honed.skills.schedule import _REGISTRY, MODES, ScheduleMode, build_scheduler


@pytest.mark.parametrize(
    ("model", "field", "declared"),
    [
        (TrainerConfig, "loss_type", LossType),
        (TrainerConfig, "scale_rewards", ScaleRewards),
        (TrainerConfig, "kl_estimator", KlEstimator),
        (TrainerConfig, "lr_scheduler_type", LrSchedulerType),
        (SFTConfig, "lr_scheduler_type", LrSchedulerType),
        (RewardNormConfig, "mode", NormMode),
        (EditBudgetConfig, "mode", ScheduleMode),
    ],
)
def test_config_fields_name_the_declaration(model, field, declared):
    assert model.model_fields[field].annotation is declared


def test_every_kl_estimator_is_computed():
    logp = torch.tensor([-1.0, -2.0])
    for name in get_args(KlEstimator):
        assert kl_penalty(logp, logp, name).tolist() == [0.0, 0.0]


def test_every_loss_type_weighs_tokens():
    for name in get_args(LossType):
        (weights,) = token_weights([torch.ones(2)], name, max_completion_length=4)
        assert float(weights.sum()) > 0


def test_every_scale_rewards_value_gives_advantages():
    for name in get_args(ScaleRewards):
        (advantages,), _ = compute_advantages([[0.0, 1.0]], name)
        assert advantages[0] < 0 < advantages[1]


def test_every_lr_scheduler_type_is_a_schedule():
    for name in get_args(LrSchedulerType):
        assert 0 < WarmupDecay(name, warmup=1, total=10)(1) <= 1


def test_every_edit_budget_mode_has_a_scheduler():
    assert tuple(_REGISTRY) == MODES == get_args(ScheduleMode)
    for mode in MODES:
        assert build_scheduler(mode, 4, 2, 10).mode == mode


def test_every_dtype_maps_to_the_torch_dtype_of_its_name():
    assert get_args(PolicyConfig.model_fields["dtype"].annotation) == ("auto", *DTYPES)
    assert tuple(DTYPES) == get_args(DtypeName)
    assert all(DTYPES[name] is getattr(torch, name) for name in DTYPES)


def test_the_reward_normaliser_takes_the_config_section_as_it_is():
    """`RewardNormalizer`'s parameters are `reward_norm`'s keys (its defaults are Atropos's)."""
    assert list(inspect.signature(RewardNormalizer).parameters) == list(
        RewardNormConfig.model_fields
    )
    for mode in get_args(NormMode):
        assert RewardNormalizer(**RewardNormConfig(mode=mode).model_dump()).mode == mode
