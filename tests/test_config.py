"""Config helpers shared by both loops: deprecated keys keep working under their old names."""

from __future__ import annotations

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
