"""A fake OpenAI-compatible server on 127.0.0.1 for tests (chat client, skill loop, LLM readers).

It runs `http.server.ThreadingHTTPServer` in a daemon thread on a free port and serves
`GET /v1/models` and `POST /v1/chat/completions`; what a chat request gets back is decided by a
handler callback, so one server class plays an echo bot, a flaky server, a slow one, or both
roles of the skill loop. Other POST routes (`/v1/completions`, a weight-reload endpoint) are
served by the handlers in `routes`. It records every request and the largest number of chat
requests in flight at once (to test concurrency limits).

    def handler(req: FakeRequest) -> Reply | str | dict:
        if req.index == 0:
            return Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
        return "the answer"          # a str is a 200 completion with that text

    with FakeOpenAIServer(handler) as server:
        client = ChatClient(ChatModelConfig(base_url=server.base_url, model="fake-model"))
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeRequest:
    """One request as the server saw it; `index` counts chat requests from 0 in arrival order."""

    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def messages(self) -> list[dict[str, Any]]:
        return (self.body or {}).get("messages", [])

    @property
    def last_user_text(self) -> str:
        users = [m.get("content", "") for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""


@dataclass
class Reply:
    """What the server sends: status, JSON body, headers, after `delay_s` seconds.

    `drop=True` closes the connection without any response (a connection error for the client).
    `raw` is sent as the body instead of `body` as JSON (an HTML error page, cut JSON), with
    `content_type`. `trickle_s` sends the body one byte at a time, this many seconds apart (a
    server that holds a connection open without ever finishing).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop: bool = False
    raw: bytes | None = None
    content_type: str = "application/json"
    trickle_s: float = 0.0


def _words(text: str) -> int:
    return len(str(text).split())


def completion(
    text: str,
    prompt_tokens: int = 0,
    completion_tokens: int | None = None,
    finish_reason: str = "stop",
    model: str = "fake-model",
) -> dict[str, Any]:
    """A chat-completion response body in the OpenAI format."""
    completion_tokens = _words(text) if completion_tokens is None else completion_tokens
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def echo(req: FakeRequest) -> str:
    """The default handler: repeats the last user message."""
    return f"echo: {req.last_user_text}"


ChatHandler = Callable[[FakeRequest], "Reply | str | dict[str, Any]"]
RouteHandler = Callable[[FakeRequest], "Reply | dict[str, Any]"]


class FakeOpenAIServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 driven by a handler callback.

    `models` is what `/v1/models` lists (`None`: that endpoint answers 404); with `api_key` set,
    requests without `Authorization: Bearer <api_key>` get 401. `port` 0 picks a free one. A str from the handler becomes a
    completion whose prompt tokens are the words in the messages; a dict is sent as a 200 body.
    """

    def __init__(
        self,
        handler: ChatHandler = echo,
        models: Sequence[str] | None = ("fake-model",),
        api_key: str | None = None,
        routes: dict[str, RouteHandler] | None = None,
        port: int = 0,
    ) -> None:
        self.handler = handler
        self.routes = dict(routes or {})
        self.models = None if models is None else list(models)
        self.api_key = api_key
        self.requests: list[FakeRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval makes stop() (and so each test) quick.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def chat_requests(self) -> list[FakeRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> FakeRequest:
        with self._lock:
            index = sum(r.path.endswith("/chat/completions") for r in self.requests)
            req = FakeRequest(index, method, path, headers, body)
            self.requests.append(req)
            return req

    def _respond(self, req: FakeRequest) -> Reply:
        if (
            self.api_key is not None
            and req.headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            return Reply(401, {"error": {"message": "Incorrect API key provided"}})
        if req.method == "GET" and req.path == "/v1/models" and self.models is not None:
            data = [{"id": m, "object": "model"} for m in self.models]
            return Reply(200, {"object": "list", "data": data})
        if req.method == "POST" and req.path in self.routes:
            try:
                out = self.routes[req.path](req)
            except Exception as exc:  # a broken test handler should show up as a 500
                return Reply(500, {"error": {"message": f"handler raised {exc!r}"}})
            return out if isinstance(out, Reply) else Reply(200, out)
        if req.method != "POST" or req.path != "/v1/chat/completions":
            return Reply(404, {"error": {"message": f"no route {req.method} {req.path}"}})
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            out = self.handler(req)
            if isinstance(out, str):
                prompt = sum(_words(m.get("content", "")) for m in req.messages)
                out = completion(out, prompt_tokens=prompt)
            reply = out if isinstance(out, Reply) else Reply(200, out)
            if reply.delay_s:
                self._stopping.wait(reply.delay_s)
            return reply
        except Exception as exc:  # a broken test handler should show up as a 500, not a hang
            return Reply(500, {"error": {"message": f"handler raised {exc!r}"}})
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._respond(server._record(self.command, self.path, headers, body))
                if reply.drop:
                    self.close_connection = True
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if not reply.trickle_s:
                        self.wfile.write(payload)
                        return
                    for byte in payload:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        if server._stopping.wait(reply.trickle_s):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test); nothing to tell it

            do_GET = _serve
            do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
