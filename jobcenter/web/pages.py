"""The HTML pages: jobs, one job, workers, queues, dead letters, schedules, recovery. Each
reads through the Client or `jobcenter.storage.views`, in bounded calls."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from jobcenter import schedules
from jobcenter.client import Client
from jobcenter.model.durations import format_seconds
from jobcenter.model.states import JobState
from jobcenter.storage import views
from jobcenter.storage.store import Store

DEAD_LETTERS_PAGE = 100  # the newest dead letters listed
AUTO_REFRESH_SECONDS = 5  # workers and queues pages reload themselves this often
ARCHIVE_WARN_SECONDS = 300  # a finished job waiting this long for the archive is warned of
LIST_REFRESH_SECONDS = 3  # the jobs list reads itself again this often (app.js keepLive)


def client(request: Request) -> Client:
    c: Client = request.app.state.client
    return c


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """A page with what every page shows: the namespace, whether actions are allowed."""
    templates = request.app.state.templates
    context.update(
        namespace=client(request).settings.namespace,
        actions=request.app.state.token is not None or request.app.state.api_tokens,
        notice=request.query_params.get("notice"),
        path=request.url.path,
        archive_warning=archive_warning(client(request).store),
    )
    response: Response = templates.TemplateResponse(
        request, template, context, status_code=status_code
    )
    return response


def archive_warning(store: Store) -> str | None:
    """What every page warns of about the archive (JOBCENTER_ARCHIVE_URL): its last write
    failed, or finished jobs have waited for it past ARCHIVE_WARN_SECONDS; None if all is well."""
    failure = store.archive_status()
    if failure is not None:
        error, _ = failure
        return f"the archive is unreachable: {error}; finished jobs wait in Redis"
    waiting, oldest = store.archive_backlog()
    if oldest is None:
        return None
    age = (store.now_ms() - oldest) / 1000
    if age < ARCHIVE_WARN_SECONDS:
        return None
    return (
        f"{waiting} finished jobs wait for the archive, the oldest for {format_seconds(int(age))}: "
        "is a worker with JOBCENTER_ARCHIVE_URL running?"
    )


def home(request: Request) -> Response:
    return RedirectResponse("/jobs", status_code=307)


def jobs(request: Request) -> Response:
    q = request.query_params
    filters = views.JobFilter(
        owner=q.get("owner") or None,
        state=q.get("state") or None,
        schedule_id=schedules.filter_id(client(request).store, q["schedule"])
        if q.get("schedule")
        else None,
        name=q.get("name") or None,
    )
    if filters.state and filters.state not in {s.value for s in JobState}:
        raise ValueError(f"unknown job state {filters.state!r}")
    size = _int_param(q.get("size"), views.PAGE_SIZE, "size")
    page = views.jobs_page(client(request).store, filters, before=q.get("before"), size=size)
    kept = {k: v for k, v in q.items() if k in ("owner", "state", "schedule", "name", "size") and v}
    older = f"/jobs?{urlencode({**kept, 'before': page.older})}" if page.older else None
    return render(
        request,
        "jobs.html",
        page=page,
        filters=filters,
        states=[s.value for s in JobState],
        older=older,
        newest=f"/jobs?{urlencode(kept)}" if q.get("before") else None,
        live_every=LIST_REFRESH_SECONDS,
    )


def _int_param(raw: str | None, default: int, name: str) -> int:
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None


def job(request: Request) -> Response:
    summary, notifications = _job_and_notifications(request)
    return render(request, "job.html", job=summary, notifications=notifications)


def job_notifications(request: Request) -> Response:
    """The job page's notifications section alone, for its script to refresh."""
    summary, notifications = _job_and_notifications(request)
    if notifications is None:
        return Response(status_code=204)
    return render(request, "_notifications.html", job=summary, notifications=notifications)


def _job_and_notifications(request: Request) -> tuple[views.JobSummary, dict[str, Any] | None]:
    store = client(request).store
    summary = views.job_summary(store, request.path_params["job_id"])
    return summary, views.job_notifications(store, summary.id)


def workers(request: Request) -> Response:
    view = views.workers(client(request).store)
    return render(request, "workers.html", view=view, refresh=AUTO_REFRESH_SECONDS)


def queues(request: Request) -> Response:
    c = client(request)
    asked = [q for q in request.query_params.get("queue", "").split(",") if q]
    names = sorted(set(views.known_queues(c.store)) | set(asked))
    view = views.queues(c.store, names)
    return render(
        request,
        "queues.html",
        view=view,
        pools=c.pools(),
        rates=c.rates(),
        refresh=AUTO_REFRESH_SECONDS,
    )


def dead_letters(request: Request) -> Response:
    c = client(request)
    rows = c.dead_letters(limit=DEAD_LETTERS_PAGE)
    total = views.dead_letter_count(c.store)
    return render(request, "dead_letters.html", rows=rows, total=total)


def schedule_list(request: Request) -> Response:
    return render(request, "schedules.html", rows=client(request).schedules())


def schedule_page(request: Request) -> Response:
    store = client(request).store
    view = schedules.show_schedule(store, request.path_params["schedule_id"])
    return render(request, "schedule.html", s=view)


def recovery(request: Request) -> Response:
    return render(request, "recovery.html", view=views.recovery(client(request).store))


ROUTES = [
    Route("/", home),
    Route("/jobs", jobs),
    Route("/jobs/{job_id}", job),
    Route("/jobs/{job_id}/notifications", job_notifications),
    Route("/workers", workers),
    Route("/queues", queues),
    Route("/dead-letters", dead_letters),
    Route("/schedules", schedule_list),
    Route("/schedules/{schedule_id}", schedule_page),
    Route("/recovery", recovery),
]
