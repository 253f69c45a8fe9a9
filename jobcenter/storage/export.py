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

from .server.replies import seconds, text
from .store import Store

EXPORT_PAGE = 200  # job ids read per index read
FINISHED_STATES = tuple(state.value for state in JobState if state.terminal)
JOB_FIELDS = (
    "name", "owner", "state", "priority", "queue", "created_at", "started_at", "finished_at",
    "schedule_id", "fire_time", "error", "n", "nfailed", "ncancelled",
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
    first across shards and states."""
    unknown = [s for s in states if s not in FINISHED_STATES]
    if unknown:
        raise ValueError(f"export: {unknown[0]!r} is not a finished job state {FINISHED_STATES}")
    streams = [
        _index_entries(store, store.keys.state_jobs(shard, state), since_ms, until_ms)
        for shard in range(store.keys.shards)
        for state in states
    ]
    for _, job_id in heapq.merge(*streams):
        yield job_id


def job_record(store: Store, job_id: str) -> dict[str, Any] | None:
    """One finished job as exported: its fields, every task as `status` shows it and every
    attempt as `history` does; None when it expired meanwhile."""
    values = store.redis.hmget(store.keys.job(job_id).job, JOB_FIELDS)
    f = dict(zip(JOB_FIELDS, values, strict=True))
    if f["state"] is None:
        return None
    try:
        tasks = store.status(job_id)["tasks"]
        history = store.history(job_id)
    except NotFound:
        return None
    return {
        "id": job_id,
        **{k: text(f[k]) for k in ("name", "owner", "state", "queue", "schedule_id", "error")},
        "priority": int(f["priority"] or 0),
        "created_at": seconds(f["created_at"]),
        "started_at": seconds(f["started_at"]),
        "finished_at": seconds(f["finished_at"]),
        "fire_time": float(f["fire_time"]) if f["fire_time"] is not None else None,
        "task_count": int(f["n"] or 0),
        "failed": int(f["nfailed"] or 0),
        "cancelled": int(f["ncancelled"] or 0),
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
