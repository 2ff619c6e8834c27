"""`honed serve`: a honed policy behind an OpenAI-compatible API, on the CPU or a GPU.

Any OpenAI client can then use a trained model (the skill loop's target, the memory reader,
an Atropos environment), and a trainer can push new weights to it. Routes, formats and the
batching of concurrent requests are described in `app`, `replies` and `engine`; what may be
served and reloaded in `weights`.

Exposure follows honed's rules for plain http (docs/security.md): the server listens on
127.0.0.1 unless told otherwise; on another interface it wants a key (`--api-key-env`, the
*name* of the environment variable that holds it; the key is never printed or logged), and
it refuses to take that key over plain http (no `--ssl-certfile`) unless
`--allow-insecure-http` says the network is yours. `--allow-unauthenticated` serves another
interface without a key. Starlette and uvicorn come with the `serve` extra; they are imported
only when the server starts, so the command line can say how to install them.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from honed.errors import HonedError
from honed.text import register_secret
from honed.view import LOOPBACK_NAMES, bind, is_loopback

INSTALL = "pip install 'honed[serve]'"


@dataclass
class ServeOptions:
    """How `honed serve` runs (its command-line flags)."""

    host: str = "127.0.0.1"
    port: int = 8000
    name: str | None = None
    api_key_env: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    max_batch: int = 32
    batch_window_ms: float = 10.0
    default_max_tokens: int = 256
    weights_dirs: list[str] = field(default_factory=list)
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    allow_unauthenticated: bool = False
    allow_insecure_http: bool = False


def require() -> None:
    """Stop with the install command when the web server's packages are missing."""
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise HonedError(f"honed serve needs {' and '.join(missing)}: {INSTALL}")


def api_key(env: str | None) -> str | None:
    """The key held in the environment variable `env` names (registered for redaction)."""
    if env is None:
        return None
    key = os.environ.get(env, "").strip()
    if not key:
        raise HonedError(f"--api-key-env {env}: the environment variable {env} is not set")
    register_secret(key)
    return key


def check_exposure(options: ServeOptions, key: str | None) -> None:
    """Refuse to listen beyond this machine without a key, or with a key over plain http,
    unless the matching `--allow-*` flag says so."""
    if (options.ssl_certfile is None) != (options.ssl_keyfile is None):
        raise HonedError("give both --ssl-certfile and --ssl-keyfile, or neither")
    if is_loopback(options.host):
        return
    if key is None and not options.allow_unauthenticated:
        raise HonedError(
            f"--host {options.host} listens beyond this machine: give a key with "
            "--api-key-env NAME (the environment variable holding it), or pass "
            "--allow-unauthenticated to let anyone who reaches the port use the model"
        )
    if key is not None and options.ssl_certfile is None and not options.allow_insecure_http:
        raise HonedError(
            f"--host {options.host} with a key over plain http: the key would cross the "
            "network unencrypted; give --ssl-certfile and --ssl-keyfile, or pass "
            "--allow-insecure-http if the network is yours"
        )


def serve(source: str, options: ServeOptions) -> None:
    """Serve `source` until Ctrl-C (see the module docstring)."""
    require()
    key = api_key(options.api_key_env)
    check_exposure(options, key)
    import uvicorn

    from honed.serve.app import ServedModel, create_app
    from honed.serve.engine import Engine
    from honed.serve.weights import load_policy

    policy = load_policy(source, options.device, options.dtype, options.seed)
    engine = Engine(policy, options.max_batch, options.batch_window_ms / 1000)
    served = ServedModel(
        engine,
        options.name or source,
        key,
        [Path(d) for d in options.weights_dirs],
        options.default_max_tokens,
    )
    loopback = is_loopback(options.host)
    allowed = [*LOOPBACK_NAMES, "[::1]", options.host] if loopback else None
    sock = bind(options.host, options.port)
    scheme = "https" if options.ssl_certfile else "http"
    shown = f"[{options.host}]" if ":" in options.host else options.host
    url = f"{scheme}://{shown}:{sock.getsockname()[1]}/v1"
    print(
        f"honed serve: {url}  (model '{served.name}' on {policy.device}"
        f"{', key required' if key else ''}; Ctrl-C to stop)",
        flush=True,
    )
    config = uvicorn.Config(
        create_app(served, allowed),
        log_level="warning",
        access_log=False,
        lifespan="off",
        ssl_certfile=options.ssl_certfile,
        ssl_keyfile=options.ssl_keyfile,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        engine.close()
