"""The web app of `honed serve`: OpenAI's routes, SGLang's `/generate` and weight reload.

Routes: `GET /health` (open, for probes), `GET /v1/models`, `POST /v1/completions`,
`POST /v1/chat/completions`, `POST /generate`, `GET /get_model_info` and
`POST /update_weights_from_disk`. With a key, every route but `/health` wants
`Authorization: Bearer <key>` (compared in constant time); a missing or wrong one is a 401.
Bodies over `MAX_BODY_BYTES` are refused (413) before they are parsed. A request naming
another model than the served one is a 404, as in vLLM. Handlers only parse, tokenise and
format: the model runs on the engine's thread (`honed.serve.engine`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from honed.models.policy import Policy
from honed.serve.engine import Engine, Generated, Job, RowSettings
from honed.serve.prompts import chat_format, chat_ids, text_ids
from honed.serve.protocol import (
    ChatRequest,
    CompletionRequest,
    GenerateRequest,
    ReloadRequest,
    ServeError,
    parse,
)
from honed.serve.replies import Choice, chat_body, completion_body, finish, generate_body
from honed.serve.weights import reload_policy
from honed.types import derive_seed

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024

Handler = Callable[[Request], Awaitable[Any]]


class ServedModel:
    """What the routes share: the engine, the served name, the key, where reloads may come
    from, and the `max_tokens` a request gets when it names none."""

    def __init__(
        self,
        engine: Engine,
        name: str,
        api_key: str | None = None,
        weights_dirs: Sequence[Path] = (),
        default_max_tokens: int = 256,
    ) -> None:
        self.engine = engine
        self.name = name
        self.api_key = api_key
        self.weights_dirs = [Path(d).expanduser().resolve() for d in weights_dirs]
        self.default_max_tokens = default_max_tokens
        self.weights_path: str | None = None  # the folder the last reload loaded
        self.created = int(time.time())

    @property
    def policy(self) -> Policy:
        return self.engine.policy

    @property
    def context(self) -> int | None:
        return getattr(self.policy.model.config, "max_position_embeddings", None)

    # ------------------------------------------------------------------ checks

    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            raise ServeError(
                401,
                "missing or wrong API key: send Authorization: Bearer <key>",
                kind="authentication_error",
                code="invalid_api_key",
            )

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.name:
            raise ServeError(
                404,
                f"The model `{model}` does not exist; this server serves `{self.name}`",
                kind="not_found_error",
                param="model",
                code="model_not_found",
            )

    def limit(self, prompt_len: int, asked: int | None) -> int:
        """The tokens a completion of a `prompt_len`-token prompt may have: what was asked,
        or the server's default, within the model's context."""
        if self.context is None:
            return asked if asked is not None else self.default_max_tokens
        room = self.context - prompt_len
        if room < 1 or (asked is not None and asked > room):
            wanted = prompt_len + (asked or 1)
            raise ServeError(
                400,
                f"this model's maximum context length is {self.context} tokens; the request "
                f"wants {wanted} ({prompt_len} in the prompt, {asked or 1} to complete)",
                param="max_tokens",
            )
        return asked if asked is not None else min(self.default_max_tokens, room)

    # ------------------------------------------------------------------ sampling

    async def sample(
        self,
        prompts: list[list[int]],
        n: int,
        limits: list[int],
        settings: RowSettings,
        seed: int | None,
        top: int,
    ) -> list[Any]:
        """`n` samples of each prompt from the engine, prompt by prompt."""
        rows = [p for p in prompts for _ in range(n)]
        if seed is None:
            seeds = [secrets.randbits(63) for _ in rows]
        else:
            seeds = [derive_seed(seed, i // n, i % n) for i in range(len(rows))]
        job = Job(rows, seeds, [m for m in limits for _ in range(n)], settings, top)
        return await asyncio.wrap_future(self.engine.submit(job))

    # ------------------------------------------------------------------ routes

    async def models(self, request: Request) -> dict[str, Any]:
        card = {
            "id": self.name,
            "object": "model",
            "created": self.created,
            "owned_by": "honed",
            "root": self.name,
            "max_model_len": self.context,
        }
        return {"object": "list", "data": [card]}

    async def completions(self, request: Request) -> dict[str, Any]:
        req: CompletionRequest = parse(CompletionRequest, await _json(request))
        req.check_supported()
        self.check_model(req.model)
        policy = self.policy
        prompts = [text_ids(policy, p) for p in req.prompts()]
        limits = [self.limit(len(p), req.max_tokens) for p in prompts]
        settings = _settings(req.temperature, req.top_p, req.stop_token_ids)
        outs = await self.sample(prompts, req.n, limits, settings, req.seed, req.logprobs or 0)
        choices = _finished(policy, outs, req)
        return completion_body(
            policy,
            self.name,
            prompts,
            choices,
            req.logprobs,
            req.return_token_ids,
            req.return_tokens_as_token_ids,
        )

    async def chat(self, request: Request) -> dict[str, Any]:
        req: ChatRequest = parse(ChatRequest, await _json(request))
        req.check_supported()
        self.check_model(req.model)
        policy = self.policy
        fmt = chat_format(policy, req)
        prompt = chat_ids(policy, req, fmt)
        limit = self.limit(len(prompt), req.limit)
        settings = _settings(req.temperature, req.top_p, req.stop_token_ids)
        top = (req.top_logprobs or 0) if req.logprobs else 0
        outs = await self.sample([prompt], req.n, [limit], settings, req.seed, top)
        choices = _finished(policy, outs, req)
        return chat_body(
            policy,
            self.name,
            prompt,
            choices,
            fmt.tool_format if req.parses_tools else None,
            req.logprobs,
            req.return_token_ids,
            req.return_tokens_as_token_ids,
        )

    async def generate(self, request: Request) -> Any:
        req: GenerateRequest = parse(GenerateRequest, await _json(request))
        req.check_supported()
        s = req.sampling_params
        policy = self.policy
        prompts = [text_ids(policy, p) for p in req.prompts()]
        limits = [self.limit(len(p), s.max_new_tokens) for p in prompts]
        settings = _settings(s.temperature, s.top_p, s.stop_token_ids)
        top = req.top_logprobs_num if req.return_logprob else 0
        outs = await self.sample(prompts, s.n, limits, settings, s.sampling_seed, top)
        stops = [s.stop] if isinstance(s.stop, str) else list(s.stop or [])
        results = [
            generate_body(
                policy,
                prompts[i // s.n],
                finish(policy, o, stops, s.stop_token_ids or [], s.skip_special_tokens),
                req.return_logprob,
                top,
            )
            for i, o in enumerate(outs)
        ]
        return results if req.batched or s.n > 1 else results[0]

    async def model_info(self, request: Request) -> dict[str, Any]:
        return {
            "model_path": self.weights_path or self.name,
            "tokenizer_path": self.name,
            "is_generation": True,
        }

    async def reload(self, request: Request) -> dict[str, Any]:
        req: ReloadRequest = parse(ReloadRequest, await _json(request))
        started = time.perf_counter()
        roots = self.weights_dirs
        await asyncio.wrap_future(
            self.engine.call(lambda current: reload_policy(req.model_path, roots, current))
        )
        self.weights_path = req.model_path
        seconds = time.perf_counter() - started
        log.info("honed serve: loaded the weights in %s (%.1f s)", req.model_path, seconds)
        return {
            "success": True,
            "message": f"loaded the weights in {req.model_path}",
            "num_paused_requests": 0,
        }


async def _json(request: Request) -> Any:
    """The request's JSON body, at most `MAX_BODY_BYTES` (413 beyond, 400 if not JSON)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ServeError(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ServeError(413, f"the request body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        raise ServeError(400, "the request body is not valid JSON") from None


