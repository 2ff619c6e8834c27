"""Config helpers shared by both loops: deprecated keys keep working under their old names."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest


def test_a_renamed_key_still_works_warns_once_and_both_names_at_once_are_an_error():
    from honed.errors import HonedDeprecationWarning, renamed_keys

    with pytest.warns(HonedDeprecationWarning, match=r"'a\.old' is deprecated: use 'a\.new'"):
        out = renamed_keys({"old": 1, "x": 2}, {"old": "new"}, where="a.")
    assert out == {"new": 1, "x": 2} and list(out) == ["new", "x"]  # the key keeps its place
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed_keys({"old": 1}, {"old": "new"}, warn=False) == {"new": 1}
        assert renamed_keys({"new": 1}, {"old": "new"}) == {"new": 1}
        assert renamed_keys([1], {"old": "new"}) == [1]
    with pytest.raises(ValueError, match="'old' is the old name of 'new' and both are given"):
        renamed_keys({"old": 1, "new": 2}, {"old": "new"})


def test_the_command_line_prints_a_deprecation_in_one_line(capsys):
    from honed.cli import _show_deprecation
    from honed.errors import HonedDeprecationWarning

    _show_deprecation("config key 'x' is deprecated", HonedDeprecationWarning, "f.py", 1)
    assert capsys.readouterr().err == "honed: deprecated: config key 'x' is deprecated\n"


def test_importance_sampling_cap_moved_to_trainer_and_its_old_place_still_works(tmp_path):
    """`distributed.importance_sampling_cap` is now `trainer.importance_sampling_cap`, beside
    the other loss settings: either spelling gives the same config, the old one with a
    deprecation warning naming the new one, and both at once are fine when they agree."""
    from tiny_run import write_config

    from honed.config import load_config, moved_keys
    from honed.errors import HonedDeprecationWarning

    moved = (
        r"'distributed\.importance_sampling_cap' is deprecated: "
        r"use 'trainer\.importance_sampling_cap'"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = load_config(None, ["trainer.importance_sampling_cap=3"])
    with pytest.warns(HonedDeprecationWarning, match=moved) as caught:
        old = load_config(None, ["distributed.importance_sampling_cap=3"])
    assert len(caught) == 1
    assert old == new and new.trainer.importance_sampling_cap == 3.0
    assert old.model_dump() == new.model_dump()
    both = {
        "distributed": {"importance_sampling_cap": 3},
        "trainer": {"importance_sampling_cap": 3.0},
    }
    with pytest.warns(HonedDeprecationWarning, match=moved):
        assert load_config(write_config(tmp_path, both)) == new
    # a checkpoint's config from before the move compares equal to today's (resume: no change)
    saved = new.model_dump(mode="json")
    saved["distributed"]["importance_sampling_cap"] = saved["trainer"].pop(
        "importance_sampling_cap"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert moved_keys(saved, warn=False) == new.model_dump(mode="json")


def test_a_moved_key_given_at_both_places_with_different_values_is_a_config_error(tmp_path, capsys):
    from tiny_run import write_config

    from honed.cli import main

    path = write_config(tmp_path)
    both = [
        "-o",
        "distributed.importance_sampling_cap=3",
        "-o",
        "trainer.importance_sampling_cap=4",
    ]
    code = main(["train", str(path), "--dry-run", *both])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"honed: error: {path}: 'distributed.importance_sampling_cap' is the old place of "
        "'trainer.importance_sampling_cap' and both are given, with different values (3 and 4); "
        "keep 'trainer.importance_sampling_cap'"
    ]


def test_the_command_line_prints_one_line_for_the_old_place_of_a_moved_key(tmp_path):
    from tiny_run import write_config

    path = write_config(tmp_path)
    old = ["-o", "distributed.importance_sampling_cap=3"]
    proc = subprocess.run(
        [sys.executable, "-m", "honed", "train", str(path), "--dry-run", *old],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    deprecations = [line for line in proc.stderr.splitlines() if "deprecated" in line]
    assert deprecations == [
        "honed: deprecated: config key 'distributed.importance_sampling_cap' is deprecated: use "
        "'trainer.importance_sampling_cap' (same meaning)"
    ]
    assert not (tmp_path / "run").exists()  # a dry run writes nothing
