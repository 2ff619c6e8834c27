"""Loading skills configs: YAML + overrides, one-line errors, the initial skill, step counts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from honed.config import load_config
from honed.errors import HonedDeprecationWarning, HonedError
from honed.skills.config import load_skills_config
from honed.skills.trainer import build_skill_envs

CHAT = {"base_url": "http://127.0.0.1:8000/v1/", "model": "m"}


def write(tmp_path, **extra):
    data = {"envs": [{"name": "addition"}], "target": CHAT, "reflector": CHAT, **extra}
    path = tmp_path / "skills.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_defaults_and_overrides(tmp_path):
    config = load_skills_config(
        write(tmp_path), ["edit_budget.mode=cosine", "gate.num_items=30", "train.failure_only=true"]
    )
    assert config.edit_budget.mode == "cosine" and config.gate.num_items == 30
    assert config.train.failure_only and config.gate.mode == "strict"
    assert config.target.base_url == "http://127.0.0.1:8000/v1"
    assert config.gate.split == "validation" and config.eval.split == "test"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["gate.mdoe=soft"], "unknown config key 'gate.mdoe' (did you mean 'gate.mode'?)"),
        (["target.modle=x"], "unknown config key 'target.modle' (did you mean 'target.model'?)"),
        (["gate.mode=lenient"], "invalid value for 'gate.mode'"),
        (
            ["edit_budget.mode=linear", "edit_budget.min_lr=9"],
            "edit_budget: min_lr (9) must not exceed max_lr (4)",
        ),
        (["edit_budget.anchor=first"], "invalid value for 'edit_budget.anchor'"),
        (
            ["edit_budget.mode=autonomous", "edit_budget.warmup_steps=2"],
            "edit_budget: warmup_steps",
        ),
    ],
)
def test_errors_are_one_line_and_name_the_key(tmp_path, overrides, message):
    with pytest.raises(HonedError) as info:
        load_skills_config(write(tmp_path), overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_schedule_is_skillopts_unless_the_config_asks_otherwise(tmp_path):
    """The config builds SkillOpt's schedule by default (min_lr 0 allowed, min_lr ignored by
    constant) and honed's earlier one with anchor: both and rounding: half_up."""
    config = load_skills_config(
        write(tmp_path), ["edit_budget.mode=linear", "edit_budget.max_lr=8"]
    )
    assert [config.edit_budget.build(8).get_lr(k) for k in range(1, 9)] == [7, 6, 6, 5, 4, 4, 3, 2]
    earlier = load_skills_config(
        write(
            tmp_path,
            edit_budget={
                "mode": "linear",
                "max_lr": 8,
                "total_steps": 8,
                "anchor": "both",
                "rounding": "half_up",
            },
        )
    )
    assert [earlier.edit_budget.build(100).get_lr(k) for k in range(1, 9)] == [
        8,
        7,
        6,
        5,
        5,
        4,
        3,
        2,
    ]
    zero = load_skills_config(write(tmp_path), ["edit_budget.mode=cosine", "edit_budget.min_lr=0"])
    assert zero.edit_budget.build(4).get_lr(4) == 0
    one = load_skills_config(write(tmp_path), ["edit_budget.max_lr=1"])  # min_lr stays 2
    assert one.edit_budget.build(4).get_lr(1) == 1
    warm = load_skills_config(write(tmp_path), ["edit_budget.warmup_steps=3"])
    with pytest.raises(ValueError, match=r"warmup_steps \(3\) must be less than total_steps \(3\)"):
        warm.edit_budget.build(3)


