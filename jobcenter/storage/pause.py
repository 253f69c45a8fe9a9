"""Paused queues and jobs: pause and resume a queue in every shard (queue_pause.lua), and
read what is paused for `pause list`, the dashboard and /metrics. A job's own pause is a
job transition (Store.pause_job, Store.resume_job)."""

from __future__ import annotations

from dataclasses import dataclass

from .keyspace.schema import LimitField
from .server.replies import seconds, text
from .store import Store

SCAN_PAGE = 500  # fields of a limits hash read per HSCAN round


@dataclass(frozen=True)
class PausedQueue:
    queue: str
    since: float | None  # epoch seconds


def pause_queue(store: Store, queue: str) -> bool:
    """Pause `queue` in every shard: no task of it is claimed; running attempts finish.
    False when it was paused already."""
    return _queue_pause(store, queue, True)


def resume_queue(store: Store, queue: str) -> bool:
    """Resume `queue`, waking its idle workers. False when it was not paused."""
    return _queue_pause(store, queue, False)


def _queue_pause(store: Store, queue: str, pause: bool) -> bool:
    changed = False
    for shard in range(store.keys.shards):
        keys = [store.keys.limits(shard), store.keys.wake(shard, queue)]
        reply = store.scripts.run("queue_pause", keys, [queue, "1" if pause else "0"])
        changed = changed or int(reply[0]) == 0
    return changed


def paused_queues(store: Store) -> list[PausedQueue]:
    """Every paused queue, by name (shard 0 holds each, as every shard does)."""
    found = [
        PausedQueue(
            (text(f) or "")[len(LimitField.PAUSED_QUEUE) :], seconds(v) if v is not None else None
        )
        for f, v in store.redis.hscan_iter(
            store.keys.limits(0), match=f"{LimitField.PAUSED_QUEUE}*", count=SCAN_PAGE
        )
    ]
    return sorted(found, key=lambda p: p.queue)


def paused_job_count(store: Store) -> int:
    """How many jobs are paused, over every shard (each shard keeps its count)."""
    pipe = store.redis.pipeline(transaction=False)
    for shard in range(store.keys.shards):
        pipe.hget(store.keys.limits(shard), LimitField.PAUSED_JOBS)
    return sum(int(v) for v in pipe.execute() if v is not None)
