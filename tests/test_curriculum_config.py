"""`curriculum.score: reward` reaches only the strategies that can read a reward (issue 15)."""

from __future__ import annotations

import pytest
from tiny_run import write_config

from honed.cli import main
from honed.config import load_config
from honed.errors import HonedError


def _curriculum(*overrides: str):
    return load_config(None, [f"curriculum.{o}" for o in overrides]).curriculum


@pytest.mark.parametrize(
    ("strategy", "competence", "name"),
    [
        ("frontier", "platanios", "frontier"),
        ("competence_based", "platanios", r"competence_based \(platanios\)"),
    ],
)
def test_a_reward_cannot_drive_a_strategy_that_reads_success_rates(strategy, competence, name):
    overrides = [f"strategy={strategy}", f"competence={competence}", "score=reward"]
    with pytest.raises(HonedError, match=rf"curriculum.score: reward cannot drive .*{name}"):
        _curriculum(*overrides)
    mapped = _curriculum(*overrides, "reward_range=[-1, 2]")
    assert mapped.reward_range == (-1.0, 2.0)


@pytest.mark.parametrize("strategy", ["uniform", "easy_first", "competence_based"])
def test_strategies_that_read_only_ranks_take_a_reward(strategy):
    assert _curriculum(f"strategy={strategy}", "competence=gaussian", "score=reward").score == (
        "reward"
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["score=reward", "reward_range=[1, 0]"], r"reward_range must be \[lo, hi\].*\[1.0, 0.0\]"),
        (["score=reward", "reward_range=[0, .inf]"], "reward_range must be"),
        (["reward_range=[0, 1]"], "applies only with curriculum.score: reward"),
    ],
)
def test_a_bad_reward_range_is_named(overrides, match):
    with pytest.raises(HonedError, match=match):
        _curriculum(*overrides)


def test_the_command_line_refuses_it_with_exit_code_2(tmp_path, capsys):
    path = write_config(tmp_path)
    code = main(
        ["train", str(path), "-o", "curriculum.strategy=frontier", "-o", "curriculum.score=reward"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "curriculum.score: reward cannot drive" in err
    assert "Traceback" not in err


def test_the_strategy_enum_keeps_atroposs_members_and_values():
    """`CurriculumStrategy` is built from the config's list of names; code written for Atropos
    reads its members by name and compares them with strings."""
    from honed.sampling.curriculum import CurriculumStrategy

    assert CurriculumStrategy.UNIFORM == "uniform"
    assert CurriculumStrategy.EASY_FIRST.value == "easy_first"
    assert CurriculumStrategy("competence_based") is CurriculumStrategy.COMPETENCE_BASED
    assert isinstance(CurriculumStrategy.FRONTIER, str)
    assert [s.name for s in CurriculumStrategy] == [
        "UNIFORM",
        "EASY_FIRST",
        "COMPETENCE_BASED",
        "FRONTIER",
    ]
