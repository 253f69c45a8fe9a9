"""Who is asking: `Authorization: Bearer TOKEN`, looked up by its hash (storage/tokens.py).
Each endpoint needs a scope; a token bound to an owner sees that owner's jobs only, and
another owner's job is "not found" to it, as one that does not exist."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from jobcenter.client import Client
from jobcenter.errors import NotFound
from jobcenter.storage.tokens import Scope, TokenRecord, find

from .problems import FORBIDDEN, UNAUTHORIZED, ApiProblem

bearer = HTTPBearer(
    auto_error=False,
    description="A token from `jobcenter token create --scope read|submit|operate|work|admin`.",
)
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="jobcenter"'}


def client(request: Request) -> Client:
    found: Client = request.app.state.client
    return found


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> TokenRecord:
    """The token's record; 401 without a token or with one unknown (never made, revoked)."""
    if credentials is None:
        raise ApiProblem(UNAUTHORIZED, "send a token: Authorization: Bearer TOKEN", CHALLENGE)
    record = await run_in_threadpool(find, client(request).store, credentials.credentials)
    if record is None:
        raise ApiProblem(UNAUTHORIZED, "this token is not known here (revoked?)", CHALLENGE)
    return record


def needs(scope: Scope) -> Callable[..., Awaitable[TokenRecord]]:
    """A dependency: the caller's token, refused (403) unless its scope allows `scope`."""

    async def check(record: Annotated[TokenRecord, Depends(principal)]) -> TokenRecord:
        if not record.allows(scope):
            raise ApiProblem(
                FORBIDDEN,
                f"a {record.scope.value} token may not do this: it needs the {scope.value} "
                "scope (or one that includes it)",
            )
        return record

    return check


def unbound(record: TokenRecord, what: str) -> None:
    """Refuse an owner-bound token what spans every owner's work."""
    if record.owner is not None:
        raise ApiProblem(
            FORBIDDEN,
            f"{what} spans every owner's jobs: this token is bound to owner {record.owner!r}",
        )


def check_owner(record: TokenRecord, job_id: str, owner: str | None, namespace: str) -> None:
    """A job of another owner does not exist for an owner-bound token."""
    if record.owner is not None and owner != record.owner:
        raise NotFound.job(job_id, namespace)


Reader = Annotated[TokenRecord, Depends(needs(Scope.READ))]
Submitter = Annotated[TokenRecord, Depends(needs(Scope.SUBMIT))]
Operator = Annotated[TokenRecord, Depends(needs(Scope.OPERATE))]
Worker = Annotated[TokenRecord, Depends(needs(Scope.WORK))]
Admin = Annotated[TokenRecord, Depends(needs(Scope.ADMIN))]
