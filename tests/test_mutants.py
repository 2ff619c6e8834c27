"""`make mutants` plants each bug of `dev/mutants.py` by replacing a snippet of the source; a
snippet that a refactor moved or reworded would make its mutant a silent no-op. Each must occur
exactly once where the mutant says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("honed_dev_mutants", ROOT / "dev" / "mutants.py")
mutants = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mutants  # its dataclasses look their module up by name
_spec.loader.exec_module(mutants)


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_mutant_snippet_is_in_its_file_once(mutant):
    text = (mutants.SRC / mutant.path).read_text()
    assert text.count(mutant.old) == 1, (
        f"{mutant.path} holds {mutant.old!r} {text.count(mutant.old)} times"
    )
    assert mutant.new != mutant.old
