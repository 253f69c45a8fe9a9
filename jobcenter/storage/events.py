"""The event stream read back. Every transition appends its events to its shard's stream
(keys.events, emit() in lua/_job.lua); this module reads the shards, merges them by time
(a stream id is the Redis time of its entry) and names each task by its id."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from jobcenter.model.states import TaskState

from .keyspace.packed import values_of_jobs
from .keyspace.schema import EventField, EventKind, JobField, TaskField
from .server.outages import ride_out
from .server.replies import text
from .store import Store

EVENTS_PAGE = 1_000  # stream entries per read: each read stays short
# Entries a live view reads after its cursor: past this much news it reads the states again.
LIVE_PAGE = 2_000
FOLLOW_BLOCK_MS = 1_000  # how long a follow waits on one stream before looking again
START = "0-0"  # a cursor before every entry
# A job's events are read from this long before its creation time: an entry's id comes from
# the server's clock as the script saw it, which may lag the TIME call that stamped the job.
JOB_START_MARGIN_MS = 1_000


@dataclass(frozen=True)
class Event:
    """One entry of a shard's stream: what happened to a job or one of its tasks."""

    id: str  # "<ms>-<seq>" in its shard's stream
    shard: int
    time: float  # seconds, Redis time
    kind: str  # an EventKind
    job: str
    index: int | None  # the task's index; None for the job's own events
    task: str | None  # the task's id (its index when the job is gone)
    attempt: int | None
    handler: str | None
    error: str | None
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def order(self) -> tuple[int, int, int]:
        """Time order across shards: the id's ms and sequence, then the shard."""
        ms, _, seq = self.id.partition("-")
        return int(ms), int(seq), self.shard


Cursor = dict[int, str]  # shard -> id of the last entry read there

# The task state each task event leaves behind (the others change no task's state).
STATE_AFTER = {
    EventKind.QUEUED: TaskState.QUEUED,
    EventKind.STARTED: TaskState.RUNNING,
    EventKind.RESUMED: TaskState.RUNNING,
    EventKind.SUCCEEDED: TaskState.SUCCEEDED,
    EventKind.RETRIED: TaskState.RETRY_WAIT,  # a 'queued' follows when it is queued at once
    EventKind.FAILED: TaskState.FAILED,
    EventKind.UPSTREAM_FAILED: TaskState.UPSTREAM_FAILED,
    EventKind.SKIPPED: TaskState.SKIPPED,
    EventKind.TIMED_OUT: TaskState.TIMED_OUT,
    EventKind.GIVEN_BACK: TaskState.QUEUED,
    EventKind.RELEASED: TaskState.QUEUED,
    EventKind.GATE_WAIT: TaskState.QUEUED,
    EventKind.CANCELLED: TaskState.CANCELLED,
    EventKind.REVIVED: TaskState.WAITING,  # a 'queued' follows when its parents are done
    EventKind.CLEARED: TaskState.WAITING,  # a 'queued' follows when its parents are done
}


def stream_id_ms(stream_id: bytes | str) -> int:
    return int(str(text(stream_id)).partition("-")[0])


def _events(shard: int, raw_id: bytes, fields: dict[bytes, bytes]) -> list[Event]:
    """The events of one stream entry: one, or one per task of an entry the hot path wrote
    for a batch (indexes and attempts comma-separated, emit_many in lua/_job.lua)."""
    f = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
    indexes = f[EventField.INDEX].split(",") if EventField.INDEX in f else [None]
    attempts = f[EventField.ATTEMPT].split(",") if EventField.ATTEMPT in f else []
    if len(attempts) != len(indexes):
        attempts = attempts[:1] * len(indexes)
    event_id = raw_id.decode()
    return [
        Event(
            id=event_id,
            shard=shard,
            time=stream_id_ms(event_id) / 1000,
            kind=f.get(EventField.KIND, "?"),
            job=f.get(EventField.JOB, ""),
            index=None if index is None else int(index),
            task=index,
            attempt=int(attempts[k]) if attempts else None,
            handler=f.get(EventField.HANDLER) or None,
            error=f.get(EventField.ERROR) or None,
            detail=f.get(EventField.DETAIL) or None,
        )
        for k, index in enumerate(indexes)
    ]


