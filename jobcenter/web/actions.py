"""What a person can change from the dashboard, each a POST that needs the token: cancel,
retry, pause and resume a job, send it a signal, clear and mark a task, pause and resume a
queue, retry the failed jobs of a list, requeue a dead letter, pause, resume and run a
schedule now."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from jobcenter import schedules
from jobcenter.client import Client
from jobcenter.errors import NotFound, WrongState
from jobcenter.model.states import JobState
from jobcenter.storage import bulk
from jobcenter.storage.views import JobFilter

from .auth import require_token
from .pages import client, job_filter

BULK_RETRY_MAX = 1_000  # jobs one click retries: the request stays short

REASON_MAX = 1_000  # characters of a reason kept in the history
DASHBOARD_PERSON = "dashboard"  # who acts with the dashboard's own token (it names no one)


async def _act(
    request: Request,
    do: Callable[[Client], str],
    back: str,
    job_id: str | None = None,
    with_person: Callable[[str], Callable[[Client], str]] | None = None,
) -> Response:
    """Check the token, run `do` (blocking Redis calls: in a thread), and answer JSON to a
    script or a redirect with a notice to a plain form. An owner-bound API token acts on
    its owner's job only (`job_id`: another's does not exist for it)."""
    record = await require_token(request, request.app.state.token)
    if record is not None and record.owner is not None:
        if job_id is None:
            raise HTTPException(403, f"this token is bound to owner {record.owner!r}")
        owner = await run_in_threadpool(client(request).store.job_owner, job_id)
        if owner != record.owner:
            raise NotFound.job(job_id, client(request).settings.namespace)
    if with_person is not None:  # the history names who acted: the API token's name
        person = DASHBOARD_PERSON if record is None else f"token:{record.name or record.id}"
        do = with_person(person)
    message = await run_in_threadpool(do, client(request))
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse({"ok": True, "message": message})
    return RedirectResponse(f"{back}?notice={quote(message)}", status_code=303)


async def cancel(request: Request) -> Response:
    job_id = request.path_params["job_id"]

    def do(c: Client) -> str:
        state = c.state(job_id)
        if JobState(state).terminal:
            raise WrongState(f"job {job_id} is {state} already")
        return f"job {job_id} {c.cancel(job_id)}"

    return await _act(request, do, f"/jobs/{job_id}", job_id)


async def retry(request: Request) -> Response:
    job_id = request.path_params["job_id"]

    def do(c: Client) -> str:
        return f"job {job_id}: {c.retry(job_id)} tasks to run again"

    return await _act(request, do, f"/jobs/{job_id}", job_id)


def _reason(request: Request) -> str:
    reason = request.query_params.get("reason", "")
    if len(reason) > REASON_MAX:
        raise ValueError(f"a reason takes at most {REASON_MAX} characters")
    return reason


def _result(request: Request) -> Any:
    """A mark's result, JSON in `?result=` (None without it)."""
    if not request.query_params.get("result"):
        return None
    try:
        return json.loads(request.query_params["result"])
    except ValueError as exc:
        raise ValueError(f"the result must be JSON: {exc}") from None


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true", "on")


async def clear_task(request: Request) -> Response:
    """Run a task again (`?downstream=1`, `?upstream=1`: with those below or above it)."""
    job_id, task_id = request.path_params["job_id"], request.path_params["task_id"]
    downstream, upstream = _flag(request, "downstream"), _flag(request, "upstream")

    def as_person(person: str) -> Callable[[Client], str]:
        def do(c: Client) -> str:  # the query is read once the token passed
            reason = _reason(request)
            cleared, ids = c.clear(
                job_id, [task_id], downstream=downstream, upstream=upstream, by=person,
                reason=reason,
            )  # fmt: skip
            return f"job {job_id}: {cleared} tasks to run again ({', '.join(ids)})"

        return do

    return await _act(request, as_person(DASHBOARD_PERSON), f"/jobs/{job_id}", job_id, as_person)


async def mark_task(request: Request) -> Response:
    """Settle a task by hand: `?state=succeeded|failed|skipped`, `&result=JSON`."""
    job_id, task_id = request.path_params["job_id"], request.path_params["task_id"]
    outcome = request.query_params.get("state", "")

    def as_person(person: str) -> Callable[[Client], str]:
        def do(c: Client) -> str:  # the query is read once the token passed
            reason, result = _reason(request), _result(request)
            was = c.mark(job_id, task_id, outcome, result=result, by=person, reason=reason)
            return f"job {job_id}: task {task_id} marked {outcome} (it was {was})"

        return do

    return await _act(request, as_person(DASHBOARD_PERSON), f"/jobs/{job_id}", job_id, as_person)