def _finished(
    policy: Policy, outs: Sequence[Generated], req: CompletionRequest | ChatRequest
) -> list[Choice]:
    """Each sample cut at the request's stop strings and stop tokens, as the OpenAI routes
    return them."""
    extra = req.stop_token_ids or []
    return [
        finish(policy, o, req.stops, extra, req.skip_special_tokens, req.include_stop_str_in_output)
        for o in outs
    ]


def _settings(
    temperature: float | None, top_p: float | None, stop_token_ids: list[int] | None
) -> RowSettings:
    return RowSettings(
        1.0 if temperature is None else float(temperature),
        1.0 if top_p is None else float(top_p),
        tuple(sorted(set(stop_token_ids or []))),
    )


def _route(served: ServedModel, handler: Handler, guarded: bool = True) -> Callable:
    """A Starlette endpoint: the key checked, the handler's value as JSON, errors as
    OpenAI-style JSON (a reload's also with SGLang's `success: false`)."""

    async def endpoint(request: Request) -> Response:
        try:
            if guarded:
                served.authorize(request)
            return JSONResponse(await handler(request))
        except ServeError as err:
            body = err.body()
            if request.url.path == "/update_weights_from_disk":
                body.update(success=False, message=err.message)
            return JSONResponse(body, status_code=err.status)
        except Exception as exc:  # a bug or a device error: the server stays up
            log.exception("honed serve: %s %s failed", request.method, request.url.path)
            err = ServeError(500, f"{type(exc).__name__}: {exc}", kind="internal_server_error")
            return JSONResponse(err.body(), status_code=500)

    return endpoint


async def _health(request: Request) -> dict[str, Any]:
    return {}


def create_app(served: ServedModel, allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The app; requests whose `Host` is not in `allowed_hosts` get a 400 (on the loopback
    address that stops a web page from reaching the server through DNS rebinding)."""
    routes = [
        Route("/health", _route(served, _health, guarded=False), methods=["GET"]),
        Route("/v1/models", _route(served, served.models), methods=["GET"]),
        Route("/v1/completions", _route(served, served.completions), methods=["POST"]),
        Route("/v1/chat/completions", _route(served, served.chat), methods=["POST"]),
        Route("/generate", _route(served, served.generate), methods=["POST"]),
        Route("/get_model_info", _route(served, served.model_info), methods=["GET"]),
        Route("/update_weights_from_disk", _route(served, served.reload), methods=["POST"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts or ["*"]))]
    return Starlette(routes=routes, middleware=middleware)
