"""Edit-budget schedules: values at the first, middle and last step, rounding, the floor at
min_lr, steps past the end, warm-up, state round trip and invalid arguments."""

from __future__ import annotations

import pytest

from honed.skills.schedule import (
    AUTONOMOUS_BUDGET,
    EditBudgetScheduler,
    build_scheduler,
    clamp_autonomous,
)


def budgets(scheduler: EditBudgetScheduler, n: int) -> list[int]:
    return [scheduler.step() for _ in range(n)]


def test_defaults_are_the_original_interface():
    s = build_scheduler()
    assert (s.mode, s.max_lr, s.min_lr, s.total_steps) == ("constant", 8, 2, 8)
    assert budgets(s, 10) == [8] * 10


def test_linear_first_middle_last_and_past_the_end():
    s = build_scheduler("linear", max_lr=8, min_lr=2, total_steps=8)
    # 8 + (2 - 8) * (k - 1) / 7 for k = 1..8: 8, 7.14, 6.29, 5.43, 4.57, 3.71, 2.86, 2.
    assert budgets(s, 11) == [8, 7, 6, 5, 5, 4, 3, 2, 2, 2, 2]
    s = build_scheduler("linear", max_lr=9, min_lr=1, total_steps=9)
    assert (s.get_lr(1), s.get_lr(5), s.get_lr(9), s.get_lr(100)) == (9, 5, 1, 1)


def test_cosine_first_middle_last_and_past_the_end():
    s = build_scheduler("cosine", max_lr=8, min_lr=2, total_steps=8)
    # 2 + 6 * (1 + cos(pi * (k - 1) / 7)) / 2: 8, 7.70, 6.87, 5.67, 4.33, 3.13, 2.30, 2.
    assert budgets(s, 8) == [8, 8, 7, 6, 4, 3, 2, 2]
    s = build_scheduler("cosine", max_lr=9, min_lr=1, total_steps=9)
    assert (s.get_lr(1), s.get_lr(5), s.get_lr(9), s.get_lr(50)) == (9, 5, 1, 1)
    # Cosine stays high longer than linear early on, then falls faster.
    lin = build_scheduler("linear", max_lr=9, min_lr=1, total_steps=9)
    assert s.get_lr(3) > lin.get_lr(3) and s.get_lr(7) < lin.get_lr(7)


def test_rounding_is_half_up_not_bankers():
    # linear 4 -> 2 over 5 steps: 4, 3.5, 3, 2.5, 2; Python's round() would give 4, 4, 3, 2, 2.
    s = build_scheduler("linear", max_lr=4, min_lr=2, total_steps=5)
    assert budgets(s, 5) == [4, 4, 3, 3, 2]
    # cosine 3 -> 1 over 3 steps: the middle is exactly 2; over 4 steps 3, 2.5, 1.5, 1.
    assert [build_scheduler("cosine", 3, 1, 4).get_lr(k) for k in (1, 2, 3, 4)] == [3, 3, 2, 1]


def test_budget_never_below_min_lr():
    for mode in ("linear", "cosine"):
        s = build_scheduler(mode, max_lr=5, min_lr=3, total_steps=40)
        values = [s.get_lr(k) for k in range(1, 60)]
        assert min(values) == 3 and max(values) == 5
        assert values == sorted(values, reverse=True)  # never increases without warm-up


def test_equal_bounds_is_constant():
    s = build_scheduler("cosine", max_lr=3, min_lr=3, total_steps=6)
    assert budgets(s, 8) == [3] * 8


@pytest.mark.parametrize("total", [1, 0, -3])
@pytest.mark.parametrize("mode", ["constant", "linear", "cosine"])
def test_total_steps_at_most_one_gives_max_lr(mode, total):
    s = build_scheduler(mode, max_lr=6, min_lr=2, total_steps=total)
    assert budgets(s, 3) == [6, 6, 6]


def test_two_steps_goes_straight_to_min():
    assert budgets(build_scheduler("linear", 6, 2, 2), 3) == [6, 2, 2]
    assert budgets(build_scheduler("cosine", 6, 2, 2), 3) == [6, 2, 2]


