"""Errors as RFC 9457 problem details (`application/problem+json`): each of the project's
error families gets the HTTP status that matches the CLI's exit code for it, and the
message the CLI would print as its `detail`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from jobcenter.errors import JobcenterError, NoResult, NotFound, RedisUnavailable, Refused
from jobcenter.storage.server.errors import UNREACHABLE, ResponseError, write_refused

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:jobcenter:problem:"
# The CLI's exit codes (cli/options.py) the statuses follow; cli/ sits above this layer.
EXIT_BAD_INPUT, EXIT_NO_REDIS, EXIT_REFUSED, EXIT_ERROR, EXIT_NO_RESULT = 2, 3, 5, 6, 7


@dataclass(frozen=True)
class Kind:
    name: str  # the problem type's last part
    status: int
    title: str
    exit_code: int | None  # what the CLI exits with for the same error


BAD_INPUT = Kind("bad-input", 422, "The input is not valid", EXIT_BAD_INPUT)
MALFORMED = Kind("malformed-request", 400, "The request cannot be read", EXIT_BAD_INPUT)
NOT_FOUND = Kind("not-found", 404, "Not found", EXIT_BAD_INPUT)
REFUSED = Kind("refused", 409, "Refused in the current state", EXIT_REFUSED)
NO_RESULT = Kind("no-result", 409, "The task has no result yet", EXIT_NO_RESULT)
NO_REDIS = Kind("redis-unavailable", 503, "Redis is unreachable or refuses writes", EXIT_NO_REDIS)
UNAUTHORIZED = Kind("unauthorized", 401, "A token is needed", None)
FORBIDDEN = Kind("forbidden", 403, "The token's scope does not allow this", None)
INTERNAL = Kind("internal", 500, "Internal error", EXIT_ERROR)
BY_STATUS = {k.status: k for k in (MALFORMED, UNAUTHORIZED, FORBIDDEN, NOT_FOUND)}


class Problem(BaseModel):
    """An RFC 9457 problem: `detail` names what is wrong, as the CLI's message does."""

    type: str = Field(examples=["urn:jobcenter:problem:not-found"])
    title: str
    status: int
    detail: str
    instance: str | None = None
    exit_code: int | None = Field(
        default=None, description="What the jobcenter CLI exits with for the same error."
    )
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Each field a request failed validation on."
    )


class ApiProblem(Exception):
    """Raised by an endpoint to answer with a problem of `kind`."""

    def __init__(self, kind: Kind, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.headers = kind, detail, headers or {}


def respond(
    request: Request,
    kind: Kind,
    detail: str,
    headers: dict[str, str] | None = None,
    errors: list[dict[str, Any]] | None = None,
) -> JSONResponse:
    body = Problem(
        type=TYPE_PREFIX + kind.name,
        title=kind.title,
        status=kind.status,
        detail=detail,
        instance=request.url.path,
        exit_code=kind.exit_code,
        errors=errors,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=kind.status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


def kind_of(exc: Exception) -> Kind | None:
    """The problem kind of one of our errors, in the order the CLI tells them apart
    (cli/options.redis_options); None for an error that is a bug."""
    if isinstance(exc, NotFound):  # before Refused: UnknownJob is both
        return NOT_FOUND
    if isinstance(exc, ValueError):  # SpecError, SettingsMismatch, IdempotencyConflict
        return BAD_INPUT
    if isinstance(exc, (RedisUnavailable, *UNREACHABLE)):
        return NO_REDIS
    if isinstance(exc, ResponseError) and write_refused(exc) is not None:
        return NO_REDIS
    if isinstance(exc, NoResult):
        return NO_RESULT
    if isinstance(exc, Refused):
        return REFUSED
    return None


async def on_error(request: Request, exc: Exception) -> JSONResponse:
    """Every error an endpoint raises, as a problem."""
    if isinstance(exc, ApiProblem):
        return respond(request, exc.kind, exc.detail, exc.headers)
    if isinstance(exc, RequestValidationError):
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type")}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        where = ".".join(str(part) for part in first["loc"])
        unreadable = first.get("type") == "json_invalid"
        return respond(
            request, MALFORMED if unreadable else BAD_INPUT, f"{where}: {first['msg']}",
            errors=errors,
        )  # fmt: skip
    if isinstance(exc, HTTPException):
        by_status = BY_STATUS.get(exc.status_code) or Kind(
            f"http-{exc.status_code}", exc.status_code, str(exc.detail), None
        )
        return respond(request, by_status, str(exc.detail), dict(exc.headers or {}))
    kind = kind_of(exc)
    if kind is NO_REDIS:
        reason = write_refused(exc) if isinstance(exc, ResponseError) else None
        detail = (
            f"Redis refused the write ({reason}); nothing of it was applied"
            if reason
            else f"cannot reach Redis: {exc}"
        )
        return respond(request, kind, detail, {"Retry-After": "1"})
    if kind is not None:
        return respond(request, kind, str(exc))
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    detail = str(exc) if isinstance(exc, JobcenterError) else "the server failed; see its log"
    return respond(request, INTERNAL, detail)


def documented(*kinds: Kind) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` entry for these problems."""
    return {kind.status: {"description": kind.title, "content": PROBLEM_CONTENT} for kind in kinds}


PROBLEM_CONTENT = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
