"""The JSON the job page's script reads: the graph once, then the live states (polled: the
first poll reads every task's state, the next ones only the event stream's news after the
cursor the last one gave), one task's detail on a click, and the job's notifications."""

from __future__ import annotations

from dataclasses import asdict

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from jobcenter.storage import task_logs, views
from jobcenter.storage.events import Events

from . import graph
from .pages import client

# How often the page asks for live states: twice a second for any job a person can watch
# task by task; less often for a huge one, whose every poll reads all its task states.
POLL_MS = 500
POLL_MS_LARGE = 2_000
LARGE_JOB = 20_000


def job_graph(request: Request) -> JSONResponse:
    g = views.job_graph(client(request).store, request.path_params["job_id"])
    drawn = graph.picture(g.ids, g.edges)
    return JSONResponse(
        {
            "job": asdict(g.job),
            "ids": g.ids,
            "states": g.states,
            "edges_known": g.edges_known,
            "picture": drawn.to_dict(),
            "poll_ms": POLL_MS_LARGE if len(g.ids) > LARGE_JOB else POLL_MS,
        }
    )


def live(request: Request) -> JSONResponse:
    """Every task's state (`states`), or with `?after=CURSOR` the states that changed since
    (`changes`: index -> state) when the event stream can tell; `after` is the next cursor
    (null when events are off)."""
    store = client(request).store
    job_id = request.path_params["job_id"]
    after = request.query_params.get("after")
    stream = Events(store) if store.settings.events_maxlen > 0 else None
    if stream is not None and after:
        news = stream.state_changes(job_id, after)
        if news is not None:
            changes, cursor = news
            state, finished = views.job_state_now(store, job_id)
            return JSONResponse(
                {"state": state, "finished_at": finished, "changes": changes, "after": cursor}
            )
    # the cursor is read first, so a change between the two reads comes again, never lost
    latest = stream.latest(job_id)[store.keys.job_shard(job_id)] if stream else None
    states = views.live_states(store, job_id)
    return JSONResponse({**asdict(states), "after": latest})


def notifications(request: Request) -> JSONResponse:
    """Each `notify:` channel's delivery and the latest attempts (null without `notify:`)."""
    found = views.job_notifications(client(request).store, request.path_params["job_id"])
    return JSONResponse({"notifications": found})


def task(request: Request) -> JSONResponse:
    job_id, index = request.path_params["job_id"], request.path_params["index"]
    return JSONResponse(asdict(views.task_detail(client(request).store, job_id, index)))


def task_log(request: Request) -> JSONResponse:
    """The log of one attempt of a task (`?attempt=N`, default the latest), as
    `jobcenter logs` shows it."""
    job_id, index = request.path_params["job_id"], request.path_params["index"]
    asked = request.query_params.get("attempt", "")
    attempt = int(asked) if asked.isdigit() and int(asked) > 0 else None
    return JSONResponse(task_logs.for_index(client(request).store, job_id, index, attempt))


ROUTES = [
    Route("/api/jobs/{job_id}/graph", job_graph),
    Route("/api/jobs/{job_id}/live", live),
    Route("/api/jobs/{job_id}/tasks/{index:int}", task),
    Route("/api/jobs/{job_id}/tasks/{index:int}/logs", task_log),
    Route("/api/jobs/{job_id}/notifications", notifications),
]