def test_the_old_key_names_load_to_the_same_config_with_a_deprecation_warning(tmp_path):
    """`optimizer` and `schedule` are the earlier names of `reflector` and `edit_budget`: a
    config that uses them loads to the same settings, with one warning per old key."""
    budget = {"mode": "cosine", "max_lr": 6, "min_lr": 1}
    reflector = {**CHAT, "model": "bigger", "max_tokens": 2048}
    new = tmp_path / "new"
    new.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HonedDeprecationWarning)  # the new names warn of nothing
        current = load_skills_config(write(new, reflector=reflector, edit_budget=budget))
    data = {"envs": [{"name": "addition"}], "target": CHAT, "optimizer": reflector}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({**data, "schedule": budget}))
    with pytest.warns(HonedDeprecationWarning) as caught:
        earlier = load_skills_config(old, ["schedule.max_lr=6"])  # an override may use it too
    assert earlier == current
    assert earlier.reflector.model == "bigger" and earlier.edit_budget.mode == "cosine"
    assert sorted(str(w.message) for w in caught) == [
        "config key 'optimizer' is deprecated: use 'reflector' (same meaning)",
        "config key 'schedule' is deprecated: use 'edit_budget' (same meaning)",
    ]


@pytest.mark.parametrize(
    ("extra", "overrides", "old", "new"),
    [
        ({"optimizer": CHAT}, [], "optimizer", "reflector"),
        ({"edit_budget": {"mode": "linear"}}, ["schedule.max_lr=3"], "schedule", "edit_budget"),
    ],
)
def test_an_old_key_name_with_its_new_one_is_a_one_line_error(tmp_path, extra, overrides, old, new):
    with pytest.raises(HonedError) as info:
        load_skills_config(write(tmp_path, **extra), overrides)
    message = str(info.value)
    assert f"'{old}' is the old name of '{new}' and both are given; keep '{new}'" in message
    assert "\n" not in message


def test_the_old_names_still_read_from_python_with_a_deprecation_warning(tmp_path):
    from honed.skills.config import EditBudgetConfig, ScheduleConfig

    assert ScheduleConfig is EditBudgetConfig
    config = load_skills_config(write(tmp_path))
    with pytest.warns(HonedDeprecationWarning, match=r"SkillsConfig\.optimizer is deprecated"):
        assert config.optimizer is config.reflector
    with pytest.warns(HonedDeprecationWarning, match=r"use SkillsConfig\.edit_budget"):
        assert config.schedule is config.edit_budget
    assert "optimizer" not in config.model_dump() and "schedule" not in config.model_dump()


def test_the_grpo_loader_is_unchanged(tmp_path):
    assert load_config(None, ["trainer.max_steps=3"]).trainer.max_steps == 3
    with pytest.raises(HonedError, match=r"'trainer.max_stpes' \(did you mean 'trainer.max_steps'"):
        load_config(None, ["trainer.max_stpes=3"])


def test_skill_init_is_a_file_or_inline_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "start.md").write_text("# From a file\n")
    assert load_skills_config(write(tmp_path, skill={"init": "start.md"})).skill.initial_text() == (
        "# From a file\n"
    )
    inline = load_skills_config(write(tmp_path, skill={"init": "Answer with a number.md\nmore"}))
    assert inline.skill.initial_text() == "Answer with a number.md\nmore"
    assert load_skills_config(write(tmp_path)).skill.initial_text() == ""
    missing = load_skills_config(write(tmp_path, skill={"init": "nope.md"}))
    with pytest.raises(HonedError, match=r"skill\.init names a file that does not exist: nope\.md"):
        missing.skill.initial_text()


def test_steps_per_epoch_and_max_steps(tmp_path):
    config = load_skills_config(write(tmp_path, train={"batch_size": 16, "epochs": 3}))
    assert config.total_steps(100) == (7, 21)
    capped = load_skills_config(write(tmp_path, train={"max_steps": 5, "steps_per_epoch": 4}))
    assert capped.total_steps(100) == (4, 5)


def test_the_example_config_loads_and_its_dataset_has_every_kind_in_every_split(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    config = load_skills_config("examples/skills_qa.yaml")
    assert "<!-- protected:guidance -->" in config.skill.initial_text()
    (env,) = build_skill_envs(config).values()
    for split in ("train", "validation", "test"):
        kinds = {item.data["kind"] for item in env.items(split)}
        assert kinds == {"units", "dates", "letters", "clock", "percent"}
