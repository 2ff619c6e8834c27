"""Loading the user's own code named in a config: `module:name` or `path/to/file.py:name`
(a parsed `honed.reach.ImportSpec`).

Environments, reward functions and other plug-ins are named by a string in YAML, so every
failure to find them must become a `HonedError` that says which string was wrong and why,
instead of an import traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from honed.errors import HonedError, did_you_mean
from honed.reach import ImportSpec


def load_object(spec: ImportSpec, what: str) -> object:
    """The object that `spec` names; `what` says what it is for messages ("reward function").

    Only a parsed `ImportSpec` is accepted, so what is imported is what a config's validation
    parsed and `honed.reach.reached` lists, never a string read another way here. A `module`
    target is imported from the Python path as it is; when it is not there and the config that
    named it lives in a directory (`spec.base`), from that directory, which is on `sys.path`
    for that import only. The working directory is never added: a `wandb.py` there cannot
    stand in for a missing optional dependency, and a stray `json.py` cannot take over
    `import json`. A `file` target is loaded from that file.
    """
    if not isinstance(spec, ImportSpec):
        raise TypeError(f"load_object takes an ImportSpec (honed.reach), not {type(spec).__name__}")
    if spec.kind == "file":
        module = _import_file(Path(spec.target), what, spec)
    else:
        module = _import_module(spec, what)
    try:
        return getattr(module, spec.attr)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise HonedError(
            f"{what} '{spec}': '{spec.target}' has no attribute '{spec.attr}'"
            f"{did_you_mean(spec.attr, names)}"
        ) from None


def _import_module(spec: ImportSpec, what: str) -> ModuleType:
    top = spec.target.partition(".")[0]
    local = spec.base is not None and top not in sys.modules and _find(top) is None
    where = f"the Python path and {spec.base}" if local else "the Python path"
    try:
        if not local:
            return importlib.import_module(spec.target)
        with _on_path(str(spec.base)):
            return importlib.import_module(spec.target)
    except ModuleNotFoundError as exc:
        raise HonedError(f"cannot import {what} '{spec}': {exc} (looked on {where})") from exc
    except Exception as exc:
        raise HonedError(f"importing {what} '{spec}' raised {type(exc).__name__}: {exc}") from exc


def _find(name: str) -> object | None:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


@contextmanager
def _on_path(directory: str) -> Iterator[None]:
    """`directory` at the end of `sys.path` while the block runs, and off it afterwards."""
    added = directory not in sys.path
    if added:
        sys.path.append(directory)
    try:
        yield
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)


def _import_file(path: Path, what: str, spec: ImportSpec) -> ModuleType:
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
