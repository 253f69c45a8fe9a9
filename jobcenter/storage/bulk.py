"""The jobs a bulk action touches: the list indexes walked a bounded page at a time
(views.jobs_page), newest first, within a window of creation times. The actions themselves
are the one-job ones (retry, cancel, delete, dead-letter requeue), called per job."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from jobcenter.errors import JobcenterError
from jobcenter.model.states import JobState

from . import admin
from .store import Store
from .views import PAGE_SIZE_MAX, JobFilter, JobSummary, jobs_page

BULK_BATCH = 100  # jobs read, then acted on, per round: bounded reads between the actions


@dataclass(frozen=True)
class BulkFilter:
    """Which jobs: the list's filters, and created since / until (epoch seconds)."""

    jobs: JobFilter
    since: float | None = None
    until: float | None = None

    @property
    def empty(self) -> bool:
        j = self.jobs
        chosen = (j.owner, j.state, j.schedule_id, j.name, j.tag, self.since, self.until)
        return all(value is None for value in chosen)


def walk(store: Store, where: BulkFilter, batch: int = BULK_BATCH) -> Iterator[list[JobSummary]]:
    """The matching jobs, newest first, `batch` at a time. The walk goes by creation time,
    so a job an action moves to another index (a retried one leaves `failed`) is neither
    met twice nor makes the walk skip another."""
    if not 1 <= batch <= PAGE_SIZE_MAX:
        raise ValueError(f"batch must be 1-{PAGE_SIZE_MAX}, got {batch}")
    cursor = None if where.until is None else f"{int(where.until * 1000)}:"
    since_ms = None if where.since is None else where.since * 1000
    while True:
        page = jobs_page(store, where.jobs, before=cursor, size=batch)
        found = [j for j in page.jobs if where.since is None or (j.created_at or 0) >= where.since]
        if found:
            yield found
        if page.older is None or len(found) < len(page.jobs):
            return  # the index has no older job, or the walk went past `since`
        cursor = page.older
        if since_ms is not None and float(cursor.partition(":")[0]) < since_ms:
            return


@dataclass(frozen=True)
class BulkAction:
    """A one-job action done to many: which jobs it applies to, and the doing (a message)."""

    name: str
    past: str  # "retried": the count's word
    applies: Callable[[JobSummary], bool]
    act: Callable[[Store, str], str]


def _retry(store: Store, job_id: str) -> str:
    return f"{admin.retry_job(store, job_id)} tasks to run again"


def _cancel(store: Store, job_id: str) -> str:
    store.stop_job(job_id, "cancel")
    return str(store.job_state(job_id) or "gone")


def _delete(store: Store, job_id: str) -> str:
    admin.delete_job(store, job_id)
    return "deleted"


def _requeue(store: Store, job_id: str) -> str:
    return f"its dead letters requeued ({admin.retry_job(store, job_id)} tasks to run again)"


def _terminal(job: JobSummary) -> bool:
    return JobState(job.state).terminal


ACTIONS = {
    action.name: action
    for action in (
        BulkAction("retry", "retried", lambda job: job.state == JobState.FAILED, _retry),
        BulkAction("cancel", "cancelled", lambda job: not _terminal(job), _cancel),
        BulkAction("delete", "deleted", _terminal, _delete),
        BulkAction(
            "requeue",
            "requeued",
            lambda job: job.failed > 0 and job.state != JobState.CANCELLED,
            _requeue,
        ),
    )
}


@dataclass(frozen=True)
class Outcome:
    job: JobSummary
    message: str | None  # what the action did; None on a dry run
    error: str | None = None  # why it was skipped (the job changed meanwhile)


def run(
    store: Store,
    action: BulkAction,
    where: BulkFilter,
    *,
    dry_run: bool = False,
    batch: int = BULK_BATCH,
    limit: int | None = None,
) -> Iterator[Outcome]:
    """Act on each job the filters choose that the action applies to (a dry run: say it),
    batch by batch, at most `limit` of them; a job the action refuses is reported, not
    raised."""
    seen = 0
    for jobs in walk(store, where, batch):
        for job in jobs:
            if not action.applies(job):
                continue
            if limit is not None and seen >= limit:
                return
            seen += 1
            if dry_run:
                yield Outcome(job, None)
                continue
            try:
                yield Outcome(job, action.act(store, job.id))
            except JobcenterError as exc:
                yield Outcome(job, None, str(exc))