def _after(stream_id: str) -> str:
    """The exclusive start of a range that follows `stream_id` (Redis >= 6.2 has '(id',
    this works on every version)."""
    ms, _, seq = stream_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _id_order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Events:
    """Reads the event streams of one namespace."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.redis: Any = store.redis
        self.keys = store.keys

    def _shards(self, job_id: str | None) -> list[int]:
        if job_id is not None:
            return [self.keys.job_shard(job_id)]
        return list(range(self.keys.shards))

    def latest(self, job_id: str | None = None) -> Cursor:
        """A cursor at the newest entry of each shard (or the job's): what comes after it
        is new."""
        pipe = self.redis.pipeline(transaction=False)
        shards = self._shards(job_id)
        for shard in shards:
            pipe.xrevrange(self.keys.events(shard), "+", "-", count=1)
        return {
            shard: (entries[0][0].decode() if entries else START)
            for shard, entries in zip(shards, pipe.execute(), strict=True)
        }

    def read(
        self,
        *,
        job_id: str | None = None,
        since_ms: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[Event], Cursor]:
        """Events in time order, with the cursor after them. With `job_id` only that job's
        (read from its creation on); with `since_ms` from then on; with neither the newest
        `limit` (default EVENTS_PAGE). `limit` keeps the newest that many."""
        start_ms = since_ms
        if job_id is not None and start_ms is None:
            created = self.redis.hget(self.keys.job(job_id).job, JobField.CREATED_AT)
            start_ms = int(created) - JOB_START_MARGIN_MS if created is not None else None
        if start_ms is None and job_id is None:
            return self._newest(limit or EVENTS_PAGE)
        cursor: Cursor = {}
        found: list[list[Event]] = []
        for shard in self._shards(job_id):
            low = f"{start_ms}-0" if start_ms is not None else "-"
            events, cursor[shard] = self._range(shard, low, job_id)
            found.append(events)
        merged = list(heapq.merge(*found, key=lambda e: e.order))
        if limit is not None:
            merged = merged[-limit:]
        return self.named(merged), cursor

    def _range(self, shard: int, low: str, job_id: str | None) -> tuple[list[Event], str]:
        """Every entry of a shard from `low` on (of one job, when given), in pages; and the
        id of the last entry read."""
        key = self.keys.events(shard)
        out: list[Event] = []
        last = START
        while True:
            page = self.redis.xrange(key, low, "+", count=EVENTS_PAGE)
            for raw_id, fields in page:
                out += [e for e in _events(shard, raw_id, fields) if job_id in (None, e.job)]
            if page:
                last = page[-1][0].decode()
                low = _after(last)
            if len(page) < EVENTS_PAGE:
                return out, last

    def _newest(self, limit: int) -> tuple[list[Event], Cursor]:
        found: list[list[Event]] = []
        cursor: Cursor = {}
        for shard in self._shards(None):
            page = self.redis.xrevrange(self.keys.events(shard), "+", "-", count=limit)
            cursor[shard] = page[0][0].decode() if page else START
            found.append(
                [e for raw_id, fields in reversed(page) for e in _events(shard, raw_id, fields)]
            )
        merged = list(heapq.merge(*found, key=lambda e: e.order))[-limit:]
        return self.named(merged), cursor

    def after(self, cursor: Cursor, *, job_id: str | None = None, block_ms: int = 0) -> list[Event]:
        """The events after `cursor` (at most EVENTS_PAGE per shard), which it moves past
        them. With `block_ms`, when none is there yet, wait up to that long for some, on
        one shard after the other (a blocking read names one stream: on Redis Cluster the
        shards' streams are in different slots). The cursor moves only once every read
        succeeded: a read that fails half way (Redis restarting) can be made again and loses
        no event."""
        found: list[list[Event]] = []
        shards = self._shards(job_id)
        moved = dict(cursor)
        for shard in shards:
            found.append(self._xread(shard, moved, job_id, 0))
        if block_ms and not any(found) and shards:
            wait = max(1, block_ms // len(shards))
            for shard in shards:
                events = self._xread(shard, moved, job_id, wait)
                if events:
                    found.append(events)
                    break
        named = self.named(list(heapq.merge(*found, key=lambda e: e.order)))
        cursor.update(moved)
        return named

    def _xread(self, shard: int, cursor: Cursor, job_id: str | None, block_ms: int) -> list[Event]:
        key = self.keys.events(shard)
        last = cursor.get(shard, START)
        reply = self.redis.xread({key: last}, count=EVENTS_PAGE, block=block_ms or None)
        events: list[Event] = []
        for _, entries in reply or []:
            for raw_id, fields in entries:
                cursor[shard] = raw_id.decode()
                events += [e for e in _events(shard, raw_id, fields) if job_id in (None, e.job)]
        return events

    def follow(
        self, cursor: Cursor, *, job_id: str | None = None, block_ms: int = FOLLOW_BLOCK_MS
    ) -> Iterator[Event]:
        """Every event after `cursor`, as it comes, forever (the caller stops it). A Redis
        outage is waited out, reconnecting with backoff: following goes on where it was."""
        following = "following events" if job_id is None else f"following job {job_id}'s events"
        while True:
            yield from ride_out(
                lambda: self.after(cursor, job_id=job_id, block_ms=block_ms), None, following
            )

    def state_changes(self, job_id: str, after: str) -> tuple[dict[int, str], str] | None:
        """What a live view of one job needs since its cursor `after` (an id of the job's
        shard stream): each task's new state by index, and the cursor past them. None when
        the stream cannot say (trimmed past the cursor, or more news than LIVE_PAGE): then
        read the states themselves."""
        key = self.keys.events(self.keys.job_shard(job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.xrange(key, "-", "+", count=1)
        pipe.xrange(key, _after(after), "+", count=LIVE_PAGE)
        first, page = pipe.execute()
        if not first or _id_order(first[0][0].decode()) > _id_order(after):
            return None  # trimmed past the cursor (or emptied): news may be lost
        if len(page) >= LIVE_PAGE:
            return None
        changes: dict[int, str] = {}
        job_field, index_field, kind_field = (
            f.value.encode() for f in (EventField.JOB, EventField.INDEX, EventField.KIND)
        )
        for _, fields in page:
            if fields.get(job_field) != job_id.encode() or index_field not in fields:
                continue
            state = STATE_AFTER.get(fields[kind_field].decode())
            if state is not None:
                for index in fields[index_field].split(b","):
                    changes[int(index)] = state.value
        return changes, page[-1][0].decode() if page else after

    def named(self, events: Sequence[Event]) -> list[Event]:
        """The events with each task named by its id: one read per job, in one round trip."""
        wanted: dict[str, set[int]] = defaultdict(set)
        for e in events:
            if e.index is not None:
                wanted[e.job].add(e.index)
        if not wanted:
            return list(events)
        order = [(job, sorted(indexes)) for job, indexes in wanted.items()]
        found = values_of_jobs(
            self.redis,
            [(self.keys.job(job), [TaskField.ID.of(i) for i in indexes]) for job, indexes in order],
        )
        ids: dict[tuple[str, int], str] = {}
        for (job, indexes), values in zip(order, found, strict=True):
            for index, value in zip(indexes, values, strict=True):
                if value is not None:
                    ids[(job, index)] = value.decode()
        return [
            e if e.index is None else _with_task(e, ids.get((e.job, e.index), str(e.index)))
            for e in events
        ]


def _with_task(event: Event, task: str) -> Event:
    return Event(**{**asdict(event), "task": task})
