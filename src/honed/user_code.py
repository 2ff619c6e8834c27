"""Loading the user's own code named in a config: `module:name` or `path/to/file.py:name`.

Environments, reward functions and other plug-ins are named by a string in YAML, so every
failure to find them must become a `HonedError` that says which string was wrong and why,
instead of an import traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from honed.errors import HonedError, did_you_mean


def load_object(spec: str, what: str) -> object:
    """The object that `spec` names; `what` says what it is for messages ("reward function").

    A `module` target is imported with the current working directory on `sys.path` (so a
    `reward.py` next to the config just works), at the end of it: a file in the directory
    cannot shadow an installed or standard module (a stray `json.py` taking over `import json`
    for the whole process). A target ending in `.py` or containing a path separator is loaded
    from that file.
    """
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise HonedError(f"{what} '{spec}' must look like 'module:name' or 'path/to/file.py:name'")
    if target.endswith(".py") or "/" in target or os.sep in target:
        module = _import_file(Path(target), what, spec)
    else:
        module = _import_module(target, what, spec)
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise HonedError(
            f"{what} '{spec}': '{target}' has no attribute '{attr}'{did_you_mean(attr, names)}"
        ) from None


def _import_module(target: str, what: str, spec: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise HonedError(
            f"cannot import {what} '{spec}': {exc} (looked on the Python path and in {cwd})"
        ) from exc
    except Exception as exc:
        raise HonedError(f"importing {what} '{spec}' raised {type(exc).__name__}: {exc}") from exc


def _import_file(path: Path, what: str, spec: str) -> ModuleType:
    """Import a file once per absolute path, under a private module name.

    The module is put in `sys.modules` so that loading the same file twice gives the same
    objects (a class registered twice stays one class), and so that code which looks a module up
    by name while it runs (dataclasses, pickle) finds it.
    """
    if not path.is_file():
        raise HonedError(f"{what} '{spec}': file not found: {path}")
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    name = f"honed_user_{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise HonedError(f"{what} '{spec}': cannot load {path} as Python code")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise HonedError(f"importing {what} '{spec}' raised {type(exc).__name__}: {exc}") from exc
    return module
