"""`honed view`: a local web app over run directories — runs, curves, rollouts, curricula and
normalisers, skill versions and edits (docs/view.md).

A small ASGI app (Starlette, served by uvicorn) answers JSON from the run files and serves one
page whose scripts ship in this package (`static/`: Preact with htm, and uPlot for the curves;
their licences beside them), so it works offline. It reads runs and never writes to them.
Installed with the `view` extra; this module imports neither until `serve` is called, so the
command line can say how to install them.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import socket
from pathlib import Path

from honed.errors import HonedError

INSTALL = "pip install 'honed[view]'"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def require() -> None:
    """Stop with the install command when the `view` extra is missing."""
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise HonedError(f"honed view needs {' and '.join(missing)}: {INSTALL}")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 takes a free one. A clear error when the
    address is taken or cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise HonedError(
            f"cannot listen on {host}:{port} ({err.strerror or err}); choose another --port"
        ) from err
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(root: str | Path, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the runs under `root` until Ctrl-C."""
    require()
    import uvicorn

    from honed.view.app import create_app

    loopback = is_loopback(host)
    allowed = [*LOOPBACK_NAMES, "[::1]", host] if loopback else None
    app = create_app(root, allowed)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    print(f"honed view: {url}  (runs under {Path(root).resolve()}; Ctrl-C to stop)", flush=True)
    if not loopback:
        print(
            f"honed view: listening on {host}: anyone who can reach this machine can read "
            "these runs",
            flush=True,
        )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
