"""Jobs over HTTP: submit (with an Idempotency-Key), read (status, list, history, results,
events, also as server-sent events), cancel, retry and delete: what the CLI's job commands
do, through the same Client calls, with the same validation and messages."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from jobcenter.config import LIST_LIMIT
from jobcenter.errors import IdempotencyConflict, SpecError, WrongState
from jobcenter.model.fire_times import given_fire_time
from jobcenter.model.spec import spec_from_any
from jobcenter.model.states import JobState
from jobcenter.model.tags import parse_tag_filter
from jobcenter.storage.events import Event, Events
from jobcenter.storage.tokens import TokenRecord

from . import models
from .auth import Operator, Reader, Submitter, check_owner, client
from .problems import BAD_INPUT, NO_REDIS, NO_RESULT, NOT_FOUND, REFUSED, documented

router = APIRouter(prefix="/jobs", tags=["jobs"])

LIST_LIMIT_MAX = 1_000  # jobs per page
# Pages of the index a list filtered by name reads at most (the name has no index of its own).
NAME_SCAN_PAGES = 20
HISTORY_PAGE_MAX = 1_000
EPOCH_MAX = 1e11  # seconds: year 5138, past any time a job is created at
EVENTS_PAGE_MAX = 1_000
SSE_POLL_SECONDS = 0.25  # a live follow reads the job's stream this often
SSE_KEEPALIVE_SECONDS = 15.0  # a comment line keeps idle proxies from closing the stream
SSE_MEDIA_TYPE = "text/event-stream"
STREAM_ID = r"^[0-9]{1,20}-[0-9]{1,20}$"
JOB_ID = Annotated[str, Path(min_length=1, max_length=128, description="The job's id.")]


def _namespace(request: Request) -> str:
    return client(request).settings.namespace


def _own_job(request: Request, record: TokenRecord, job_id: str) -> None:
    """404 for a job that is not there, or not the owner-bound token's."""
    owner = client(request).store.job_owner(job_id)
    check_owner(record, job_id, owner, _namespace(request))


@router.post(
    "",
    status_code=201,
    response_model=models.JobCreated,
    summary="Submit a job",
    responses={
        200: {"model": models.JobCreated, "description": "The Idempotency-Key's job, as before"},
        **documented(BAD_INPUT, NO_REDIS),
    },
)
def submit(
    request: Request,
    response: Response,
    record: Submitter,
    spec: Annotated[
        dict[str, Any],
        Body(
            description="The job spec, as in a spec file (docs/reference/spec.md).",
            examples=[models.SEED000],
        ),
    ],
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=200,
            description="A repeated submit with this key returns the first job (same spec).",
        ),
    ] = None,
    fire_time: Annotated[
        str | None,
        Query(
            max_length=64,
            description="The time this run is for (ISO-8601 date or date-time, UTC when it "
            "has no zone): its tasks read it, its placeholders are filled with it.",
        ),
    ] = None,
) -> models.JobCreated:
    """Validate and submit a job; 201 with its id and Location. A repeat with the same
    Idempotency-Key (and spec) answers 200 with the first job's id."""
    body = dict(spec)
    if idempotency_key is not None:
        given = body.get("idempotency_key")
        if given is not None and given != idempotency_key:
            raise SpecError(
                f"the Idempotency-Key header {idempotency_key!r} and the spec's "
                f"idempotency_key {given!r} differ: send one of them"
            )
        body["idempotency_key"] = idempotency_key
    if record.owner is not None:
        if body.get("owner", record.owner) != record.owner:
            raise SpecError(
                f"this token submits as owner {record.owner!r} only, not {body['owner']!r}"
            )
        body["owner"] = record.owner
    store = client(request).store
    parsed, seconds = spec_from_any(body), None
    if fire_time is not None:
        parsed, seconds = given_fire_time(parsed, fire_time, "fire_time")
    try:
        job_id, created = store.submit(parsed, fire_time=seconds)
    except IdempotencyConflict as exc:
        if record.owner is None:
            raise
        raise IdempotencyConflict(  # no other owner's job id
            f"idempotency key {idempotency_key or body.get('idempotency_key')!r} names a job "
            "submitted with a different spec: use a new key for this one"
        ) from exc
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"{request.scope.get('root_path', '')}/jobs/{job_id}"
    return models.JobCreated(id=job_id)


def _cursor(text: str | None) -> tuple[int, str] | None:
    if text is None:
        return None
    try:
        ms, _, job_id = (
            base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode().partition(":")
        )
        return int(ms), job_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise SpecError(f"cursor {text!r} is not one this server gave") from None


