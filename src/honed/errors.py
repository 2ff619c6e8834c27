"""The one exception type that reaches a person.

Anything raised as `HonedError` is bad input or a broken external dependency that the user can
fix; the command line prints its message on one line and exits with code 2, without a traceback
unless `--debug` is given. Every other exception is a bug in honed and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
