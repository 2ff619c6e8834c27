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

What the config reaches is read from the *validated* config: every value that imports code or
names a host is parsed there into `honed.reach.ImportSpec` or `honed.reach.Endpoint`, the only
types the loader and the HTTP clients take, and `honed.reach.reached` lists them. Nothing is
imported or contacted while the config is read and validated.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from honed.config import load_model
from honed.errors import HonedDeprecationWarning, HonedError
from honed.reach import reached
from honed.runs.files import read_text

ModelT = TypeVar("ModelT", bound=BaseModel)


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


def reach(config: BaseModel, secrets: list[str] | None = None) -> Reach:
    """The code a validated config imports and the hosts it contacts (each endpoint by its
    whole normalised URL), with the key names `secrets` found in it."""
    imports, endpoints = reached(config)
    return Reach([str(i) for i in imports], [str(e) for e in endpoints], sorted(secrets or []))


def _drop_key_names(data: Any, found: list[str]) -> None:
    """Set every `api_key_env` in raw config data to null, noting the names in `found`."""
    seen: set[int] = set()
    stack = [data]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            name = value.get("api_key_env")
            if name:
                found.append(str(name))
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
    """A run directory's own config, if it may be used (see the module docstring).

    A config that does not validate (a malformed import spec or URL among them) is refused
    like any other, naming the key."""
    secrets: list[str] = []
    with warnings.catch_warnings():
        # a run saved by an earlier honed may use renamed keys; the user did not write it
        warnings.simplefilter("ignore", HonedDeprecationWarning)
        config = load_model(
            model,
            path,
            overrides,
            transform=lambda data: _drop_key_names(data, secrets),
            read=read_text,
        )
    found = reach(config, sorted(set(secrets)))
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
    return config