async def pause_job(request: Request) -> Response:
    job_id = request.path_params["job_id"]

    def do(c: Client) -> str:
        return f"job {job_id} {'paused' if c.pause(job_id) else 'was paused already'}"

    return await _act(request, do, f"/jobs/{job_id}", job_id)


async def resume_job(request: Request) -> Response:
    job_id = request.path_params["job_id"]

    def do(c: Client) -> str:
        return f"job {job_id} {'resumed' if c.resume(job_id) else 'was not paused'}"

    return await _act(request, do, f"/jobs/{job_id}", job_id)


async def pause_queue(request: Request) -> Response:
    queue = request.path_params["queue"]

    def do(c: Client) -> str:
        return f"queue {queue} {'paused' if c.pause_queue(queue) else 'was paused already'}"

    return await _act(request, do, "/queues")


async def resume_queue(request: Request) -> Response:
    queue = request.path_params["queue"]

    def do(c: Client) -> str:
        return f"queue {queue} {'resumed' if c.resume_queue(queue) else 'was not paused'}"

    return await _act(request, do, "/queues")


async def bulk_retry(request: Request) -> Response:
    """Retry the failed jobs of the filtered list (at most BULK_RETRY_MAX a click)."""
    filters = job_filter(request)
    if filters == JobFilter():
        raise ValueError("filter the list first: a bulk retry acts on the jobs it shows")
    back = f"/jobs?{request.url.query}" if request.url.query else "/jobs"

    def do(c: Client) -> str:
        outcomes = bulk.run(
            c.store, bulk.ACTIONS["retry"], bulk.BulkFilter(filters), limit=BULK_RETRY_MAX
        )
        done = sum(1 for o in outcomes if o.error is None)
        return f"{done} failed job(s) retried"

    return await _act(request, do, back.split("?")[0])


async def requeue(request: Request) -> Response:
    job_id, task_id = request.path_params["job_id"], request.path_params["task_id"]

    def do(c: Client) -> str:
        return f"job {job_id}: task {task_id} requeued ({c.requeue(job_id, task_id)} to run again)"

    return await _act(request, do, "/dead-letters", job_id)


async def pause(request: Request) -> Response:
    ref = request.path_params["schedule_id"]

    def do(c: Client) -> str:
        return f"schedule {schedules.pause_schedule(c.store, ref)['id']} paused"

    return await _act(request, do, "/schedules")


async def resume(request: Request) -> Response:
    ref = request.path_params["schedule_id"]

    def do(c: Client) -> str:
        return f"schedule {schedules.resume_schedule(c.store, ref)['id']} resumed"

    return await _act(request, do, "/schedules")


async def run_now(request: Request) -> Response:
    ref = request.path_params["schedule_id"]

    def do(c: Client) -> str:
        return f"schedule {ref}: job {schedules.run_schedule_now(c.store, ref)} submitted"

    return await _act(request, do, f"/schedules/{ref}")


async def signal(request: Request) -> Response:
    """Send a signal (the job page's approve / reject): its payload is JSON in `payload`."""
    job_id, name = request.path_params["job_id"], request.path_params["name"]
    try:
        payload = json.loads(request.query_params.get("payload", "null"))
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"payload: not JSON: {exc}") from None

    def do(c: Client) -> str:
        released, kept = c.signal(job_id, name, payload)
        told = f"released {released} task(s)" if released or kept else "was sent already"
        return f"job {job_id}: signal {name} {told}"

    return await _act(request, do, f"/jobs/{job_id}", job_id)


ROUTES = [
    Route("/jobs/{job_id}/signal/{name}", signal, methods=["POST"]),
    Route("/jobs/{job_id}/cancel", cancel, methods=["POST"]),
    Route("/jobs/bulk/retry", bulk_retry, methods=["POST"]),
    Route("/jobs/{job_id}/retry", retry, methods=["POST"]),
    Route("/jobs/{job_id}/tasks/{task_id:path}/clear", clear_task, methods=["POST"]),
    Route("/jobs/{job_id}/tasks/{task_id:path}/mark", mark_task, methods=["POST"]),
    Route("/jobs/{job_id}/pause", pause_job, methods=["POST"]),
    Route("/jobs/{job_id}/resume", resume_job, methods=["POST"]),
    Route("/queues/{queue}/pause", pause_queue, methods=["POST"]),
    Route("/queues/{queue}/resume", resume_queue, methods=["POST"]),
    Route("/dead-letters/{job_id}/{task_id:path}/requeue", requeue, methods=["POST"]),
    Route("/schedules/{schedule_id}/pause", pause, methods=["POST"]),
    Route("/schedules/{schedule_id}/resume", resume, methods=["POST"]),
    Route("/schedules/{schedule_id}/run", run_now, methods=["POST"]),
]
