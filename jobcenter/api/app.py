"""The HTTP API's app (FastAPI on Starlette), served under /api/v1 beside the dashboard:
its routers, problem answers for every error, the health endpoints (the only ones served
without a token), the OpenAPI document and its interactive page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.routing import Mount

from jobcenter.client import Client
from jobcenter.errors import JobcenterError
from jobcenter.runtime.remote import Executors
from jobcenter.storage.server.errors import RedisError

from . import bulk, jobs, manage, models, worker
from .problems import (
    BAD_INPUT,
    FORBIDDEN,
    MALFORMED,
    NO_REDIS,
    PROBLEM_CONTENT,
    UNAUTHORIZED,
    ApiProblem,
    Problem,
    documented,
    on_error,
    respond,
)

PREFIX = "/api/v1"
TITLE = "jobcenter"
VERSION = "1"
HERE = Path(__file__).parent
DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jobcenter API</title>
<link rel="stylesheet" href="docs/static/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="docs/static/swagger-ui-bundle.js"></script>
<script src="docs/assets/docs.js"></script></body></html>
"""
DESCRIPTION = """The jobcenter HTTP API: submit DAG jobs, follow them, and run their tasks
from any language (the worker protocol).

Every endpoint but the health ones needs `Authorization: Bearer TOKEN`, a token made by
`jobcenter token create --scope read|submit|operate|work|admin [--owner NAME]`. Errors are
RFC 9457 problems (`application/problem+json`): 401 without a known token, 403 when its scope
does not allow the call, 404 unknown, 409 refused in the current state, 422 bad input, 503
Redis unreachable or refusing writes."""


def create_api(client: Client | None, *, claim_wait_max: float = models.CLAIM_WAIT_MAX) -> FastAPI:
    """The API over `client`'s namespace (None: only to write its document).
    `claim_wait_max` caps a claim's long poll."""
    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        docs_url=None,  # our own page: Swagger UI's files served from here, no inline script
        redoc_url=None,
        openapi_url="/openapi.json",
        servers=[{"url": PREFIX}],
        root_path_in_servers=False,
    )
    app.state.client = client
    app.state.executors = None if client is None else Executors(client.store)
    app.state.claim_wait_max = claim_wait_max
    for error in (
        Exception, HTTPException, RequestValidationError, JobcenterError, RedisError, ValueError,
        ApiProblem,
    ):  # fmt: skip
        app.add_exception_handler(error, on_error)
    app.include_router(bulk.router)  # before jobs: /jobs/bulk/retry is not job "bulk"
    app.include_router(jobs.router)
    app.include_router(worker.router)
    app.include_router(manage.router)
    app.add_api_route(
        "/health",
        health,
        methods=["GET"],
        response_model=models.Health,
        tags=["health"],
        summary="Is the API up and Redis reachable",
        responses=documented(NO_REDIS),
    )
    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    app.mount("/docs/static", StaticFiles(directory=_swagger_ui()), name="swagger-ui")
    app.mount("/docs/assets", StaticFiles(directory=HERE / "static"), name="api-assets")
    app.openapi = lambda: openapi(app)  # type: ignore[method-assign]
    return app


def api_mount(client: Client, **options: Any) -> Mount:
    """The API mounted under PREFIX, for the dashboard's routes: every path under it, those
    with a line break too (Starlette's pattern stops at one, and the dashboard would answer
    them in its own format), reaches the API, which answers with a problem."""
    mount = Mount(PREFIX, app=create_api(client, **options), name="API (docs: /api/v1/docs)")
    mount.path_regex = re.compile(mount.path_regex.pattern, re.DOTALL)
    return mount


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document, made without a server or Redis: docs/openapi.json holds it."""
    return create_api(None).openapi()


def _swagger_ui() -> str:
    import swagger_ui_bundle

    return str(swagger_ui_bundle.swagger_ui_path)


async def health(request: Request) -> Any:
    """200 while Redis answers; 503 otherwise (no token needed)."""
    client: Client = request.app.state.client
    try:
        await run_in_threadpool(client.store.now_ms)
    except RedisError as exc:
        return respond(request, NO_REDIS, f"cannot reach Redis: {exc}", {"Retry-After": "1"})
    return JSONResponse({"status": "ok"})


async def docs(request: Request) -> HTMLResponse:
    """Swagger UI over the document: try each call with a token (Authorize)."""
    return HTMLResponse(DOCS_PAGE)


def openapi(app: FastAPI) -> dict[str, Any]:
    """The document, made once: the problem schema every error answer names, and every
    endpoint but health needing the bearer token."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
        servers=app.servers,
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name in ("HTTPValidationError", "ValidationError"):  # ours is a problem instead
        schemas.pop(name, None)
    for path, operations in document["paths"].items():
        for operation in operations.values():
            answers = operation.setdefault("responses", {})
            kinds = [NO_REDIS] if path == "/health" else [UNAUTHORIZED, FORBIDDEN, NO_REDIS]
            if "requestBody" in operation:
                kinds.append(MALFORMED)
            if "422" in answers or "requestBody" in operation or operation.get("parameters"):
                kinds.append(BAD_INPUT)
            for kind in kinds:
                answers[str(kind.status)] = {"description": kind.title, "content": PROBLEM_CONTENT}
    app.openapi_schema = document
    return document
