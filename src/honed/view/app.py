"""The viewer's web app: one page (static files shipped in the package, no CDN) and a JSON API
over the run directories under one root. Read-only: every route is GET, every file is opened
for reading, and `Catalog` confines every path to the root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from honed.errors import HonedError
from honed.view import rollouts, skill_runs
from honed.view.catalog import Catalog, NotFound, RunFiles, kind, read_config
from honed.view.metrics import MetricsCache, since
from honed.view.summaries import run_summary

STATIC = Path(__file__).parent / "static"
# The page loads nothing but its own files; model text rendered in it cannot run code.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class BadRequest(Exception):
    """A query parameter that is missing or not what the route takes (400)."""


def _int(request: Request, name: str, default: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        if default is None:
            raise BadRequest(f"missing query parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r}") from None


class Api:
    """The JSON routes; each reads the run a request names through the catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.metrics = MetricsCache()

    def _run(self, request: Request) -> RunFiles:
        run_id = request.query_params.get("run")
        if run_id is None:
            raise BadRequest("missing query parameter 'run'")
        return self.catalog.run(run_id)

    def runs(self, request: Request) -> dict[str, Any]:
        out = []
        for run_id in self.catalog.run_ids():
            try:
                out.append(run_summary(self.catalog.run(run_id), self.metrics))
            except NotFound:
                continue  # removed, or replaced by a link, since the listing
        return {"root": str(self.catalog.root), "runs": out}

    def run(self, request: Request) -> dict[str, Any]:
        return run_summary(self._run(request), self.metrics)

    def metric_rows(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        after = _int(request, "after", 0)
        return since(self.metrics, run, after, request.query_params.get("gen"))

    def rollout_steps(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        return {"steps": rollouts.steps(run, kind(run, read_config(run)))}

    def rollout_step(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        return rollouts.step_record(run, kind(run, read_config(run)), _int(request, "step"))

    def curriculum(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        step = request.query_params.get("step")
        return rollouts.curriculum_at(run, None if step is None else _int(request, "step"))

    def skills(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        return skill_runs.overview(run, self.metrics.rows(run)[1])

    def skill_version(self, request: Request) -> dict[str, Any]:
        return skill_runs.version(self._run(request), _int(request, "v"))

    def skill_diff(self, request: Request) -> dict[str, Any]:
        return skill_runs.version_diff(self._run(request), _int(request, "a"), _int(request, "b"))

    def skill_step(self, request: Request) -> dict[str, Any]:
        run = self._run(request)
        versions = skill_runs.overview(run, [])["versions"]
        return skill_runs.step_detail(run, _int(request, "step"), versions)


def _json_route(handler: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Response]:
    """A sync handler as an endpoint: its value as JSON, `NotFound` as 404 (said the same way
    whether the thing is absent or outside the root), a bad parameter as 400."""

    def endpoint(request: Request) -> Response:
        try:
            body, code = handler(request), 200
        except NotFound:
            body, code = {"error": "not found"}, 404
        except BadRequest as err:
            body, code = {"error": str(err)}, 400
        except HonedError as err:
            body, code = {"error": str(err)}, 422
        return JSONResponse(body, code, headers={"Cache-Control": "no-store", **SECURITY_HEADERS})

    return endpoint


def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)


def create_app(root: str | Path, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app serving the runs under `root`; requests whose Host is not in `allowed_hosts`
    (default any) are refused, which keeps a page on another site from reaching a viewer on
    this machine through a DNS name pointed at 127.0.0.1."""
    api = Api(Catalog(root))
    routes = [
        Route("/", index),
        Route("/api/runs", _json_route(api.runs)),
        Route("/api/run", _json_route(api.run)),
        Route("/api/metrics", _json_route(api.metric_rows)),
        Route("/api/rollouts", _json_route(api.rollout_steps)),
        Route("/api/rollouts/step", _json_route(api.rollout_step)),
        Route("/api/curriculum", _json_route(api.curriculum)),
        Route("/api/skills", _json_route(api.skills)),
        Route("/api/skills/version", _json_route(api.skill_version)),
        Route("/api/skills/diff", _json_route(api.skill_diff)),
        Route("/api/skills/step", _json_route(api.skill_step)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or ["*"])]
    return Starlette(routes=routes, middleware=middleware)
