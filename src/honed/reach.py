"""The two ways a config reaches outside honed: code to import, hosts to contact.

Each is a type, and each string of a config that names one is parsed into it once, at
validation, by one parser: `ImportSpec` (`module:name`, `path/to/file.py:name`) and `Endpoint`
(an `http://` or `https://` URL). The loader (`honed.user_code.load_object`) and the HTTP
clients (`honed.models.chat.ChatClient`, the Atropos client) take only these parsed values, so
what a config can make honed import or contact is exactly the values of these two types in the
validated config: `reached` walks them, and `honed.runs.trust` shows that list before a run
directory's own config is used. A string another part of honed would read differently (a space
around it, another spelling of a host, bytes, a `.pyc` file) does not parse: it is refused,
never tidied into something else.

Both are `str` subclasses whose text is the normalised value, so code that reads a config's
strings works unchanged, and what is shown, checked and used is one string.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, GetCoreSchemaHandler, ValidationInfo
from pydantic_core import core_schema

from honed.errors import HonedError

# ASCII identifiers only: Python also accepts others, normalised (NFKC), so that two spellings
# would name one attribute; a config gets one spelling.
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*")
_ATTRIBUTE = re.compile(_IDENTIFIER)
# A file's path: ASCII letters, digits and `._-/~`, no spaces, no `:`; ends in `.py`.
_FILE = re.compile(r"[A-Za-z0-9._~/-]*[A-Za-z0-9_-]\.py")

# A validation context key (`load_model` sets it): the directory of the config file, where a
# module the config names is looked for when it is not installed.
CONFIG_DIR = "config_dir"


def _schema(cls: type, parse: Any) -> core_schema.CoreSchema:
    """A pydantic schema for a parsed `str` subclass: an instance passes as it is (a value
    parsed at validation and validated again where it is used keeps what it knew), a `str` is
    parsed (bytes are refused, not decoded: `!!binary` is no way around the parser), and it is
    written back as its normalised text."""

    def validate(value: Any, handler: Any, info: ValidationInfo) -> Any:
        if isinstance(value, cls):
            return value
        text = handler(value)
        try:
            return parse(text, info.context)
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    return core_schema.with_info_wrap_validator_function(
        validate,
        core_schema.str_schema(strict=True),
        serialization=core_schema.plain_serializer_function_ser_schema(str),
    )


class ImportSpec(str):
    """`module:name` or `path/to/file.py:name`, parsed (see the module docstring).

    `module` targets are dotted ASCII identifiers; `file` targets end in `.py` and hold no
    spaces or colons; the name is one ASCII identifier. `base` is the directory of the config
    that named a module, where `load_object` looks for it when it is not installed (and only
    there, only for that import); `None` for names honed itself or a Python caller gives.
    """

    shown_as = "module:name"  # in the configuration reference (`honed.config_reference`)
    kind: Literal["module", "file"]
    target: str
    attr: str
    base: Path | None

    @classmethod
    def parse(cls, text: str, base: Path | None = None) -> ImportSpec:
        """`text` as an import spec, or `ValueError` saying what is wrong with it."""
        if not isinstance(text, str):
            raise ValueError(f"an import spec is text ('module:name'), not {type(text).__name__}")
        target, sep, attr = text.rpartition(":")
        if not sep or not target or not attr:
            raise ValueError(f"{text!r} must look like 'module:name' or 'path/to/file.py:name'")
        if not _ATTRIBUTE.fullmatch(attr):
            raise ValueError(f"{text!r}: {attr!r} is not a name (ASCII letters, digits, _)")
        if target.endswith(".py") or "/" in target:
            if not _FILE.fullmatch(target):
                raise ValueError(
                    f"{text!r}: a file must be a path ending in .py, of ASCII letters, digits "
                    "and ._-/~ (no spaces)"
                )
            kind: Literal["module", "file"] = "file"
        elif _MODULE.fullmatch(target):
            kind = "module"
        else:
            raise ValueError(
                f"{text!r}: {target!r} is neither a module (dotted ASCII names) nor a .py file"
            )
        spec = super().__new__(cls, f"{target}:{attr}")
        spec.kind, spec.target, spec.attr = kind, target, attr
        spec.base = Path(base).resolve() if base is not None and kind == "module" else None
        return spec

    @classmethod
    def named(cls, value: Any, what: str) -> ImportSpec:
        """`value` as an import spec (parsed if it is a string), or a `HonedError` naming it
        as `what` ("reward function")."""
        if isinstance(value, cls):
            return value
        try:
            return cls.parse(value)
        except ValueError as exc:
            raise HonedError(f"{what}: {exc}") from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (ImportSpec.parse, (str(self), self.base))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _schema(cls, lambda text, context: cls.parse(text, _config_dir(context)))


def _config_dir(context: Any) -> Path | None:
    return context.get(CONFIG_DIR) if isinstance(context, dict) else None


# A host name: ASCII labels of letters, digits, `-` and `_`, joined by single dots.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# A host every resolver and `inet_aton` reads as an IPv4 address (WHATWG's rule: the last
# label is a number): `127.1`, `0x7f.0.0.1` and `2130706433` are all 127.0.0.1.
_NUMERIC_HOST = re.compile(r"(?:[^.]*\.)*(?:[0-9]+|0x[0-9a-f]*)")
_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*")
_LOOPBACK_NAMES = ("localhost",)


def _host(raw: str, text: str) -> tuple[str, bool]:
    """The canonical spelling of `raw` (a URL's host) and whether it is this machine."""
    if raw.startswith("["):
        if not raw.endswith("]") or "%" in raw:
            raise ValueError(f"{text!r}: {raw!r} is not an IPv6 address in brackets")
        try:
            ip6 = ipaddress.IPv6Address(raw[1:-1])
        except ValueError:
            raise ValueError(f"{text!r}: {raw!r} is not an IPv6 address") from None
        mapped = ip6.ipv4_mapped
        loopback = ip6.is_loopback or (mapped is not None and mapped.is_loopback)
        return f"[{ip6.compressed}]", loopback
    host = raw.lower()
    if _NUMERIC_HOST.fullmatch(host):
        try:
            ip4 = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            raise ValueError(f"{text!r}: {raw!r} is not an IPv4 address") from None
        return str(ip4), ip4.is_loopback
    if not _HOSTNAME.fullmatch(host):
        raise ValueError(
            f"{text!r}: the host {raw!r} must be an IP address or a name of ASCII letters, "
            "digits, '-' and '.' (a non-ASCII name in its punycode form)"
        )
    return host, host in _LOOPBACK_NAMES


class Endpoint(str):
    """An `http://` or `https://` URL honed may send requests to, parsed (see the module
    docstring).

    Normalised: the scheme and host lower case, an IP address in its canonical form (every
    spelling of 127.0.0.1 is `127.0.0.1`), no trailing `/`. Refused: space or control
    characters anywhere, non-ASCII text, a user name (`http://a@b` hides the host), `%` in the
    host, a query or fragment, a port outside 1-65535. `loopback` says whether the host is this
    machine, decided by `ipaddress` on the canonical address (`localhost` is this machine too),
    and `key_refusal` holds the rule for keys over plain http.
    """

    shown_as = "URL"  # in the configuration reference (`honed.config_reference`)
    scheme: str
    host: str
    port: int | None
    path: str
    loopback: bool

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """`text` as an endpoint, or `ValueError` saying what is wrong with it."""
        if not isinstance(text, str):
            raise ValueError(f"a URL is text, not {type(text).__name__}")
        if not text.isascii() or not text.isprintable() or any(c.isspace() for c in text):
            raise ValueError(
                f"{text!r} holds spaces, control or non-ASCII characters; give the URL alone"
            )
        scheme, sep, rest = text.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in ("http", "https"):
            raise ValueError(f"{text!r} must start with http:// or https://")
        authority, slash, path = rest.partition("/")
        path = slash + path
        if "?" in path or "#" in path or "?" in authority or "#" in authority:
            raise ValueError(f"{text!r}: a server URL has no query or fragment")
        if "@" in authority:
            raise ValueError(f"{text!r}: a server URL has no user name ('@')")
        if "%" in authority:
            raise ValueError(f"{text!r}: percent-encoding in the host is not accepted")
        host_raw, port = _split_port(authority, text)
        host, loopback = _host(host_raw, text)
        path = path.rstrip("/")
        if not _PATH.fullmatch(path):
            raise ValueError(f"{text!r}: the path {path!r} holds characters a URL path cannot")
        endpoint = super().__new__(cls, f"{scheme}://{host}{f':{port}' if port else ''}{path}")
        endpoint.scheme, endpoint.host, endpoint.port = scheme, host, port
        endpoint.path, endpoint.loopback = path, loopback
        return endpoint

    @property
    def origin(self) -> str:
        """`scheme://host[:port]`, without the path."""
        return str(self)[: len(self) - len(self.path)] if self.path else str(self)

    def child(self, route: str) -> Endpoint:
        """The route `route` under this URL's path (`models`, `chat/completions`)."""
        return Endpoint.parse(f"{self}/{route}")

    def with_path(self, path: str) -> Endpoint:
        """The same server at another absolute `path` (`/update_weights_from_disk`)."""
        return Endpoint.parse(self.origin + path)

    def key_refusal(self, api_key_env: str | None, allowed: bool) -> str | None:
        """Why sending the key named `api_key_env` here is refused, or `None`: a key goes over
        plain http:// only to this machine, unless the user allows it (a network of theirs)."""
        if not api_key_env or self.scheme != "http" or self.loopback or allowed:
            return None
        return (
            f"{self} is plain http:// to another machine, so the key in {api_key_env} would "
            "cross the network unencrypted; use https://, or set allow_insecure_http: true if "
            "the network is yours"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (Endpoint.parse, (str(self),))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return _schema(cls, lambda text, context: cls.parse(text))


def _split_port(authority: str, text: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        host, _, after = authority.partition("]")
        host += "]"
        if after and not after.startswith(":"):
            raise ValueError(f"{text!r}: {authority!r} is not host:port")
        port_text = after[1:] if after else ""
        has_port = bool(after)
    else:
        host, has_port_sep, port_text = authority.partition(":")
        has_port = bool(has_port_sep)
    if not host:
        raise ValueError(f"{text!r} names no host")
    if not has_port:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def parse_free(value: Any, base: Path | None) -> Any:
    """Free-form config data (an environment's `args`) with every string that parses as an
    `Endpoint` or an `ImportSpec` replaced by the parsed value: which of its strings honed's
    environments will import or contact is theirs to say, so every string that could be either
    is taken for one, and `reached` lists it. A string that parses as neither can be neither
    later (there is no other parser)."""
    if isinstance(value, dict):
        return {parse_free(k, base): parse_free(v, base) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(parse_free(v, base) for v in value)
    if isinstance(value, str) and not isinstance(value, ImportSpec | Endpoint):
        for parse in (Endpoint.parse, lambda text: ImportSpec.parse(text, base)):
            try:
                return parse(value)
            except ValueError:
                continue
    return value


def _values(value: Any) -> Iterator[Any]:
    """Every value inside `value` (a validated model, mappings and sequences, keys included),
    each shared container once."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, str):
            yield current
            continue
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseModel):
            stack.extend(getattr(current, name) for name in type(current).model_fields)
        elif isinstance(current, dict):
            stack.extend(current.keys())
            stack.extend(current.values())
        elif isinstance(current, list | tuple | set | frozenset):
            stack.extend(current)


def reached(config: Any) -> tuple[list[ImportSpec], list[Endpoint]]:
    """The import specs and endpoints in a validated config, each once, sorted."""
    imports: set[ImportSpec] = set()
    endpoints: set[Endpoint] = set()
    for value in _values(config):
        if isinstance(value, ImportSpec):
            imports.add(value)
        elif isinstance(value, Endpoint):
            endpoints.add(value)
    return sorted(imports), sorted(endpoints)


# Written to YAML as the text they are (a config dumped before `model_dump(mode="json")`).
for _parsed in (ImportSpec, Endpoint):
    yaml.SafeDumper.add_representer(_parsed, yaml.representer.SafeRepresenter.represent_str)
