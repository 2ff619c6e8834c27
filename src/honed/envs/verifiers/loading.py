"""Finding verifiers and the user's environment, and refusing what honed cannot drive.

verifiers' API changed between versions: 0.2 and 0.3 have the classic environments this
adapter drives (`vf.SingleTurnEnv`, `vf.MultiTurnEnv`, `vf.ToolEnv`, rubrics; 0.3 keeps them in
`verifiers.legacy`, reachable as `import verifiers as vf`), and 0.4 dropped them for a new stack.
So the installed version is checked before anything is loaded, and a version outside the tested
range is one line that says which one is needed, not an `AttributeError` deep in a rollout.

The environment comes from its own `load_environment(**env_args)`, found the way verifiers finds
it (`vf-name` and `owner/name` are the module `name`; hyphens become underscores) or in a
`.py` file. Constructing a verifiers environment installs SIGINT and SIGTERM handlers of its own;
honed's are put back, so Ctrl-C still stops a run after the step under way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import Any

from packaging.version import InvalidVersion, Version

from honed.config import verifiers_import
from honed.errors import HonedError
from honed.reach import ImportSpec
from honed.user_code import load_object

INSTALL = "pip install 'honed[verifiers]'"
# The versions tested (README, "Bring a verifiers environment"); the extra pins the same range.
TESTED = (Version("0.2.0"), Version("0.4.0"))
TESTED_TEXT = "verifiers>=0.2,<0.4"

# Methods of verifiers' rollout that honed replaces with its own turn loop: an environment that
# overrides one would not behave as written, so it is refused, naming the method.
NOT_DRIVEN = {
    "rollout": "honed runs the turn loop itself (token-exact), so a rollout of its own never runs",
    "get_model_response": "honed samples the policy itself, token by token",
    "get_prompt_messages": "honed continues each turn token-exactly from the previous one, so a "
    "prompt rebuilt another way would need the conversation tokenised again",
    "run_rollout": "honed scores groups with the rubric directly",
    "run_group": "honed scores groups with the rubric directly",
}


def import_verifiers() -> ModuleType:
    """The verifiers package, checked to be a tested version; a one-line error otherwise."""
    try:
        version = Version(metadata.version("verifiers"))
    except metadata.PackageNotFoundError:
        raise HonedError(
            f"the verifiers environment needs the verifiers package: {INSTALL}"
        ) from None
    except InvalidVersion as exc:
        raise HonedError(f"verifiers has an unreadable version ({exc}); {INSTALL}") from None
    if not TESTED[0] <= version < TESTED[1]:
        raise HonedError(
            f"verifiers {version} is installed; honed drives verifiers' classic environments "
            f"(SingleTurnEnv, MultiTurnEnv, ToolEnv), tested with {TESTED_TEXT}: {INSTALL}"
        )
    try:
        import verifiers
    except ImportError as exc:
        raise HonedError(
            f"verifiers {version} is installed but does not import ({exc}); {INSTALL}"
        ) from exc
    return verifiers


def load_environment(where: str, env: ImportSpec | str, env_args: dict[str, Any]) -> Any:
    """The user's environment, built by its own `load_environment(**env_args)`.

    Its module not importable, no `load_environment`, or `load_environment` raising: one error
    naming the environment and the cause. verifiers' own bookkeeping (`env_id`, `env_args`) is
    set as `vf.load_environment` sets it.
    """
    vf = import_verifiers()
    if not isinstance(env, str) or not env.strip():
        raise HonedError(f"{where}: env must name a package, module or .py file, got {env!r}")
    try:
        spec = env if isinstance(env, ImportSpec) else ImportSpec.parse(verifiers_import(env))
        factory = load_object(spec, "verifiers environment")
    except ValueError as exc:
        raise HonedError(f"{where}: env: {exc}") from None
    except HonedError as exc:
        raise HonedError(f"{where}: {exc}") from exc
    if not callable(factory):
        raise HonedError(f"{where}: load_environment in '{env}' is not callable")
    built = _keeping_signal_handlers(lambda: _call(where, env, factory, env_args))
    if not isinstance(built, vf.Environment):
        raise HonedError(
            f"{where}: load_environment in '{env}' returned {type(built).__name__}, not a "
            "verifiers Environment"
        )
    built.env_id = built.env_id or spec.target
    built.env_args = built.env_args or dict(env_args)
    check_driven(where, built, vf)
    return built


def _call(where: str, env: str, factory: Callable[..., Any], env_args: dict[str, Any]) -> Any:
    try:
        return factory(**env_args)
    except Exception as exc:  # the user's code failing is their error to read, in one line
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise HonedError(f"{where}: load_environment in '{env}' raised {reason}") from exc


def _keeping_signal_handlers(build: Callable[[], Any]) -> Any:
    """`build()`, with the process's SIGINT and SIGTERM handlers as they were before it.

    Handlers can only be set from the main thread (a Ray actor or a test thread builds
    environments elsewhere, where verifiers' own `signal.signal` would fail just the same)."""
    if threading.current_thread() is not threading.main_thread():
        return build()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return build()
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def check_driven(where: str, env: Any, vf: ModuleType) -> None:
    """Refuse an environment honed would not run as written: one that is not a `MultiTurnEnv`
    (its own `rollout` drives everything), one that overrides a method of the rollout honed
    replaces, or one whose rubric computes its own advantages."""
    if not isinstance(env, vf.MultiTurnEnv):
        raise HonedError(
            f"{where}: {type(env).__name__} is not a verifiers MultiTurnEnv (SingleTurnEnv, "
            "ToolEnv and MultiTurnEnv subclasses are); its rollout is its own, and honed "
            "drives MultiTurnEnv's turns itself"
        )
    for method, why in NOT_DRIVEN.items():
        mine = getattr(type(env), method, None)
        base = getattr(vf.MultiTurnEnv, method, None)
        if mine is not None and mine is not base:
            owner = next(c for c in type(env).__mro__ if method in vars(c))
            raise HonedError(
                f"{where}: {owner.__name__} overrides {method}, which honed does not call: {why}"
            )
    if env.provides_advantages:
        raise HonedError(
            f"{where}: its rubric computes advantages of its own (has_advantages), which honed "
            "does not use: GRPO computes them from the rewards"
        )
