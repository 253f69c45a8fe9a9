"""What a person can change from the dashboard, each a POST that needs the token: cancel
and retry a job, send it a signal, requeue a dead letter, pause, resume and run a schedule
now."""

from __future__ import annotations

import json
from collections.abc import Callable
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

from .auth import require_token
from .pages import client


async def _act(
    request: Request, do: Callable[[Client], str], back: str, job_id: str | None = None
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
    Route("/jobs/{job_id}/retry", retry, methods=["POST"]),
    Route("/dead-letters/{job_id}/{task_id:path}/requeue", requeue, methods=["POST"]),
    Route("/schedules/{schedule_id}/pause", pause, methods=["POST"]),
    Route("/schedules/{schedule_id}/resume", resume, methods=["POST"]),
    Route("/schedules/{schedule_id}/run", run_now, methods=["POST"]),
]
