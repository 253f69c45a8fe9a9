"""Everything else the CLI manages, over HTTP: tokens, schedules, dead letters, pools and
rate limits. What spans every owner's work is refused to an owner-bound token."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse

from jobcenter import schedules
from jobcenter.config import LIST_LIMIT
from jobcenter.model.fire_times import parse_instant
from jobcenter.schedules import backfill as backfills
from jobcenter.storage import tokens

from . import models
from .auth import Admin, Operator, Reader, check_owner, client, unbound
from .problems import BAD_INPUT, NOT_FOUND, REFUSED, Kind, documented

router = APIRouter()

DEAD_LETTERS_MAX = 1_000
NDJSON = "application/x-ndjson"
NAME = Annotated[str, Path(min_length=1, max_length=128)]
RATE_TARGET = Annotated[
    str,
    Path(
        pattern=r"^(queue|pool):[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="queue:NAME or pool:NAME",
    ),
]
F = TypeVar("F", bound=Callable[..., None])


def _removes(path: str, tag: str, summary: str, *problems: Kind) -> Callable[[F], F]:
    """A DELETE route that answers 204, no body, once its function has removed the thing."""
    return router.delete(
        path, status_code=204, tags=[tag], summary=summary, responses=documented(*problems)
    )


# -- tokens --------------------------------------------------------------------------------


@router.post(
    "/tokens",
    status_code=201,
    response_model=models.TokenCreated,
    tags=["tokens"],
    summary="Make a token (shown once)",
    responses=documented(BAD_INPUT),
)
def create_token(request: Request, record: Admin, body: models.TokenCreate) -> dict[str, Any]:
    token, made = tokens.create(client(request).store, body.scope, body.owner, body.name)
    return {**made.to_dict(), "token": token}


@router.get("/tokens", response_model=list[models.TokenInfo], tags=["tokens"], summary="Tokens")
def list_tokens(request: Request, record: Admin) -> list[dict[str, Any]]:
    return [r.to_dict() for r in tokens.list_tokens(client(request).store)]


@_removes("/tokens/{token_id}", "tokens", "Revoke a token", NOT_FOUND)
def revoke_token(request: Request, record: Admin, token_id: NAME) -> None:
    tokens.revoke(client(request).store, token_id)


# -- schedules -----------------------------------------------------------------------------


@router.post(
    "/schedules",
    status_code=201,
    response_model=dict[str, Any],
    tags=["schedules"],
    summary="Schedule a job",
    responses=documented(BAD_INPUT),
)
def create_schedule(request: Request, record: Admin, body: models.ScheduleCreate) -> dict[str, Any]:
    """Once (`at`), every ISO 8601 duration (`every`) or on `cron` (in `tz`)."""
    c = client(request)
    schedule_id = c.schedule(
        body.spec, at=body.at, every=body.every, cron=body.cron, tz=body.tz, name=body.name,
        overlap=body.overlap, catchup=body.catchup,
    )  # fmt: skip
    return schedules.show_schedule(c.store, schedule_id)


@router.get(
    "/schedules", response_model=list[dict[str, Any]], tags=["schedules"], summary="Schedules"
)
def list_schedules(request: Request, record: Reader) -> list[dict[str, Any]]:
    unbound(record, "the schedule list")
    return client(request).schedules()


@router.get(
    "/schedules/{ref}",
    response_model=dict[str, Any],
    tags=["schedules"],
    summary="A schedule (by id or name) and its recent fires",
    responses=documented(NOT_FOUND),
)
def get_schedule(request: Request, record: Reader, ref: NAME) -> dict[str, Any]:
    unbound(record, "a schedule")
    return schedules.show_schedule(client(request).store, ref)


@_removes("/schedules/{ref}", "schedules", "Delete a schedule", NOT_FOUND)
def delete_schedule(request: Request, record: Admin, ref: NAME) -> None:
    schedules.remove_schedule(client(request).store, ref)


@router.post(
    "/schedules/{ref}/pause",
    response_model=dict[str, Any],
    tags=["schedules"],
    summary="Pause a schedule",
    responses=documented(NOT_FOUND),
)
def pause_schedule(request: Request, record: Operator, ref: NAME) -> dict[str, Any]:
    unbound(record, "a schedule")
    return schedules.pause_schedule(client(request).store, ref)


@router.post(
    "/schedules/{ref}/resume",
    response_model=dict[str, Any],
    tags=["schedules"],
    summary="Resume a schedule",
    responses=documented(NOT_FOUND),
)
def resume_schedule(request: Request, record: Operator, ref: NAME) -> dict[str, Any]:
    unbound(record, "a schedule")
    return schedules.resume_schedule(client(request).store, ref)


@router.post(
    "/schedules/{ref}/backfill",
    tags=["schedules"],
    summary="Run a schedule once per fire time in a window (a line per run, as it goes)",
    responses={
        200: {
            "content": {
                NDJSON: {
                    "schema": {"type": "string"},
                    "description": "One JSON object a line, as `jobcenter backfill --json` "
                    "prints them: fire_time, job_id, outcome (submitted, retried, rerun, "
                    "running, kept, ended), state, unfinished, total.",
                }
            }
        },
        **documented(NOT_FOUND, BAD_INPUT),
    },
)
def backfill_schedule(
    request: Request, record: Operator, ref: NAME, body: models.BackfillCreate
) -> StreamingResponse:
    """Idempotent per fire time: a fire the schedule ran already is kept (unless `rerun`), so
    a request cut short and sent again submits only what is missing. The backfill runs
    while the response streams: a client that goes away stops it (send it again)."""
    unbound(record, "a schedule")
    lines = backfills.backfill(
        client(request).store,
        ref,
        parse_instant(body.start, "from"),
        parse_instant(body.to, "to"),
        max_running=body.max_running,
        rerun=body.rerun,
        wait=body.wait,
    )  # checked here: a bad window is refused before the stream starts
    return StreamingResponse(
        (json.dumps(line.to_dict()) + "\n" for line in lines), media_type=NDJSON
    )


# -- dead letters --------------------------------------------------------------------------


@router.get(
    "/dead-letters",
    response_model=list[models.DeadLetter],
    tags=["dead letters"],
    summary="The newest dead letters",
)
def dead_letters(
    request: Request,
    record: Reader,
    limit: Annotated[int, Query(ge=1, le=DEAD_LETTERS_MAX)] = LIST_LIMIT,
) -> list[dict[str, Any]]:
    unbound(record, "the dead letter list")
    return client(request).dead_letters(limit)


@router.get(
    "/dead-letters/{job_id}/{task_id}",
    response_model=models.DeadLetter,
    tags=["dead letters"],
    summary="One dead letter, with every attempt",
    responses=documented(NOT_FOUND),
)
def dead_letter(request: Request, record: Reader, job_id: NAME, task_id: NAME) -> dict[str, Any]:
    c = client(request)
    if record.owner is not None:
        check_owner(record, job_id, c.store.job_owner(job_id), c.settings.namespace)
    return c.dead_letter(job_id, task_id)


@router.post(
    "/dead-letters/{job_id}/{task_id}/requeue",
    response_model=models.Message,
    tags=["dead letters"],
    summary="Run a dead-lettered task again",
    responses=documented(NOT_FOUND, REFUSED),
)
def requeue(request: Request, record: Operator, job_id: NAME, task_id: NAME) -> models.Message:
    c = client(request)
    if record.owner is not None:
        check_owner(record, job_id, c.store.job_owner(job_id), c.settings.namespace)
    revived = c.requeue(job_id, task_id)
    return models.Message(
        message=f"job {job_id}: task {task_id} requeued ({revived} tasks to run again)"
    )


# -- pools and rate limits -----------------------------------------------------------------


@router.get("/pools", response_model=list[models.PoolView], tags=["limits"], summary="Pools")
def pools(request: Request, record: Reader) -> list[dict[str, Any]]:
    return client(request).pools()


@router.put(
    "/pools/{name}",
    response_model=models.Message,
    tags=["limits"],
    summary="Create a pool or change its size",
    responses=documented(BAD_INPUT),
)
def set_pool(request: Request, record: Admin, name: NAME, body: models.PoolSet) -> models.Message:
    client(request).set_pool(name, body.slots)
    return models.Message(message=f"pool {name}: {body.slots} slots")


@_removes("/pools/{name}", "limits", "Delete an idle pool", BAD_INPUT, NOT_FOUND, REFUSED)
def delete_pool(request: Request, record: Admin, name: NAME) -> None:
    client(request).delete_pool(name)


@router.get("/rates", response_model=list[models.RateView], tags=["limits"], summary="Rate limits")
def rates(request: Request, record: Reader) -> list[dict[str, Any]]:
    return client(request).rates()


@router.put(
    "/rates/{target}",
    response_model=models.Message,
    tags=["limits"],
    summary="Limit a queue's or a pool's starts",
    responses=documented(BAD_INPUT),
)
def set_rate(
    request: Request, record: Admin, target: RATE_TARGET, body: models.RateSet
) -> models.Message:
    client(request).set_rate(target, body.rate)
    return models.Message(message=f"{target}: at most {body.rate}")


@_removes("/rates/{target}", "limits", "Remove a rate limit", BAD_INPUT, NOT_FOUND)
def delete_rate(request: Request, record: Admin, target: RATE_TARGET) -> None:
    client(request).delete_rate(target)
