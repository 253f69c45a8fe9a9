"""The jobs a bulk action touches: the list indexes walked a bounded page at a time
(views.jobs_page), newest first, within a window of creation times. The actions themselves
are the one-job ones (retry, cancel, delete, dead-letter requeue), called per job."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

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