def _cursor_of(row: dict[str, Any]) -> str:
    raw = f"{round(row['created_at'] * 1000)}:{row['id']}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@router.get("", response_model=models.JobPage, summary="List jobs, newest first")
def list_jobs(
    request: Request,
    record: Reader,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    state: JobState | None = None,
    schedule: Annotated[str | None, Query(max_length=128, description="Fired by it.")] = None,
    name: Annotated[str | None, Query(max_length=128, description="The job's name.")] = None,
    tag: Annotated[
        str | None, Query(max_length=200, description="A tag the job carries: `key=value`.")
    ] = None,
    since: Annotated[
        float | None, Query(ge=0, le=EPOCH_MAX, description="Created since (epoch s).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = LIST_LIMIT,
    cursor: Annotated[str | None, Query(max_length=200, description="From next_cursor.")] = None,
) -> models.JobPage:
    """Job summaries, newest first, a page at a time: follow `next_cursor`. An owner-bound
    token lists its owner's jobs only."""
    if record.owner is not None:
        if owner not in (None, record.owner):
            return models.JobPage(jobs=[], next_cursor=None)
        owner = record.owner
    store = client(request).store
    before = _cursor(cursor)
    rows: list[dict[str, Any]] = []
    examined: dict[str, Any] | None = None
    for _ in range(NAME_SCAN_PAGES if name is not None else 1):
        page = store.list_jobs(
            owner=owner,
            state=state.value if state else None,
            schedule_id=schedule,
            tag=None if tag is None else "=".join(parse_tag_filter(tag)),
            since=since,
            limit=limit,
            before=before,
        )
        for row in page:
            examined = row
            if name is None or row["name"] == name:
                rows.append(row)
                if len(rows) == limit:
                    return _page_of(rows, _cursor_of(row))
        if len(page) < limit:
            return _page_of(rows, None)
        before = (round(page[-1]["created_at"] * 1000), page[-1]["id"])
    # a name few jobs have: what was read so far, and where to read on
    return _page_of(rows, _cursor_of(examined) if examined else None)


def _page_of(rows: list[dict[str, Any]], following: str | None) -> models.JobPage:
    return models.JobPage(jobs=[models.JobSummary(**row) for row in rows], next_cursor=following)


@router.get(
    "/{job_id}",
    response_model=models.JobStatus,
    summary="A job and each of its tasks",
    responses=documented(NOT_FOUND),
)
def get_job(request: Request, record: Reader, job_id: JOB_ID) -> dict[str, Any]:
    """As `jobcenter status --json` prints it."""
    status = client(request).status(job_id)
    check_owner(record, job_id, status["owner"], _namespace(request))
    return status


@router.get(
    "/{job_id}/history",
    response_model=models.HistoryPage,
    summary="Every finished attempt, oldest first",
    responses=documented(NOT_FOUND),
)
def history(
    request: Request,
    record: Reader,
    job_id: JOB_ID,
    start: Annotated[int, Query(ge=0)] = 0,
    count: Annotated[int, Query(ge=1, le=HISTORY_PAGE_MAX)] = 100,
) -> models.HistoryPage:
    _own_job(request, record, job_id)
    rows = client(request).history(job_id, start, count)
    following = start + len(rows) if len(rows) == count else None
    return models.HistoryPage(
        attempts=[models.AttemptRecord(**row) for row in rows], next_start=following
    )


@router.get(
    "/{job_id}/tasks/{task_id}/result",
    response_model=models.TaskResult,
    summary="What a task returned",
    responses=documented(NOT_FOUND, NO_RESULT),
)
def result(
    request: Request,
    record: Reader,
    job_id: JOB_ID,
    task_id: Annotated[str, Path(min_length=1, max_length=200)],
) -> models.TaskResult:
    """A mapped task's result is its instances' results, in element order. 409 while the
    task has not succeeded."""
    _own_job(request, record, job_id)
    value = client(request).result(job_id, task_id)
    return models.TaskResult(job=job_id, task=task_id, result=models.jsonable(value))


@router.get(
    "/{job_id}/tasks/{task_id}/logs",
    response_model=models.TaskLog,
    summary="What an attempt of a task printed and logged",
    responses=documented(NOT_FOUND),
)
def task_log(
    request: Request,
    record: Reader,
    job_id: JOB_ID,
    task_id: Annotated[str, Path(min_length=1, max_length=200)],
    attempt: Annotated[int | None, Query(ge=1, description="Default: the latest.")] = None,
) -> models.TaskLog:
    """As `jobcenter logs JOB TASK [--attempt N]` prints it; a running attempt's log so far
    is as its worker's last heartbeat stored it. 404 for an attempt the task has not had."""
    _own_job(request, record, job_id)
    return models.TaskLog(**client(request).task_log(job_id, task_id, attempt))


def _page(events: list[Event], limit: int) -> list[Event]:
    """At most `limit` events, never cutting one stream entry's events apart (they share
    its id, the cursor): unless that entry alone is over the limit."""
    if len(events) <= limit:
        return events
    cut = limit
    while cut > 0 and events[cut - 1].id == events[cut].id:
        cut -= 1
    if cut == 0:
        cut = limit
        while cut < len(events) and events[cut].id == events[cut - 1].id:
            cut += 1
    return events[:cut]


def _event(e: Event) -> dict[str, Any]:
    row = e.to_dict()
    row.pop("shard", None)
    return row


@router.get(
    "/{job_id}/events",
    response_model=models.EventPage,
    summary="The job's events (JSON, or a live server-sent event stream)",
    responses={
        200: {
            "content": {
                SSE_MEDIA_TYPE: {
                    "schema": {"type": "string"},
                    "description": "With Accept: text/event-stream: each event as it comes "
                    "(id, event: its kind, data: the event as JSON) until the job ends.",
                }
            }
        },
        **documented(NOT_FOUND, BAD_INPUT),
    },
)
async def events(
    request: Request,
    record: Reader,
    job_id: JOB_ID,
    after: Annotated[
        str | None, Query(pattern=STREAM_ID, description="A cursor: the events after it.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=EVENTS_PAGE_MAX)] = EVENTS_PAGE_MAX,
    last_event_id: Annotated[str | None, Header(pattern=STREAM_ID)] = None,
) -> Any:
    """Every transition of the job, oldest first, from its start (or `after` a cursor). With
    `Accept: text/event-stream` they come as server-sent events, live, until the job has
    ended (a reconnect with Last-Event-ID goes on where it stopped)."""
    await run_in_threadpool(_own_job, request, record, job_id)
    stream = Events(client(request).store)
    shard = client(request).store.keys.job_shard(job_id)
    if SSE_MEDIA_TYPE in request.headers.get("accept", ""):
        start = last_event_id or after
        return StreamingResponse(
            _follow(request, stream, job_id, shard, start),
            media_type=SSE_MEDIA_TYPE,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    found, cursor = await run_in_threadpool(_read, stream, job_id, shard, after)
    shown = _page(found, limit)
    if len(shown) < len(found):
        cursor = shown[-1].id
    return models.EventPage(events=[models.EventRecord(**_event(e)) for e in shown], after=cursor)


def _read(stream: Events, job_id: str, shard: int, after: str | None) -> tuple[list[Event], str]:
    if after is None:
        found, cursor = stream.read(job_id=job_id)
        return found, cursor[shard]
    moved = {shard: after}
    found = stream.after(moved, job_id=job_id)
    return found, moved[shard]


async def _follow(
    request: Request, stream: Events, job_id: str, shard: int, start: str | None
) -> AsyncIterator[str]:
    """Server-sent events: what happened so far (after `start`), then each event as it comes,
    until the job has ended and nothing more came."""
    store = client(request).store
    found, cursor = await run_in_threadpool(_read, stream, job_id, shard, start)
    quiet = 0.0
    while True:
        for e in found:
            yield f"id: {e.id}\nevent: {e.kind}\ndata: {json.dumps(_event(e))}\n\n"
        if found:
            quiet = 0.0
        else:
            state = await run_in_threadpool(store.job_state, job_id)
            if state is None or state.terminal:
                yield "event: end\ndata: {}\n\n"
                return
            quiet += SSE_POLL_SECONDS
            if quiet >= SSE_KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"
            if await request.is_disconnected():
                return
            await asyncio.sleep(SSE_POLL_SECONDS)
        moved = {shard: cursor}
        found = await run_in_threadpool(stream.after, moved, job_id=job_id)
        cursor = moved[shard]


@router.post(
    "/{job_id}/cancel",
    response_model=models.JobAction,
    summary="Cancel a job",
    responses=documented(NOT_FOUND, REFUSED),
)
def cancel(request: Request, record: Operator, job_id: JOB_ID) -> models.JobAction:
    """Nothing more of it starts; running attempts are revoked (their results discarded).
    409 for a job that has ended."""
    _own_job(request, record, job_id)
    c = client(request)
    state = c.state(job_id)
    if JobState(state).terminal:
        raise WrongState(f"job {job_id} is {state} already")
    now = c.cancel(job_id)
    return models.JobAction(id=job_id, state=JobState(now), message=f"job {job_id} {now}")


@router.post(
    "/{job_id}/signals/{name}",
    response_model=models.SignalSent,
    summary="Send a signal to a job's waiting tasks",
    responses=documented(NOT_FOUND, REFUSED, BAD_INPUT),
)
def signal(
    request: Request,
    record: Operator,
    job_id: JOB_ID,
    name: Annotated[str, Path(description="The signal: what `wait_for: {signal: NAME}` names.")],
    body: models.SignalRequest | None = None,
) -> models.SignalSent:
    """Its tasks with `wait_for: {signal: NAME}` succeed with the payload as their result
    (one not at its wait yet keeps it). The same signal and payload again changes nothing;
    409 when nothing waits for it, or it was sent with another payload."""
    _own_job(request, record, job_id)
    released, kept = client(request).signal(job_id, name, body.payload if body else None)
    told = f"released {released}, kept by {kept}" if released or kept else "sent already"
    return models.SignalSent(
        id=job_id, signal=name, released=released, kept=kept, message=f"job {job_id}: {told}"
    )


@router.post(
    "/{job_id}/retry",
    response_model=models.JobAction,
    summary="Re-run a job's failed tasks",
    responses=documented(NOT_FOUND, REFUSED),
)
def retry(request: Request, record: Operator, job_id: JOB_ID) -> models.JobAction:
    """Its failed and upstream_failed tasks run again; succeeded ones are kept."""
    _own_job(request, record, job_id)
    c = client(request)
    revived = c.retry(job_id)
    message = f"job {job_id}: {revived} tasks to run again"
    return models.JobAction(id=job_id, state=JobState(c.state(job_id)), message=message)


TASK_ID = Annotated[str, Path(min_length=1, max_length=200, description="The task's id.")]


def _who(record: TokenRecord) -> str:
    """Who acts, for the history: the token's name, else its id."""
    return f"token:{record.name or record.id}"


@router.post(
    "/{job_id}/tasks/{task_id}/clear",
    response_model=models.JobAction,
    summary="Run a task again (with those below or above it)",
    responses=documented(NOT_FOUND, REFUSED),
)
def clear_task(
    request: Request,
    record: Operator,
    job_id: JOB_ID,
    task_id: TASK_ID,
    body: Annotated[models.ClearRequest | None, Body()] = None,
) -> models.JobAction:
    """As `jobcenter clear`: the task, whatever it ended as, and with `downstream` or
    `upstream` every task below or above it that ended, run again; the rest keeps its
    state and results. 409 while a task to clear is queued, running or waiting for a retry."""
    _own_job(request, record, job_id)
    body = body or models.ClearRequest()
    c = client(request)
    cleared, ids = c.clear(
        job_id, [task_id, *body.tasks], downstream=body.downstream, upstream=body.upstream,
        by=_who(record), reason=body.reason,
    )  # fmt: skip
    message = f"job {job_id}: {cleared} tasks to run again ({', '.join(ids)})"
    return models.JobAction(id=job_id, state=JobState(c.state(job_id)), message=message)


@router.post(
    "/{job_id}/tasks/{task_id}/mark",
    response_model=models.JobAction,
    summary="Settle a task by hand",
    responses=documented(NOT_FOUND, REFUSED),
)
def mark_task(
    request: Request,
    record: Operator,
    job_id: JOB_ID,
    task_id: TASK_ID,
    body: Annotated[models.MarkRequest, Body()],
) -> models.JobAction:
    """As `jobcenter mark`: the task ends as `state` (succeeded with `result`) and the job
    goes on as if it had ended so. From waiting, queued, retry_wait, failed or
    upstream_failed; 409 while an attempt runs or once it ended otherwise."""
    _own_job(request, record, job_id)
    c = client(request)
    was = c.mark(
        job_id, task_id, body.state, result=body.result, by=_who(record), reason=body.reason
    )
    message = f"job {job_id}: task {task_id} marked {body.state} (it was {was})"
    return models.JobAction(id=job_id, state=JobState(c.state(job_id)), message=message)


@router.delete(
    "/{job_id}",
    status_code=204,
    summary="Delete a finished job",
    responses=documented(NOT_FOUND, REFUSED),
)
def delete(request: Request, record: Operator, job_id: JOB_ID) -> Response:
    """The job and every trace of it; 409 while it runs."""
    _own_job(request, record, job_id)
    client(request).delete(job_id)
    return Response(status_code=204)
