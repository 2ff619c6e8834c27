"""The gate's modes, its strictness, ties, min_delta, and the small-selection warning."""

from __future__ import annotations

import pytest

from honed.skills.config import GateConfig
from honed.skills.gate import Gate
from honed.skills.rollout import Scores


def gate(**fields) -> Gate:
    return Gate(GateConfig(**fields))


def s(hard: float, soft: float) -> Scores:
    return Scores(hard, soft, 10)


@pytest.mark.parametrize(
    ("mode", "before", "after", "accepted"),
    [
        ("strict", s(0.5, 0.5), s(0.6, 0.1), True),  # hard rose; soft ignored
        ("strict", s(0.5, 0.5), s(0.5, 0.9), False),  # tie on hard is a rejection
        ("strict", s(0.5, 0.5), s(0.4, 1.0), False),
        ("soft", s(0.5, 0.5), s(0.1, 0.6), True),  # soft rose; hard ignored
        ("soft", s(0.5, 0.5), s(0.9, 0.5), False),
        ("mixed", s(0.5, 0.5), s(0.4, 0.7), True),  # 0.5*0.4 + 0.5*0.7 = 0.55 > 0.5
        ("mixed", s(0.5, 0.5), s(0.6, 0.3), False),  # 0.45
    ],
)
def test_modes_accept_only_a_strictly_higher_score(mode, before, after, accepted):
    decision = gate(mode=mode).decide(before, after)
    assert decision.accepted is accepted
    assert decision.to_dict()["mode"] == mode


def test_mixed_weight_and_metric():
    g = gate(mode="mixed", mixed_weight=0.25)
    assert g.metric(s(1.0, 0.0)) == pytest.approx(0.25)
    assert g.decide(s(0.0, 0.5), s(1.0, 0.0)).metric_after == pytest.approx(0.25)


def test_float_noise_is_a_tie_not_an_improvement():
    before = s(0.1 + 0.2, 0.0)
    after = s(0.3, 0.0)
    decision = gate().decide(before, after)
    assert not decision.accepted and "tied" in decision.reason


def test_min_delta_requires_a_margin():
    g = gate(min_delta=0.1)
    assert not g.decide(s(0.5, 0), s(0.55, 0)).accepted
    assert "not more than min_delta" in g.decide(s(0.5, 0), s(0.55, 0)).reason
    assert g.decide(s(0.5, 0), s(0.7, 0)).accepted


def test_tie_break_lets_the_other_score_decide_exact_ties():
    strict = gate(tie_break=True)
    assert strict.decide(s(0.5, 0.5), s(0.5, 0.6)).accepted
    assert not strict.decide(s(0.5, 0.5), s(0.5, 0.5)).accepted
    assert not strict.decide(s(0.5, 0.5), s(0.4, 0.9)).accepted  # hard fell: no tie
    soft = gate(mode="soft", tie_break=True)
    assert soft.decide(s(0.2, 0.5), s(0.3, 0.5)).accepted


def test_disabled_gate_accepts_but_says_what_it_would_have_done():
    decision = gate(enabled=False).decide(s(0.5, 0.5), s(0.1, 0.1))
    assert decision.accepted
    assert "would have rejected" in decision.reason
    assert gate(enabled=False).compare(s(0.5, 0.5), s(0.1, 0.1))[0] is False


def test_resolution_note_only_for_small_strict_selections():
    assert "steps of 0.100" in gate().resolution_note(10)
    assert gate().resolution_note(200) is None
    assert gate(tie_break=True).resolution_note(10) is None
    assert gate(mode="mixed").resolution_note(10) is None
