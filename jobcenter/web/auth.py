"""Who may act: a token, compared in constant time, sent in a header or a form field of a
POST. Without a token configured the dashboard is read-only."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs, urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request

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


async def require_token(request: Request, expected: str | None) -> None:
    """Refuse the action unless the request carries the dashboard's token. A cross-site
    page cannot send the header, nor know the value of the form field."""
    if not expected:
        raise HTTPException(
            403,
            f"the dashboard is read-only: start it with --token (or {TOKEN_ENV}) to allow actions",
        )
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPException(403, f"refused a request from another site ({origin})")
    given = request.headers.get(TOKEN_HEADER)
    if given is None and request.headers.get("content-type", "").startswith(FORM_TYPE):
        given = await _form_token(request)
    if not token_matches(given, expected):
        raise HTTPException(
            401,
            f"this action needs the dashboard's token (header {TOKEN_HEADER} or form field "
            f"'{TOKEN_FIELD}')",
        )
