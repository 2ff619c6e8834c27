"""A run directory is data, never instructions.

Commands that take a run directory (`honed eval RUN`, `honed skills eval --run-dir RUN`) used
to act on the run's own `config.yaml`: a shared run could make honed import a module shipped
inside it (an environment `type: module:Class`, a reward `file.py:function`), contact any host
(`base_url`), and send the value of any environment variable there as a bearer token
(`api_key_env`). Now a run's config is used only when it reaches nothing outside honed (built-in
environments, no code to import, no host to contact), or when the user passes
`--trust-run-config` after being told what it reaches; a config the user names with `--config`
is theirs and used as it is. Keys are never sent on the strength of a run's config: its
`api_key_env` entries are dropped, with a note.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel

from honed.config import load_model
from honed.errors import HonedDeprecationWarning, HonedError

ModelT = TypeVar("ModelT", bound=BaseModel)

# `package.module:name` or `path/to/file.py:name`: what `honed.user_code.load_object` imports
_IMPORT_SPEC = re.compile(r"^(?:[A-Za-z_][\w.]*|[^\s:]+\.py):[A-Za-z_][\w.]*$")


@dataclass
class Reach:
    """What acting on a config would do outside honed itself."""

    imports: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        if self.imports:
            parts.append(f"import and run {', '.join(self.imports)}")
        if self.hosts:
            parts.append(f"contact {', '.join(self.hosts)}")
        if self.secrets:
            parts.append(f"send the environment variable {', '.join(self.secrets)} as a key")
        return "; ".join(parts)


def reach(data: Any) -> Reach:
    """Every import spec, host and key name in a raw config (walked whole, so an environment's
    own arguments count as much as the sections honed knows)."""
    found = Reach()
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((str(k), v) for k, v in value.items())
            loaded = _verifiers_module(value)
            if loaded is not None:
                found.imports.append(loaded)
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)
        elif isinstance(value, str):
            if key == "api_key_env" and value:
                found.secrets.append(value)
            elif value.startswith(("http://", "https://")):
                found.hosts.append(urlparse(value).netloc or value)
            elif _IMPORT_SPEC.match(value):
                found.imports.append(value)
    for name in ("imports", "hosts", "secrets"):
        setattr(found, name, sorted(set(getattr(found, name))))
    return found


def _verifiers_module(entry: dict[Any, Any]) -> str | None:
    """What a `type: verifiers` environment entry imports: its `env` (a package, module or
    `.py` file whose `load_environment` runs), which names no `module:function` to match."""
    kind = entry.get("type") or entry.get("name")
    args = entry.get("args")
    if kind != "verifiers" or not isinstance(args, dict) or not isinstance(args.get("env"), str):
        return None
    return f"the verifiers environment {args['env']}"


def _drop_key_names(data: Any) -> None:
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "api_key_env" in value:
                value["api_key_env"] = None
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def load_run_config(
    model: type[ModelT],
    path: Path,
    overrides: list[str] | None,
    trust: bool,
    note=print,
) -> ModelT:
    """A run directory's own config, if it may be used (see the module docstring)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise HonedError(f"{path}: cannot read the run's config ({exc})".splitlines()[0]) from exc
    found = reach(raw)
    if (found.imports or found.hosts) and not trust:
        raise HonedError(
            f"{path} is the run's own config and would {found.describe()}; honed does not act "
            "on a run directory's config unasked: pass --config FILE (a config you trust) or "
            "--trust-run-config (to use this one; keys are never sent on its word)"
        )
    if found.imports or found.hosts:
        note(
            f"using the run's own config ({path}), as --trust-run-config asks: it will "
            f"{Reach(found.imports, found.hosts).describe()}"
        )
    if found.secrets:
        note(
            f"ignoring api_key_env ({', '.join(found.secrets)}) in the run's own config: keys "
            "are sent only to servers of a config you name with --config"
        )
    with warnings.catch_warnings():
        # a run saved by an earlier honed may use renamed keys; the user did not write it
        warnings.simplefilter("ignore", HonedDeprecationWarning)
        return load_model(model, path, overrides, transform=_drop_key_names)
