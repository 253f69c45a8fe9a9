"""POST /api/v1/jobs/bulk/<action>: retry, cancel, delete or requeue the dead letters of
every job a filter chooses, as the CLI's `retry --tag ...` does (storage/bulk.py), at most
`limit` jobs a call. Mounted before the jobs router, so "bulk" is never read as a job id."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from fastapi import APIRouter, Path, Request

from jobcenter import schedules
from jobcenter.errors import SpecError
from jobcenter.model.tags import parse_tag_filter
from jobcenter.storage import bulk
from jobcenter.storage.views import JobFilter

from . import models
from .auth import Operator, client
from .problems import BAD_INPUT, documented

router = APIRouter(prefix="/jobs/bulk", tags=["jobs"])


class Action(StrEnum):
    RETRY = "retry"
    CANCEL = "cancel"
    DELETE = "delete"
    REQUEUE = "requeue"


@router.post(
    "/{action}",
    response_model=models.BulkResult,
    summary="Act on every job a filter chooses",
    responses=documented(BAD_INPUT),
)
def act(
    request: Request,
    record: Operator,
    body: models.BulkRequest,
    action: Annotated[Action, Path(description="retry, cancel, delete or requeue (dead letters).")],
) -> models.BulkResult:
    """`retry` the failed jobs, `cancel` the unfinished ones, `delete` the finished ones or
    `requeue` the dead letters of the jobs the filter chooses, newest first, at most `limit`
    of them (`more` says when others are left: call again). `dry_run` lists them, changing
    nothing. An owner-bound token acts on its owner's jobs only."""
    store = client(request).store
    owner = body.owner
    if record.owner is not None:
        if owner not in (None, record.owner):
            return models.BulkResult(action=action.value, dry_run=body.dry_run, count=0, jobs=[])
        owner = record.owner
    where = bulk.BulkFilter(
        JobFilter(
            owner=owner,
            state=body.state.value if body.state else None,
            schedule_id=schedules.filter_id(store, body.schedule) if body.schedule else None,
            name=body.name,
            tag="=".join(parse_tag_filter(body.tag)) if body.tag else None,
        ),
        since=body.since,
        until=body.until,
    )
    if where.empty:
        raise SpecError("a bulk action needs a filter: state, owner, name, schedule, tag, since")
    chosen = bulk.ACTIONS[action.value]
    outcomes = list(bulk.run(store, chosen, where, dry_run=body.dry_run, limit=body.limit))
    more = len(outcomes) == body.limit  # the limit was reached: there may be more
    jobs = [models.BulkOutcome(id=o.job.id, message=o.message, error=o.error) for o in outcomes]
    done = sum(1 for j in jobs if j.error is None)
    return models.BulkResult(
        action=action.value, dry_run=body.dry_run, count=done, jobs=jobs, more=more
    )
