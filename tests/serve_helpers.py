"""`honed serve` inside a test: the engine and the web app on a free port of 127.0.0.1, served
by uvicorn on a thread, so tests talk to it over real HTTP without starting a process."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import uvicorn

from honed.models.policy import Policy
from honed.serve.app import ServedModel, create_app
from honed.serve.engine import Engine
from honed.view import LOOPBACK_NAMES, bind


class LocalServer:
    """`with LocalServer(policy) as server:` serves `policy` as `name` at `server.base_url`."""

    def __init__(
        self,
        policy: Policy,
        name: str = "tiny",
        api_key: str | None = None,
        weights_dirs: Sequence[Path] = (),
        default_max_tokens: int = 16,
        max_batch: int = 32,
        window_s: float = 0.01,
    ) -> None:
        self.engine = Engine(policy, max_batch, window_s)
        self.served = ServedModel(self.engine, name, api_key, weights_dirs, default_max_tokens)
        self._sock = bind("127.0.0.1", 0)
        self.port = self._sock.getsockname()[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.origin}/v1"
        app = create_app(self.served, [*LOOPBACK_NAMES, "[::1]"])
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> LocalServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.origin}/health", trust_env=False).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("honed serve did not start")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.engine.close()
