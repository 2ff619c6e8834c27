"""The one exception type that reaches a person, and the checks that phrase input for them.

Anything raised as `HonedError` is bad input or a broken external dependency that the user can
fix; the command line prints its message on one line and exits with code 2, without a traceback
unless `--debug` is given. Every other exception is a bug in honed and keeps its traceback.

The helpers below are here, in the lowest module, so that every layer words the same problem
the same way: 'did you mean', a count that must be a positive integer, and a name (config key,
argument, attribute) that was renamed and still works under its old name.
"""

from __future__ import annotations

import difflib
import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from typing import Any


class HonedError(Exception):
    """A problem with the user's input, data, or servers, described for a person."""


class HonedDeprecationWarning(FutureWarning):
    """A config key, argument or name that still works under its old name and will not forever.

    A `FutureWarning`, so Python shows it by default (unlike `DeprecationWarning`, which it
    hides outside `__main__`); the command line prints it as one line, `honed: deprecated: ...`.
    """


def closest(name: str, options: Iterable[str]) -> str | None:
    """The option most similar to `name`, for 'did you mean' hints."""
    matches = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return matches[0] if matches else None


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' or an empty string."""
    hit = closest(name, options)
    return f" (did you mean '{hit}'?)" if hit else ""


def positive_int(where: str, name: str, value: Any) -> int:
    """`value` if it is a whole number of at least 1, else a `HonedError` naming `where` (the
    environment or reward that takes the argument) and the argument `name`. A `bool` is an
    `int` to Python, but `max_turns: true` is a mistake, not 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HonedError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def finite_number(where: str, name: str, value: Any) -> float:
    """`value` as a float if it is a finite real number, else a `HonedError` naming `where` and
    the argument `name` (a weight given as text would otherwise fail mid-run, in arithmetic;
    `true` is a mistake, not 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise HonedError(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)


def warn_renamed(old: str, new: str, stacklevel: int = 1) -> None:
    """One `HonedDeprecationWarning`: `old` still works and means what `new` does. Both are
    named as the message shows them (`config key 'optimizer'`, `SkillsConfig.optimizer`);
    `stacklevel` counts from the caller (1: the caller's line), as `warnings.warn` does."""
    warnings.warn(
        f"{old} is deprecated: use {new} (same meaning)",
        HonedDeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def renamed_keys(
    data: Any,
    renames: Mapping[str, str],
    where: str = "",
    warn: bool = True,
    *,
    what: str = "config key",
    stacklevel: int = 1,
) -> Any:
    """`data` with each deprecated key of `renames` (old -> new) moved to its new name, and one
    `warn_renamed` per old key found (none with `warn=False`, for a run's own saved config).
    Giving both names is a `ValueError`: which value was meant is not known.

    The one renaming mechanism: config sections (in a pydantic `model_validator(mode="before")`,
    where `where` is the section's dotted prefix) and environments' keyword arguments
    (`what="memory env argument"`) both go through it. Anything but a mapping passes through
    unchanged. `stacklevel` counts from the caller, as in `warn_renamed`.
    """
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise ValueError(
                f"'{where}{old}' is the old name of '{where}{new}' and both are given; keep "
                f"'{where}{new}'"
            )
        if warn:
            warn_renamed(f"{what} '{where}{old}'", f"'{where}{new}'", stacklevel + 1)
        out = {(new if key == old else key): value for key, value in out.items()}
    return out
