"""The dashboard's ASGI app: routes, templates, static files, the headers every answer
carries, and the one gate every request passes: its Host must be a name the server is
known by."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobcenter.client import Client
from jobcenter.config import redacted_url
from jobcenter.errors import JobcenterError, NotFound, RedisUnavailable
from jobcenter.storage.server.errors import (
    REDIS_TROUBLE,
    ClusterClientError,
    ResponseError,
    unreachable,
    write_refused,
)

from . import actions, api, format, metrics, pages

HERE = Path(__file__).parent
GZIP_MIN_BYTES = 1_000  # the live states of a large job compress ~10x
# The names a dashboard on loopback is reached by. A page of another site can point its own
# name at 127.0.0.1 (DNS rebinding) and read what the dashboard answers, but the browser
# still sends that site's name as the Host: so a request for any other name is refused.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# While Redis is unreachable a page says so and reloads itself this often, and the job
# page's script asks again as often: each shows what was asked for once Redis answers.
OUTAGE_RETRY_SECONDS = 5

# Scripts and styles only from our own files: text from jobs (errors, names) can never run.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or "application/json" in request.headers.get(
        "accept", ""
    )


def redis_trouble(exc: Exception, redis_url: str) -> str | None:
    """What is wrong with Redis, if `exc` says Redis is unreachable or refuses writes (a page
    cannot be served until that ends); None for any other error."""
    if isinstance(exc, RedisUnavailable):
        return str(exc)
    if unreachable(exc) or isinstance(exc, ClusterClientError):
        return f"cannot reach Redis at {redacted_url(redis_url)}: {exc}"
    why = write_refused(exc) if isinstance(exc, ResponseError) else None
    if why is not None:
        return f"Redis at {redacted_url(redis_url)} refuses writes: {why}"
    return None


def create_app(
    client: Client,
    token: str | None = None,
    allowed_hosts: Sequence[str] = LOCAL_HOSTS,
    *,
    mounts: Sequence[BaseRoute] = (),
    api_tokens: bool = False,
) -> Starlette:
    """The dashboard over `client`'s namespace; actions allowed only with `token`, or with
    `api_tokens` to whoever sends an API token of the operate scope (storage/tokens.py);
    requests only for `allowed_hosts` (names, `*.example.com`, `[::1]`; `*` any), answered
    400 otherwise, whatever they ask for: every route mounted here is behind the check.
    `mounts`: apps served beside it (the HTTP API under /api/v1)."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters.update(
        when=format.when, duration=format.duration, first_line=format.first_line
    )
    templates.env.globals.update(ago=format.ago, now=time.time)

    async def error(request: Request, exc: Exception) -> Response:
        trouble = redis_trouble(exc, client.settings.redis_url)
        if trouble is not None:
            return outage(request, trouble)
        if isinstance(exc, HTTPException):
            status, message = exc.status_code, str(exc.detail)
        elif isinstance(exc, NotFound):
            status, message = 404, str(exc)
        elif isinstance(exc, ValueError | JobcenterError):  # bad input, or a refused change
            status, message = 409 if isinstance(exc, JobcenterError) else 400, str(exc)
        else:
            raise exc
        if wants_json(request):
            return JSONResponse({"ok": False, "error": message}, status_code=status)
        return pages.render(request, "error.html", status_code=status, message=message)

    def outage(request: Request, trouble: str) -> Response:
        """503, saying what is wrong with Redis, and when to ask again."""
        retry = {"retry-after": str(OUTAGE_RETRY_SECONDS)}
        if wants_json(request):
            body = {"ok": False, "error": trouble, "retry_after": OUTAGE_RETRY_SECONDS}
            return JSONResponse(body, status_code=503, headers=retry)
        if request.url.path == metrics.PATH:
            return PlainTextResponse(f"{trouble}\n", status_code=503, headers=retry)
        page = pages.render(
            request, "outage.html", 503, trouble=trouble, refresh=OUTAGE_RETRY_SECONDS
        )
        page.headers.update(retry)
        return page

    app = Starlette(
        routes=[
            *mounts,
            *pages.ROUTES,
            *api.ROUTES,
            *actions.ROUTES,
            *metrics.ROUTES,
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                TrustedHostMiddleware, allowed_hosts=list(allowed_hosts), www_redirect=False
            ),
            Middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES),
        ],
        exception_handlers={
            HTTPException: error,
            JobcenterError: error,
            ValueError: error,
            **{kind: error for kind in REDIS_TROUBLE},
        },
    )
    app.state.client = client
    app.state.token = token or None
    app.state.api_tokens = api_tokens
    app.state.templates = templates
    return app
