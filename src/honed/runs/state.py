"""The trainer state file of a checkpoint (`trainer_state.pt`), read without running code.

A checkpoint is something people share, and `torch.load(weights_only=False)` unpickles anything:
a crafted state file would run code on `--resume`. The state is written with `torch.save` as
plain containers, numbers, strings and tensors only (the NumPy RNG state as lists), and read
with `weights_only=True`, which refuses every other global. Checkpoints written before this
held the NumPy RNG key as an ndarray; the few NumPy globals that rebuild a plain array are
allowed for them (they construct data, not calls), as transformers' Trainer allows them.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from honed.errors import HonedError
from honed.runs.files import no_follow

_multiarray = getattr(np, "_core", None) or np.core  # NumPy 2 renamed np.core to np._core
_NUMPY_ARRAY_GLOBALS = [
    _multiarray.multiarray._reconstruct,
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]


def rng_state() -> dict[str, Any]:
    """Python's, NumPy's and torch's global RNG states, as plain data."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def save_state(state: dict[str, Any], path: Path) -> None:
    torch.save(state, path)


def load_state(path: Path) -> dict[str, Any]:
    """The state in `path`; anything that is not plain data is refused, one line, exit 2."""
    try:
        with (
            torch.serialization.safe_globals(_NUMPY_ARRAY_GLOBALS),
            open(path, "rb", opener=no_follow) as fh,
        ):
            state = torch.load(fh, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        # torch's message is a paragraph of advice; keep the line that says what was refused
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
        detail = next((line for line in lines if "unsupported" in line.lower()), lines[0])
        raise HonedError(
            f"{path}: not a trainer state honed can read safely, nothing in it was run "
            f"({detail.strip()[:200]})"
        ) from None
    if not isinstance(state, dict) or "step" not in state:
        raise HonedError(f"{path}: not a trainer state (expected a dict with a 'step')")
    return state
