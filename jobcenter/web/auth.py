"""Who may act: a token, compared in constant time, sent in a header or a form field of a
POST. Without a token configured the dashboard is read-only. Served beside the HTTP API
(`jobcenter serve`), it takes the API's tokens instead: one whose scope allows operate."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from jobcenter.storage import tokens

TOKEN_HEADER = "X-Jobcenter-Token"
TOKEN_FIELD = "token"
TOKEN_ENV = "JOBCENTER_DASHBOARD_TOKEN"
FORM_TYPE = "application/x-www-form-urlencoded"
FORM_MAX_BYTES = 4_096  # an action's form carries the token only


def _digest(value: str) -> bytes:
    # equal lengths, so compare_digest does not reveal the token's length either
    return hashlib.sha256(value.encode()).digest()


async def _form_token(request: Request) -> str | None:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            raise HTTPException(413, "an action's form carries only the token")
    values = parse_qs(body.decode("utf-8", "replace")).get(TOKEN_FIELD)
    return values[0] if values else None


def token_matches(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(_digest(given), _digest(expected))


async def require_token(request: Request, expected: str | None) -> tokens.TokenRecord | None:
    """Refuse the action unless the request carries the dashboard's token, or an API token
    allowing operate (returned: its owner bounds what it may act on). A cross-site page
    cannot send the header, nor know the value of the form field."""
    api_tokens: bool = request.app.state.api_tokens
    if not expected and not api_tokens:
        raise HTTPException(
            403,
            f"the dashboard is read-only: start it with --token (or {TOKEN_ENV}) to allow actions",
        )
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, f"refused a request from another site ({origin})")
    given = request.headers.get(TOKEN_HEADER)
    bearer, _, value = request.headers.get("authorization", "").partition(" ")
    if given is None and bearer.lower() == "bearer":
        given = value.strip()
    if given is None and request.headers.get("content-type", "").startswith(FORM_TYPE):
        given = await _form_token(request)
    if expected and token_matches(given, expected):
        return None
    if api_tokens and given:
        record = await run_in_threadpool(tokens.find, request.app.state.client.store, given)
        if record is not None:
            if not record.allows(tokens.Scope.OPERATE):
                raise HTTPException(
                    403, f"a {record.scope.value} token may not act: actions need operate"
                )
            return record
    raise HTTPException(
        401,
        f"this action needs the dashboard's token (header {TOKEN_HEADER} or form field "
        f"'{TOKEN_FIELD}')"
        if expected
        else f"this action needs an operate token (header {TOKEN_HEADER}, Authorization: "
        f"Bearer, or form field '{TOKEN_FIELD}')",
    )
