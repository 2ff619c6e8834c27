"""Edit-budget schedules: SkillOpt's values at every step by default (brute force against the
formulas written out here), honed's options (anchor, rounding, warm-up) only when asked for,
SkillOpt's class names and subclassing, the position-only state, and invalid arguments."""

from __future__ import annotations

import math

import pytest

from honed.skills import schedule as schedule_module
from honed.skills.schedule import (
    NO_LIMIT,
    AutonomousScheduler,
    ConstantScheduler,
    CosineScheduler,
    LinearScheduler,
    LRScheduler,
    build_scheduler,
    clamp_autonomous,
)

CLASSES = {"constant": ConstantScheduler, "linear": LinearScheduler, "cosine": CosineScheduler}


def skillopt(mode: str, max_lr: int, min_lr: int, total: int, step: int) -> int:
    """SkillOpt's budget of `step`, from its formulas: t = min(step, T) / T, Python's round()
    (half to even), never below min_lr; a schedule of at most one step gives max_lr."""
    if mode == "constant" or total <= 1:
        return max_lr
    t = min(step, total) / total
    if mode == "linear":
        lr = max_lr + (min_lr - max_lr) * t
    else:
        lr = min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * t))
    return max(min_lr, round(lr))


def honed_before(mode: str, hi: int, lo: int, total: int, warm: int, step: int) -> int:
    """honed's budget before it matched SkillOpt: a warm-up from lo at step 1 reaching hi at
    step warm + 1, then progress p = (step - warm - 1) / (total - warm - 1) from hi to lo,
    rounded half up, never below lo; steps outside 1..total clamp to it."""
    if total <= 1:
        return hi
    step = min(max(step, 1), total)
    if step <= warm:
        value = lo + (hi - lo) * (step - 1) / warm
    elif mode == "constant" or total - warm <= 1:
        value = hi
    else:
        p = (step - warm - 1) / (total - warm - 1)
        value = (
            hi + (lo - hi) * p
            if mode == "linear"
            else lo + (hi - lo) * (1 + math.cos(p * math.pi)) / 2
        )
    return max(lo, math.floor(value + 0.5))


def budgets(scheduler: LRScheduler, n: int) -> list[int]:
    return [scheduler.step() for _ in range(n)]


@pytest.mark.parametrize("mode", ["constant", "linear", "cosine"])
def test_every_budget_is_skillopts_by_default(mode):
    checked = 0
    for max_lr in range(13):
        for min_lr in range(max_lr + 1):
            for total in range(21):
                built = build_scheduler(mode, max_lr, min_lr, total)
                direct = CLASSES[mode](max_lr=max_lr, min_lr=min_lr, total_steps=total)
                expected = [skillopt(mode, max_lr, min_lr, total, k) for k in range(total + 4)]
                assert [built.get_lr(k) for k in range(total + 4)] == expected
                assert budgets(built, total + 3) == budgets(direct, total + 3) == expected[1:]
                checked += len(expected)
    assert checked > 20_000


def test_named_skillopt_schedules():
    assert budgets(build_scheduler("linear", 8, 2, 8), 10) == [7, 6, 6, 5, 4, 4, 3, 2, 2, 2]
    assert budgets(build_scheduler("cosine", 8, 2, 8), 8) == [8, 7, 6, 5, 4, 3, 2, 2]
    # 4 - 2k/4 for k = 1..4: 3.5, 3, 2.5, 2; ties go to the even number.
    assert budgets(build_scheduler("linear", 4, 2, 4), 4) == [4, 3, 2, 2]
    # min_lr = 0 is valid: the last steps may keep no edit at all.
    assert budgets(build_scheduler("linear", 4, 0, 4), 5) == [3, 2, 1, 0, 0]
    assert budgets(build_scheduler(), 9) == [8] * 9  # the defaults: constant 8
    # Constant ignores min_lr, even above max_lr, as SkillOpt does.
    assert budgets(build_scheduler("constant", max_lr=1), 3) == [1, 1, 1]
    assert budgets(build_scheduler("linear", 6, 2, total_steps=1), 3) == [6, 6, 6]
    assert budgets(build_scheduler("cosine", 6, 2, total_steps=-3), 2) == [6, 6]


