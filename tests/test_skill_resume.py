"""Resuming a skill run: which settings changed (one line each), and which changes cannot apply
to a run in progress (refused with a one-line error naming the key)."""

from __future__ import annotations

import pytest

from honed.errors import HonedError
from honed.skills.resume import Change, check_changes, config_changes

BEFORE = {
    "seed": 0,
    "run_dir": "runs/a",
    "envs": [{"name": "qa", "type": "qa", "weight": 1.0, "args": {"path": "a.jsonl"}}],
    "skill": {"init": "# Skill\n", "preamble": "Read it."},
    "train": {"epochs": 2, "batch_size": 8, "max_steps": 4, "steps_per_epoch": None},
    "edit_budget": {"mode": "cosine", "max_lr": 4, "anchor": "last", "rounding": "half_even"},
    "gate": {"split": "validation", "num_items": None, "mode": "strict"},
    "curriculum": {"strategy": "uniform", "n_bins": 5},
}


def changed(**sections: dict) -> dict:
    return {**BEFORE, **{name: {**BEFORE[name], **values} for name, values in sections.items()}}


def test_changes_are_listed_key_by_key_and_item_by_item():
    after = changed(
        edit_budget={"mode": "linear"},
        train={"max_steps": 8, "steps_per_epoch": 3},
        gate={"mode": "soft"},
    )
    after["envs"] = [{**BEFORE["envs"][0], "weight": 2.0, "args": {"path": "b.jsonl"}}]
    after["run_dir"] = "runs/b"  # where the run is written is not a setting
    assert [str(c) for c in config_changes(BEFORE, after)] == [
        "envs.0.weight: 1.0 -> 2.0",
        "envs.0.args.path: a.jsonl -> b.jsonl",
        "train.max_steps: 4 -> 8",
        "train.steps_per_epoch: null -> 3",
        "edit_budget.mode: cosine -> linear",
        "gate.mode: strict -> soft",
    ]
    assert config_changes(BEFORE, BEFORE) == []
    two = [*BEFORE["envs"], {**BEFORE["envs"][0], "name": "qa2"}]
    assert config_changes(BEFORE, {**BEFORE, "envs": two}) == [Change("envs", BEFORE["envs"], two)]


def test_long_or_multiline_values_are_cut_to_one_line():
    line = str(Change("skill.init", "# Skill\n" + "- rule\n" * 20, "x"))
    assert line.startswith('skill.init: "# Skill\\n- rule\\n') and line.endswith(" -> x")
    assert "\n" not in line and len(line) < 90


def test_a_run_from_before_anchor_and_rounding_compares_as_honeds_earlier_schedule():
    earlier = {**BEFORE, "edit_budget": {"mode": "cosine", "max_lr": 4}}
    assert [str(c) for c in config_changes(earlier, BEFORE)] == [
        "edit_budget.anchor: both -> last",
        "edit_budget.rounding: half_up -> half_even",
    ]
    same = {**BEFORE["edit_budget"], "anchor": "both", "rounding": "half_up"}
    assert config_changes(earlier, {**BEFORE, "edit_budget": same}) == []


def old_names(config: dict) -> dict:
    """`config` saved as honed wrote it before `reflector` and `edit_budget` were renamed."""
    old = {"reflector": "optimizer", "edit_budget": "schedule"}
    return {old.get(key, key): value for key, value in config.items()}


def test_a_run_saved_with_the_old_key_names_compares_under_the_new_ones(recwarn):
    reflecting = {**BEFORE, "reflector": {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}}
    assert config_changes(old_names(reflecting), reflecting) == []
    assert [
        str(c) for c in config_changes(old_names(BEFORE), changed(edit_budget={"max_lr": 6}))
    ] == ["edit_budget.max_lr: 4 -> 6"]
    # ... and as from before `anchor` and `rounding`, when the old section lacks them too
    earlier = old_names({**BEFORE, "edit_budget": {"mode": "cosine", "max_lr": 4}})
    assert [str(c) for c in config_changes(earlier, BEFORE)] == [
        "edit_budget.anchor: both -> last",
        "edit_budget.rounding: half_up -> half_even",
    ]
    assert not recwarn.list  # the run's own file: no deprecation message


