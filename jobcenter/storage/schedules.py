"""Schedules in Redis: each schedule's hash (its packed definition, its firing state and the
revision every script bumps), its fire records, the name, list and due indexes. Every write
is one script (lua/schedule_*.lua); the reads here are bounded by a page or by one schedule.
All schedule keys share shard 0's hash tag, so one script may touch several on Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobcenter.model import codec

from .keyspace.schema import ScheduleField as SF
from .keyspace.schema import code
from .server.replies import text
from .store import Store

FIRES_KEPT = 100  # fire/skip/miss records kept per schedule (newest first)

# The schedule scripts' return codes (schema.RETURN_CODES).
SAVED = code("OK")
NAME_TAKEN = code("NAME_TAKEN")  # schedule_add: the name belongs to another schedule
STALE = code("CHANGED")  # schedule_save: changed since the decision read it; decide again
GONE = code("SCHEDULE_GONE")  # schedule_save, schedule_remove: no such schedule
REVISION = SF.REVISION  # hash field every script bumps: what schedule_save compares
DEFINITION = SF.DEFINITION  # hash field holding the packed definition

_STATE_INTS = (SF.NEXT, SF.PENDING, SF.BUFFERED, SF.LAST_FIRE)
_STATE_COUNTERS = (SF.FIRES, SF.SKIPPED, SF.MISSED, SF.FAILED)


@dataclass(frozen=True)
class ScheduleState:
    """A schedule's firing state, kept in its hash beside the definition."""

    paused: bool = False
    next: int | None = None  # the next fire not yet decided (ms)
    pending: int | None = None  # a fire decided but not yet confirmed submitted
    buffered: int | None = None  # overlap=buffer-one: the fire waiting for the previous run
    last_fire: int | None = None
    last_job: str | None = None
    fires: int = 0  # jobs submitted
    skipped: int = 0  # fires skipped because the previous run was still going
    missed: int = 0  # fires not run under the catch-up policy
    failed: int = 0  # fires whose submit failed (the stored spec no longer submits)

    @property
    def done(self) -> bool:
        """Nothing will ever fire again (a one-time schedule after its fire)."""
        return self.next is None and self.pending is None and self.buffered is None

    @property
    def status(self) -> str:
        return "paused" if self.paused else "done" if self.done else "active"

    def due_score(self) -> int | None:
        """When the ticker must next look at this schedule; None: never (until changed)."""
        if self.pending is not None:
            return self.pending  # finish a decided fire even when paused since
        if self.paused:
            return None
        times = [t for t in (self.next, self.buffered) if t is not None]
        return min(times) if times else None

    @classmethod
    def from_hash(cls, raw: Mapping[str, bytes]) -> ScheduleState:
        ints = {k: int(raw[k]) if k in raw else None for k in _STATE_INTS}
        counters = {k: int(raw.get(k, 0)) for k in _STATE_COUNTERS}
        last_job = raw.get(SF.LAST_JOB)
        return cls(
            paused=raw.get(SF.PAUSED) == b"1",
            last_job=last_job.decode() if last_job else None,
            **ints,  # type: ignore[arg-type]
            **counters,
        )

    def fields(self) -> list[Any]:
        """The state as the hash's field/value pairs for the scripts; '' marks an absent field."""
        values: dict[str, Any] = {SF.PAUSED: int(self.paused)}
        values.update({k: getattr(self, k) for k in (*_STATE_INTS, SF.LAST_JOB, *_STATE_COUNTERS)})
        return [x for k, v in values.items() for x in (k, "" if v is None else v)]


@dataclass(frozen=True)
class StoredSchedule:
    """A schedule as its hash holds it: the definition (unpacked), the state, the revision."""

    definition: dict[str, Any]
    state: ScheduleState
    revision: int


def _stored(raw: Mapping[Any, Any]) -> StoredSchedule | None:
    fields = {text(k): v for k, v in raw.items()}
    if not fields:
        return None
    definition = codec.unpack(fields[DEFINITION])
    assert isinstance(definition, dict)
    return StoredSchedule(definition, ScheduleState.from_hash(fields), int(fields.get(REVISION, 0)))


def _due(state: ScheduleState) -> int | str:
    score = state.due_score()
    return "" if score is None else score