def test_steps_before_the_first_get_max_lr_never_more():
    s = build_scheduler("linear", 8, 2, 8)
    assert s.get_lr(0) == s.get_lr(-5) == 8 and s.get_lr(1) == 7
    assert s.state_dict() == {"current_step": 0}  # get_lr does not move the schedule


def test_anchor_both_with_half_up_is_honeds_earlier_schedule():
    s = build_scheduler("linear", 8, 2, 8, anchor="both", rounding="half_up")
    assert budgets(s, 9) == [8, 7, 6, 5, 5, 4, 3, 2, 2]
    for mode in ("constant", "linear", "cosine"):
        for hi in range(9):
            for lo in range(hi + 1):
                for total in range(16):
                    for warm in range(max(1, total)):
                        s = build_scheduler(
                            mode, hi, lo, total, warm, anchor="both", rounding="half_up"
                        )
                        got = [s.get_lr(k) for k in range(total + 3)]
                        assert got == [
                            honed_before(mode, hi, lo, total, warm, k) for k in range(total + 3)
                        ], (mode, hi, lo, total, warm)


def test_anchor_and_rounding_are_independent_options():
    # linear 4 -> 2 over 5 steps; anchor both: 4, 3.5, 3, 2.5, 2; anchor last: 3.6, 3.2, 2.8, 2.4, 2
    assert budgets(build_scheduler("linear", 4, 2, 5, anchor="both"), 5) == [4, 4, 3, 2, 2]
    assert budgets(build_scheduler("linear", 4, 2, 5, rounding="half_up"), 5) == [4, 3, 3, 2, 2]
    assert budgets(build_scheduler("linear", 4, 2, 4, rounding="half_up"), 4) == [4, 3, 3, 2]
    both = build_scheduler("cosine", 9, 1, 9, anchor="both")
    assert (both.get_lr(1), both.get_lr(5), both.get_lr(9)) == (9, 5, 1)
    assert (
        build_scheduler("cosine", 9, 1, 9).get_lr(1)
        == 9
        > build_scheduler("linear", 9, 1, 9).get_lr(1)
    )


def test_warmup_then_the_decay_of_a_shorter_schedule():
    s = build_scheduler("linear", 8, 2, 10, warmup_steps=3)
    # Ramp 2 + 6k/3 reaching 8 at step 3, then linear 8 -> 2 as a 7-step schedule.
    assert budgets(s, 12) == [4, 6, 8, 7, 6, 5, 5, 4, 3, 2, 2, 2]
    both = build_scheduler("linear", 8, 2, 10, warmup_steps=3, anchor="both")
    assert budgets(both, 11) == [2, 4, 6, 8, 7, 6, 5, 4, 3, 2, 2]
    assert budgets(build_scheduler("constant", 8, 2, 10, warmup_steps=2), 4) == [5, 8, 8, 8]
    for anchor, start in (("last", 0), ("both", 1)):
        for mode in ("constant", "linear", "cosine"):
            for hi, lo in ((8, 2), (5, 0), (3, 3)):
                for total in range(2, 14):
                    for warm in range(1, total):
                        s = build_scheduler(mode, hi, lo, total, warm, anchor=anchor)
                        decay = build_scheduler(mode, hi, lo, total - warm, anchor=anchor)
                        for k in range(start, warm + start):
                            ramp = lo + (hi - lo) * (k - start) / warm
                            assert s.get_lr(k) == max(lo, round(ramp))
                        for j in range(start, total - warm + 3):
                            assert s.get_lr(warm + j) == decay.get_lr(j)