def check(after: dict, steps_done: int = 2, epochs=(3, 3), total: int = 4) -> None:
    check_changes(config_changes(BEFORE, after), steps_done, epochs, total)


def test_settings_that_can_apply_pass():
    check(
        changed(
            edit_budget={"mode": "linear", "max_lr": 9},
            train={"max_steps": 8},
            gate={"mode": "mixed"},
            skill={"preamble": "Follow it."},
        ),
        total=8,
    )
    after = changed()
    after["envs"] = [{**BEFORE["envs"][0], "weight": 3.0, "args": {"path": "b.jsonl"}}]
    check(after)
    check(changed(train={"batch_size": 4}), steps_done=0, epochs=(3, 6))  # nothing done yet
    check(BEFORE, steps_done=4, epochs=(None, 5))  # an earlier honed's state


@pytest.mark.parametrize(
    ("after", "key", "why"),
    [
        (changed(skill={"init": "other.md"}), "skill.init", "initial skill is version 1"),
        (
            {**BEFORE, "envs": [{**BEFORE["envs"][0], "name": "qa2"}]},
            "envs.0.name",
            "sampler's state",
        ),
        ({**BEFORE, "envs": [{**BEFORE["envs"][0], "type": "dataset"}]}, "envs.0.type", "sampler"),
        ({**BEFORE, "envs": [*BEFORE["envs"], *BEFORE["envs"]]}, "envs", "sampler's state"),
        (changed(gate={"split": "test"}), "gate.split", "measured on the run's selection items"),
        (changed(gate={"num_items": 5}), "gate.num_items", "selection items"),
    ],
)
def test_settings_fixed_for_a_run_in_progress_are_refused(after, key, why):
    with pytest.raises(HonedError) as info:
        check(after, steps_done=0)
    message = str(info.value)
    assert message.startswith(f"{key} cannot change when resuming ({key}: ")
    assert why in message and "start a new run" in message and "\n" not in message


def test_the_steps_per_epoch_are_fixed_once_a_step_is_done():
    with pytest.raises(HonedError, match=r"^train\.batch_size cannot change .* \(train\.batch_"):
        check(changed(train={"batch_size": 4}), epochs=(3, 6))
    with pytest.raises(HonedError, match=r"epochs of 2 steps instead of 3.*steps_per_epoch: 3 to"):
        check(changed(train={"steps_per_epoch": 2}), epochs=(3, 2))
    # Changed by the environments' data: named by the argument that changed, else by its own key.
    more = changed()
    more["envs"] = [{**BEFORE["envs"][0], "weight": 2.0, "args": {"path": "b.jsonl"}}]
    with pytest.raises(HonedError, match=r"^envs\.0\.args\.path cannot change .*: a.jsonl -> b"):
        check(more, epochs=(3, 4))
    with pytest.raises(HonedError, match=r"^train\.steps_per_epoch cannot change .*: 3 -> 4\)"):
        check(BEFORE, epochs=(3, 4))


def test_a_run_cannot_become_shorter_than_its_steps_so_far():
    with pytest.raises(HonedError, match=r"^train\.max_steps cannot .* run of 3 steps .* done 4"):
        check(changed(train={"max_steps": 3}), steps_done=4, total=3)
    with pytest.raises(HonedError, match=r"^train\.epochs cannot change"):
        check(changed(train={"epochs": 1}), steps_done=4, total=3)
    # An earlier honed's state whose training data shrank: no setting to name.
    with pytest.raises(HonedError, match=r"^the run's length cannot change when resuming: the"):
        check(BEFORE, steps_done=4, epochs=(None, 1), total=3)
    check(changed(train={"max_steps": 3}), steps_done=3, total=3)  # stops right here