def test_autonomous_has_no_cap_and_clamps_to_the_pool():
    s = build_scheduler("autonomous")
    assert s.is_autonomous and not build_scheduler("linear").is_autonomous
    assert budgets(s, 3) == [AUTONOMOUS_BUDGET] * 3 == [999] * 3
    assert s.clamp_autonomous(3, 10) == 3
    assert clamp_autonomous(30, 10) == 10
    assert clamp_autonomous(0, 10) == 1
    assert clamp_autonomous(-4, 10) == 1
    assert clamp_autonomous("4", 10) == 4
    assert clamp_autonomous(" 2.5 ", 10) == 3
    assert clamp_autonomous(2.4, 10) == 2
    # Garbage from the LLM means it set no limit: keep the whole pool.
    for garbage in (None, "several", float("nan"), float("inf"), True, [3]):
        assert clamp_autonomous(garbage, 7) == 7
    assert clamp_autonomous(5, 0) == 0


def test_warmup_ramps_from_min_to_max_then_decays():
    s = build_scheduler("linear", max_lr=8, min_lr=2, total_steps=10, warmup_steps=3)
    # Warm-up: 2 + 6 * (k - 1) / 3 for k = 1..3 -> 2, 4, 6; decay 8 -> 2 over steps 4..10.
    assert budgets(s, 12) == [2, 4, 6, 8, 7, 6, 5, 4, 3, 2, 2, 2]
    c = build_scheduler("constant", max_lr=8, min_lr=2, total_steps=10, warmup_steps=2)
    assert budgets(c, 5) == [2, 5, 8, 8, 8]
    cos = build_scheduler("cosine", max_lr=8, min_lr=2, total_steps=6, warmup_steps=5)
    assert budgets(cos, 7) == [2, 3, 4, 6, 7, 8, 8]  # decay phase of one step holds max_lr


def test_get_lr_before_the_first_step_is_the_first_budget():
    s = build_scheduler("linear", 8, 2, 8)
    assert s.get_lr(0) == s.get_lr(-5) == s.get_lr(1) == 8
    assert s.current_step == 0


def test_state_round_trip_continues_the_schedule():
    a = build_scheduler("cosine", max_lr=7, min_lr=1, total_steps=12, warmup_steps=2)
    first = budgets(a, 5)
    state = a.state_dict()
    b = build_scheduler()  # different settings: the state restores them all
    b.load_state_dict(state)
    assert b.state_dict() == state
    assert budgets(b, 9) == budgets(a, 9)
    fresh = build_scheduler("cosine", max_lr=7, min_lr=1, total_steps=12, warmup_steps=2)
    assert first == budgets(fresh, 5)


def test_whole_float_arguments_are_accepted():
    s = build_scheduler("linear", max_lr=8.0, min_lr=2.0, total_steps=8.0)
    assert s.get_lr(1) == 8 and isinstance(s.get_lr(1), int)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "exponential"}, "available modes: constant, linear, cosine, autonomous"),
        ({"mode": "cosin"}, "did you mean 'cosine'"),
        ({"max_lr": 2, "min_lr": 4}, "min_lr (4) must not exceed max_lr (2)"),
        ({"max_lr": 0, "min_lr": 0}, "max_lr must be >= 1"),
        ({"min_lr": 0}, "min_lr must be >= 1"),
        ({"max_lr": 2.5}, "max_lr must be a whole number"),
        ({"max_lr": "8"}, "max_lr must be a whole number"),
        ({"max_lr": True}, "max_lr must be a whole number"),
        ({"total_steps": 4.5}, "total_steps must be a whole number"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        ({"total_steps": 4, "warmup_steps": 4}, "must be less than total_steps"),
        ({"mode": "autonomous", "warmup_steps": 2}, "no meaning in autonomous mode"),
    ],
)
def test_invalid_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError) as info:
        build_scheduler(**kwargs)
    assert message in str(info.value)


def test_load_state_dict_validates():
    s = build_scheduler()
    bad = {**s.state_dict(), "min_lr": 99}
    with pytest.raises(ValueError, match="must not exceed"):
        s.load_state_dict(bad)
    assert s.min_lr == 2  # unchanged after a failed load