def test_autonomous_has_no_limit_and_clamps_to_the_pool():
    assert NO_LIMIT == AutonomousScheduler.NO_LIMIT == 999
    s = build_scheduler("autonomous")
    assert isinstance(s, AutonomousScheduler) and s.is_autonomous
    assert not build_scheduler("linear").is_autonomous
    assert budgets(s, 3) == [999] * 3 and s.get_lr(0) == 999
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


def test_skillopt_names_and_subclassing():
    for name in (
        "LRScheduler",
        "ConstantScheduler",
        "LinearScheduler",
        "CosineScheduler",
        "AutonomousScheduler",
        "build_scheduler",
    ):
        assert hasattr(schedule_module, name)
    with pytest.raises(TypeError):
        LRScheduler(8, 2, 8)  # abstract, as in SkillOpt

    class Halving(LRScheduler):
        def _compute_lr(self, step: int) -> int:
            return max(self.min_lr, self.max_lr >> (step - 1))

    s = Halving(max_lr=8, min_lr=1, total_steps=5)
    assert budgets(s, 5) == [8, 4, 2, 1, 1] and s.get_lr(2) == 4
    assert s.state_dict() == {"current_step": 5}
    s.load_state_dict({"current_step": 1})
    assert s.step() == 4
    assert not s.is_autonomous


def test_the_state_is_the_position_and_loads_skillopts():
    s = build_scheduler("linear", 8, 2, 8)
    s.load_state_dict({"current_step": 3})  # as SkillOpt writes it
    assert s.state_dict() == {"current_step": 3}
    assert budgets(s, 2) == [5, 4]  # steps 4 and 5
    # Settings in a state (honed wrote them before) do not override the constructor's.
    s.load_state_dict({"mode": "cosine", "max_lr": 3, "min_lr": 1, "current_step": 2})
    assert (s.max_lr, s.min_lr, s.total_steps) == (8, 2, 8) and s.step() == 6
    # Tolerant, as SkillOpt is: no usable position means the start.
    for state in ({}, {"current_step": None}, {"current_step": "x"}, {"current_step": -4}):
        s.load_state_dict(state)
        assert s.state_dict() == {"current_step": 0}
    s.load_state_dict({"current_step": float("inf")})
    assert s.state_dict() == {"current_step": 0}
    s.load_state_dict({"current_step": "5"})
    assert s.state_dict() == {"current_step": 5}


def test_whole_float_arguments_are_accepted():
    s = build_scheduler("linear", max_lr=8.0, min_lr=2.0, total_steps=8.0)
    assert s.get_lr(8) == 2 and isinstance(s.get_lr(1), int)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "exponential"}, "available modes: constant, linear, cosine, autonomous"),
        ({"mode": "cosin"}, "did you mean 'cosine'"),
        ({"mode": "linear", "max_lr": 2, "min_lr": 4}, "min_lr (4) must not exceed max_lr (2)"),
        ({"mode": "cosine", "max_lr": 2, "min_lr": 4}, "min_lr (4) must not exceed max_lr (2)"),
        ({"max_lr": 2, "min_lr": 4, "warmup_steps": 1}, "min_lr (4) must not exceed max_lr"),
        ({"max_lr": -1, "min_lr": 0}, "max_lr must be >= 0"),
        ({"min_lr": -1}, "min_lr must be >= 0"),
        ({"max_lr": 2.5}, "max_lr must be a whole number"),
        ({"max_lr": "8"}, "max_lr must be a whole number"),
        ({"max_lr": True}, "max_lr must be a whole number"),
        ({"total_steps": 4.5}, "total_steps must be a whole number"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0"),
        ({"total_steps": 4, "warmup_steps": 4}, "must be less than total_steps"),
        ({"mode": "autonomous", "warmup_steps": 2}, "no meaning in autonomous mode"),
        ({"anchor": "first"}, "unknown anchor 'first'; available: last, both"),
        ({"rounding": "half_upp"}, "did you mean 'half_up'"),
    ],
)
def test_invalid_arguments_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError) as info:
        build_scheduler(**kwargs)
    assert message in str(info.value)
