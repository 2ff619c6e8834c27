"""Opening someone else's run must not run their code, reach outside the run, or leak secrets.

Each test plants what a crafted run directory could hold and checks that honed refuses it with
one clear line (exit code 2) and that nothing happened outside the run.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from tiny_run import write_config

from honed.cli import main
from honed.errors import HonedError
from honed.runs.state import load_state, rng_state, set_rng_state


class _Payload:
    """Unpickling this runs a shell command: what a crafted trainer state would carry."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _train(tmp_path, capsys, *args: str) -> tuple[int, list[str]]:
    config = write_config(tmp_path)
    code = main(["train", str(config), "--quiet", "--run-dir", str(tmp_path / "run"), *args])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_crafted_trainer_state_is_refused_and_runs_nothing(tmp_path, capsys):
    code, _ = _train(tmp_path, capsys, "-o", "trainer.max_steps=1")
    assert code == 0
    [state_file] = (tmp_path / "run" / "checkpoints").glob("step_*/trainer_state.pt")
    state = torch.load(state_file, weights_only=True)
    marker = tmp_path / "pwned"
    state["initial_eval"] = {"accuracy": _Payload(str(marker))}
    torch.save(state, state_file)
    code, err = _train(tmp_path, capsys, "-o", "trainer.max_steps=2", "--resume")
    assert code == 2
    assert len(err) == 1 and str(state_file) in err[0] and "nothing in it was run" in err[0]
    assert "posix.system" in err[0] or "os.system" in err[0]  # names what it refused
    assert not marker.exists()


def test_state_files_hold_plain_data_and_older_numpy_states_still_load(tmp_path):
    """New states load under `weights_only=True` with no allowance at all; a state written
    before (NumPy's RNG key as an ndarray) loads through the NumPy array allowance and restores
    the same RNG streams."""
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    now = rng_state()
    path = tmp_path / "new.pt"
    torch.save({"step": 1, "rng": now}, path)
    torch.load(path, weights_only=True)  # no NumPy globals needed
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    old = {"step": 1, "rng": {**now, "numpy": None}}
    np.random.seed(2)
    old["rng"]["numpy"] = np.random.get_state()
    torch.save(old, tmp_path / "old.pt")
    for name in ("new.pt", "old.pt"):
        random.seed(9), np.random.seed(9), torch.manual_seed(9)
        set_rng_state(load_state(tmp_path / name)["rng"])
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04junk"])
def test_a_damaged_state_file_is_one_error_naming_it(tmp_path, content):
    path = tmp_path / "trainer_state.pt"
    path.write_bytes(content)
    with pytest.raises(HonedError, match=r"trainer_state\.pt: not a trainer state"):
        load_state(path)