def read(store: Store, schedule_id: str) -> StoredSchedule | None:
    """A schedule as stored now; None when it is gone."""
    return _stored(store.redis.hgetall(store.keys.schedule(schedule_id)))


def find(store: Store, ref: str) -> str | None:
    """The id of the schedule with id or name `ref`; None when there is none."""
    if store.redis.exists(store.keys.schedule(ref)):
        return ref
    found = store.redis.get(store.keys.schedule_name(ref))
    if found is not None and store.redis.exists(store.keys.schedule(text(found))):
        return text(found)
    return None


def create(
    store: Store,
    schedule_id: str,
    name: str | None,
    now: int,
    definition: bytes,
    state: ScheduleState,
) -> str | None:
    """Store a new schedule (schedule_add); None, or the id of the schedule holding `name`."""
    keys = store.keys.schedule_keys(schedule_id, name)
    args = [schedule_id, now, _due(state), DEFINITION, definition, *state.fields()]
    reply = store.scripts.run("schedule_add", keys, args)
    return text(reply[1]) if int(reply[0]) == NAME_TAKEN else None


def save(
    store: Store,
    schedule_id: str,
    name: str | None,
    revision: int,
    state: ScheduleState,
    records: Sequence[bytes] = (),
    now: int = 0,
) -> int:
    """Write `state` (and fire `records`) if the schedule is still at `revision`: SAVED,
    STALE (decide again from a fresh read) or GONE."""
    # a finished one-time schedule is kept as long as a finished job
    retention = int(store.settings.retention_seconds * 1000) if state.done else ""
    args = [schedule_id, revision, _due(state), retention, FIRES_KEPT, len(records), *records]
    keys = store.keys.schedule_keys(schedule_id, name)
    return int(store.scripts.run("schedule_save", keys, [*args, *state.fields()])[0])


def delete(store: Store, schedule_id: str, name: str | None) -> bool:
    """Delete a schedule and its records (schedule_remove); False when it was gone."""
    keys = store.keys.schedule_keys(schedule_id, name)
    return int(store.scripts.run("schedule_remove", keys, [schedule_id])[0]) != GONE


def page(store: Store, start: int, count: int) -> list[tuple[str, StoredSchedule | None]]:
    """`count` schedules from position `start` of the list index, oldest first; None for
    one whose hash is gone (a finished one-time schedule past its retention)."""
    keys = store.keys
    ids = [text(raw) for raw in store.redis.zrange(keys.schedules(), start, start + count - 1)]
    pipe = store.redis.pipeline(transaction=False)
    for schedule_id in ids:
        pipe.hgetall(keys.schedule(schedule_id))
    return [(i, _stored(raw)) for i, raw in zip(ids, pipe.execute(), strict=True)]


def forget(store: Store, schedule_ids: Sequence[str]) -> None:
    """Drop schedules whose hash is gone from the list index."""
    if schedule_ids:
        store.redis.zrem(store.keys.schedules(), *schedule_ids)


def with_records(
    store: Store, schedule_id: str, count: int
) -> tuple[StoredSchedule | None, list[Any]]:
    """A schedule and its `count` newest fire records (unpacked), in one round trip."""
    keys = store.keys
    pipe = store.redis.pipeline(transaction=False)
    pipe.hgetall(keys.schedule(schedule_id))
    pipe.lrange(keys.schedule_fires(schedule_id), 0, max(0, count - 1))
    raw, records = pipe.execute()
    return _stored(raw), [codec.unpack(r) for r in records] if count > 0 else []


def due_ids(store: Store, now: int, limit: int) -> list[str]:
    """Up to `limit` schedules due by `now`, earliest first."""
    due = store.keys.schedules_due()
    return [text(raw) for raw in store.redis.zrangebyscore(due, "-inf", now, 0, limit)]


def due_at(store: Store, schedule_id: str) -> float | None:
    """When the due index says to look at a schedule next; None when it is not there."""
    score: float | None = store.redis.zscore(store.keys.schedules_due(), schedule_id)
    return score


def undue(store: Store, schedule_id: str) -> None:
    """Drop a removed or expired schedule from the due index."""
    store.redis.zrem(store.keys.schedules_due(), schedule_id)
