"""Export finished jobs as JSON-ready records (`jobcenter export`): history kept longer
than Redis should keep it. Jobs are found through the per-state job indexes (scored by
creation time), a page at a time, so an export of millions of jobs never reads more than a
page of ids and one job's records at once."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any

from jobcenter.errors import NotFound
from jobcenter.model.states import JobState

from .keyspace.schema import JobField
from .server.replies import seconds, text
from .store import Store

EXPORT_PAGE = 200  # job ids read per index read
FINISHED_STATES = tuple(state.value for state in JobState if state.terminal)
JOB_FIELDS = (
    JobField.NAME, JobField.OWNER, JobField.STATE, JobField.PRIORITY, JobField.QUEUE,
    JobField.CREATED_AT, JobField.STARTED_AT, JobField.FINISHED_AT, JobField.SCHEDULE_ID,
    JobField.FIRE_TIME, JobField.ERROR, JobField.TASKS, JobField.FAILED, JobField.CANCELLED,
)  # fmt: skip
# The job's fields the export shows as they are, under their own names.
TEXT_FIELDS = (
    JobField.NAME, JobField.OWNER, JobField.STATE, JobField.QUEUE, JobField.SCHEDULE_ID,
    JobField.ERROR,
)  # fmt: skip


def _index_entries(store: Store, index: str, low: int, high: int) -> Iterator[tuple[int, str]]:
    """(created ms, job id) of one index between low and high (ms), oldest first, read a
    page at a time."""
    offset = 0
    while True:
        page = store.redis.zrangebyscore(
            index, low, high, start=offset, num=EXPORT_PAGE, withscores=True
        )
        for member, score in page:
            yield int(score), member.decode()
        if len(page) < EXPORT_PAGE:
            return
        offset += len(page)


def finished_jobs(
    store: Store, since_ms: int, until_ms: int, states: Sequence[str] = FINISHED_STATES
) -> Iterator[str]:
    """Ids of the finished jobs in `states` created between since and until (ms), oldest
    first across shards and states, and the archive's."""
    unknown = [s for s in states if s not in FINISHED_STATES]
    if unknown:
        raise ValueError(f"export: {unknown[0]!r} is not a finished job state {FINISHED_STATES}")
    streams = [
        _index_entries(store, store.keys.state_jobs(shard, state), since_ms, until_ms)
        for shard in range(store.keys.shards)
        for state in states
    ]
    reader = store.archive_reader()
    if reader is not None:  # the jobs Redis let go; one still in both is exported once
        streams.append(reader.created_between(since_ms, until_ms, list(states)))
    last = None
    for entry in heapq.merge(*streams):
        if entry != last:
            yield entry[1]
        last = entry


def job_record(store: Store, job_id: str) -> dict[str, Any] | None:
    """One finished job as exported: its fields, every task as `status` shows it and every
    attempt as `history` does; None when it expired meanwhile."""
    values = store.job_values(job_id, JOB_FIELDS)
    f = dict(zip(JOB_FIELDS, values, strict=True))
    if f[JobField.STATE] is None:
        return None
    try:
        tasks = store.status(job_id)["tasks"]
        history = store.history(job_id)
    except NotFound:
        return None
    return {
        "id": job_id,
        **{str(k): text(f[k]) for k in TEXT_FIELDS},
        "priority": int(f[JobField.PRIORITY] or 0),
        "created_at": seconds(f[JobField.CREATED_AT]),
        "started_at": seconds(f[JobField.STARTED_AT]),
        "finished_at": seconds(f[JobField.FINISHED_AT]),
        "fire_time": float(fire) if (fire := f[JobField.FIRE_TIME]) is not None else None,
        "task_count": int(f[JobField.TASKS] or 0),
        "failed": int(f[JobField.FAILED] or 0),
        "cancelled": int(f[JobField.CANCELLED] or 0),
        "tasks": tasks,
        "history": history,
    }


def export(
    store: Store, since_ms: int, until_ms: int, states: Sequence[str] = FINISHED_STATES
) -> Iterator[dict[str, Any]]:
    """Every finished job created between since and until (ms), oldest first."""
    for job_id in finished_jobs(store, since_ms, until_ms, states):
        record = job_record(store, job_id)
        if record is not None:
            yield record
