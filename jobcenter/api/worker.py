"""The worker protocol over HTTP, for executors in any language: claim (a long poll),
heartbeat, complete, fail. The calls are runtime/remote.py's, on the Python worker's own
Lua transitions, leases and fencing tokens."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.concurrency import run_in_threadpool

from jobcenter.errors import SpecError
from jobcenter.model.ids import handler_id
from jobcenter.model.spec import TASK_NAME_RE, check_name
from jobcenter.runtime.remote import Executors
from jobcenter.storage.keyspace.keys import node_queue

from . import models
from .auth import Worker
from .problems import BAD_INPUT, NO_REDIS, NOT_FOUND, REFUSED, documented

router = APIRouter(prefix="/worker", tags=["worker protocol"])

POLL_FIRST_SECONDS = 0.02  # a waiting claim looks again this soon, then less often...
POLL_MAX_SECONDS = 0.5  # ...down to this (each look is one claim call per shard)
TOKEN = Annotated[
    str, Path(min_length=1, max_length=4_096, description="The attempt token a claim gave.")
]


def executors(request: Request) -> Executors:
    found: Executors = request.app.state.executors
    return found


def _queues(body: models.ClaimRequest) -> list[str]:
    queues = [check_name(q, "each of 'queues'") for q in body.queues]
    for name in body.tasks:
        if not isinstance(name, str) or not TASK_NAME_RE.fullmatch(name):
            raise SpecError(f"'tasks': {name!r} is not a task name")
    return ([node_queue(body.node)] if body.node else []) + queues


@router.post(
    "/claim",
    response_model=models.ClaimResponse,
    summary="Take attempts to run (a long poll)",
    responses=documented(BAD_INPUT, NO_REDIS),
)
async def claim(
    request: Request, record: Worker, body: models.ClaimRequest
) -> models.ClaimResponse:
    """Start up to `max` attempts of tasks this executor can run, from `queues` in order;
    wait up to `wait` seconds for one when none is ready (an empty list then). Tasks whose
    names it did not list go back to their queue for a worker that has them. Each attempt
    must then be heartbeated (every third of `lease_seconds`) and reported once."""
    queues = _queues(body)
    handler = body.worker or handler_id()
    found = executors(request)
    host = request.client.host if request.client else "?"
    await run_in_threadpool(
        lambda: found.register(
            handler, host=host, queues=queues, names=sorted(set(body.tasks)), node=body.node,
            slots=body.max,
        )
    )  # fmt: skip
    wait = min(body.wait, request.app.state.claim_wait_max)
    deadline = time.monotonic() + wait
    pause = POLL_FIRST_SECONDS
    names = set(body.tasks)
    while True:
        attempts = await run_in_threadpool(found.claim, handler, queues, names, body.max)
        if attempts:
            if await request.is_disconnected():  # nobody to run them: back to the queue
                await run_in_threadpool(found.release, attempts)
                attempts = []
            return models.ClaimResponse(
                worker=handler, attempts=[models.AttemptModel(**asdict(a)) for a in attempts]
            )
        left = deadline - time.monotonic()
        if left <= 0 or await request.is_disconnected():
            return models.ClaimResponse(worker=handler, attempts=[])
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX_SECONDS)


@router.post(
    "/attempts/{token}/heartbeat",
    response_model=models.HeartbeatResponse,
    summary="Renew an attempt's lease",
    responses=documented(NOT_FOUND, REFUSED, NO_REDIS),
)
def heartbeat(
    request: Request, record: Worker, token: TOKEN, body: models.HeartbeatRequest | None = None
) -> models.HeartbeatResponse:
    """Renew the lease (and store the progress text). 409 once the attempt was taken over,
    cancelled, or ran past its timeout: stop it then; its result would be discarded."""
    found = executors(request)
    found.heartbeat(token, body.progress if body else None, body.log if body else None)
    return models.HeartbeatResponse(lease_seconds=found.store.settings.lease_seconds)


@router.post(
    "/attempts/{token}/complete",
    response_model=models.ReportResponse,
    summary="Report success, with the result",
    responses=documented(NOT_FOUND, REFUSED, BAD_INPUT, NO_REDIS),
)
def complete(
    request: Request, record: Worker, token: TOKEN, body: models.CompleteRequest
) -> models.ReportResponse:
    """Store the result and release the task's children. 409 for an attempt taken over or
    ended (nothing changes); a repeat of a report that went through answers it again."""
    outcome = executors(request).complete(token, body.result, body.log)
    return models.ReportResponse(state=outcome.state, repeated=outcome.repeated)  # type: ignore[arg-type]


@router.post(
    "/attempts/{token}/fail",
    response_model=models.ReportResponse,
    summary="Report failure",
    responses=documented(NOT_FOUND, REFUSED, NO_REDIS),
)
def fail(
    request: Request, record: Worker, token: TOKEN, body: models.FailRequest
) -> models.ReportResponse:
    """Retried after the task's backoff while attempts remain (and `retryable`), else
    failed for good: dead-lettered, its descendants upstream_failed."""
    outcome = executors(request).fail(token, body.error, body.retryable, body.retry_in, body.log)
    return models.ReportResponse(state=outcome.state, repeated=outcome.repeated)  # type: ignore[arg-type]
