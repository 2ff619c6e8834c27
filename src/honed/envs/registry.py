"""Environment types by name, and building one from a config entry.

Built-in types are named by `module:Class` strings and imported only when used, so listing the
registry costs nothing and an environment with heavy dependencies (the memory agent) does not
slow down a run that never uses it. A config may also name a user class directly as
`module:Class` or `path/to/file.py:Class`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from honed.envs.base import Environment
from honed.errors import HonedError, did_you_mean
from honed.reach import ImportSpec
from honed.types import derive_seed
from honed.user_code import load_object

if TYPE_CHECKING:
    from honed.config import EnvConfig

ENVIRONMENTS: dict[str, str | type] = {
    "addition": "honed.envs.tasks:AdditionEnv",
    "arithmetic": "honed.envs.tasks:ArithmeticEnv",
    "reverse": "honed.envs.tasks:ReverseEnv",
    "sort": "honed.envs.tasks:SortEnv",
    "countdown": "honed.envs.tasks:CountdownEnv",
    "dataset": "honed.envs.dataset:DatasetEnv",
    "qa": "honed.envs.qa:QAEnv",
    "memory": "honed.envs.memory:MemoryEnv",
    "tools": "honed.envs.tools:ToolEnv",
    "reasoning_gym": "honed.envs.reasoning_gym:ReasoningGymEnv",
    "verifiers": "honed.envs.verifiers:VerifiersEnv",
}

# Given to every constructor by `build_env` itself, never through `args`.
_SET_BY_RUN = ("name", "seed")


def register(name: str, target: str | type) -> None:
    """Make `name` build `target` (a class, or a lazy `module:Class`); replaces an existing name."""
    ENVIRONMENTS[name] = target


def resolve(type_name: str) -> type:
    """The class for a registered name, `module:Class`, or `path/to/file.py:Class`."""
    if type_name in ENVIRONMENTS:
        target = ENVIRONMENTS[type_name]
    elif ":" in type_name:
        target = type_name
    else:
        raise HonedError(
            f"unknown environment {type_name!r}{did_you_mean(type_name, ENVIRONMENTS)}; "
            f"available: {', '.join(sorted(ENVIRONMENTS))} (or a class as 'module:Class')"
        )
    if isinstance(target, type):
        cls = target
    else:
        cls = load_object(ImportSpec.named(target, "environment"), "environment")
    if not isinstance(cls, type):
        raise HonedError(f"environment {type_name!r} names {cls!r}, which is not a class")
    return cls


def build_env(type_name: str, name: str, seed: int, args: dict[str, Any]) -> Environment:
    """Construct `type_name` as `Class(name, seed=seed, **args)`, checking `args` first.

    The check reads the constructor's signature, so a misspelt or missing argument is reported
    with the environment's name and the arguments it accepts. A constructor taking `**kwargs`
    cannot be checked ahead; a `TypeError` about its arguments becomes the same kind of message.
    """
    cls = resolve(type_name)
    where = f"environment '{name}' ({type_name})"
    accepted = _check_args(cls, where, args)
    try:
        env = cls(name, seed=seed, **args)
    except TypeError as exc:
        if "argument" not in str(exc):
            raise
        raise HonedError(f"{where} rejected its arguments: {exc}; {_listing(accepted)}") from exc
    missing = [m for m in ("name", "items", "rollout", "sft_examples") if not hasattr(env, m)]
    if missing:
        raise HonedError(
            f"{where} does not implement the Environment protocol: missing {', '.join(missing)}"
        )
    return env


def build_envs(entries: Sequence[EnvConfig], seed: int) -> dict[str, Environment]:
    """Every environment of a config's `envs`, by name, each seeded from the run's seed and its
    own name: the GRPO and skill loops build the same items from the same config."""
    return {
        e.name: build_env(e.env_type, e.name, derive_seed(seed, "env", e.name) % 2**31, e.args)
        for e in entries
    }


def _listing(accepted: list[str]) -> str:
    return f"accepted arguments: {', '.join(accepted) or 'none'}"


def _check_args(cls: type, where: str, args: dict[str, Any]) -> list[str]:
    """Reject arguments the constructor cannot take; return the names it does take."""
    for arg in args:
        if arg in _SET_BY_RUN:
            raise HonedError(f"{where}: '{arg}' is set by the run and cannot be given in args")
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # no signature to read: the constructor judges alone
        return []
    accepted = [
        p.name
        for p in parameters
        if p.name not in _SET_BY_RUN and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        for arg in args:
            if arg not in accepted:
                raise HonedError(
                    f"{where} got an unknown argument '{arg}'{did_you_mean(arg, accepted)}; "
                    + _listing(accepted)
                )
    for p in parameters:
        if p.name in accepted and p.default is p.empty and p.name not in args:
            raise HonedError(f"{where} requires the argument '{p.name}'; " + _listing(accepted))
    return accepted
