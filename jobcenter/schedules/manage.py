"""Adding, listing, showing, pausing, resuming, running now and removing schedules: the checks
and views around storage.schedules (which does every Redis call)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypedDict

from jobcenter.errors import JobcenterError, NotFound, SpecError
from jobcenter.model import codec
from jobcenter.model.durations import Duration
from jobcenter.model.ids import ulid
from jobcenter.model.spec import ID_RE, JobSpec, spec_from_any
from jobcenter.storage import schedules as stored
from jobcenter.storage.schedules import ScheduleState, StoredSchedule
from jobcenter.storage.store import Store

from .planning import (
    CATCHUP_POLICIES,
    DEFAULT_CATCHUP,
    DEFAULT_OVERLAP,
    OVERLAP_POLICIES,
    SUBMITTED,
    Fire,
    Schedule,
)
from .triggers import AT, parse_trigger

LIST_PAGE = 500  # schedules `schedule list` reads per round trip
# Reads a pause/resume may take when ticks keep changing the schedule under it: a tick writes
# a schedule at most twice per fire, a job submit apart, so a retry almost always gets through.
CHANGE_ATTEMPTS = 20
SHOWN_FIRES = 20  # recent fires a schedule is shown with unless told
RUN_NOW = "run now, by hand"  # the reason the fire record of a run asked for gives


def now_ms(store: Store) -> int:
    """Redis TIME in ms: the one clock every schedule decision uses."""
    return store.now_ms()


def _load(found: StoredSchedule) -> tuple[Schedule, ScheduleState]:
    return Schedule.from_dict(found.definition), found.state


def read_schedule(store: Store, schedule_id: str) -> tuple[Schedule, ScheduleState, int] | None:
    """A schedule, its state and the revision they were read at; None when it is gone."""
    found = stored.read(store, schedule_id)
    if found is None:
        return None
    return *_load(found), found.revision


def save_schedule(
    store: Store,
    schedule: Schedule,
    revision: int,
    state: ScheduleState,
    records: list[bytes] | None = None,
    now: int = 0,
) -> int:
    """storage.schedules.save for `schedule`: SAVED, STALE or GONE."""
    return stored.save(store, schedule.id, schedule.name, revision, state, records or [], now)


def resolve(store: Store, ref: str) -> str:
    """A schedule id from an id or a name; NotFound names what was asked for."""
    found = stored.find(store, ref)
    if found is None:
        raise _not_found(store, ref)
    return found


def find_schedule(store: Store, ref: str) -> Schedule:
    """The schedule with id or name `ref`; NotFound names what was asked for."""
    read = read_schedule(store, resolve(store, ref))
    if read is None:
        raise _not_found(store, ref)
    return read[0]


def filter_id(store: Store, ref: str) -> str:
    """The schedule id a jobs filter (`list --schedule`, the dashboard's) means by `ref`:
    the id of the schedule with that id or name, else `ref` as it is (the id of a schedule
    removed since: its jobs are kept)."""
    return stored.find(store, ref) or ref


def _not_found(store: Store, ref: str) -> NotFound:
    return NotFound(f"no schedule {ref!r} in namespace {store.settings.namespace!r}")


class ScheduleOptions(TypedDict, total=False):
    """The trigger and policies of add_schedule, for the callers that hand them on."""

    at: str | datetime | None
    every: Duration | None
    cron: str | None
    tz: str | None
    name: str | None
    overlap: str
    catchup: str


def add_schedule(
    store: Store,
    spec: JobSpec | Mapping[str, Any] | Any,
    *,
    at: str | datetime | None = None,
    every: Duration | None = None,
    cron: str | None = None,
    tz: str | None = None,
    name: str | None = None,
    overlap: str = DEFAULT_OVERLAP,
    catchup: str = DEFAULT_CATCHUP,
) -> Schedule:
    """Store a schedule; its first fire is the first trigger time after now (or `at`)."""
    job = spec_from_any(spec)
    store.webhook_rules.check_notify(job.notify)
    if job.idempotency_key is not None:
        raise SpecError(
            "a scheduled job cannot set 'idempotency_key': each fire gets its own "
            "(schedule_id:fire_time); remove it from the spec"
        )
    if overlap not in OVERLAP_POLICIES:
        raise SpecError(f"overlap {overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}")
    if catchup not in CATCHUP_POLICIES:
        raise SpecError(f"catchup {catchup!r} is not one of {', '.join(CATCHUP_POLICIES)}")
    if name is not None and (not isinstance(name, str) or not ID_RE.fullmatch(name)):
        raise SpecError(
            f"schedule name {name!r} must be 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    now = store.now_ms()
    trigger = parse_trigger(at=at, every=every, cron=cron, tz=tz, now_ms=now)
    schedule = Schedule(ulid(), trigger, job, name, overlap, catchup, created_ms=now)
    first = trigger.at_ms if trigger.kind == AT else schedule.next_after(now)
    definition = codec.pack(schedule.to_dict(), what="schedule")
    holder = stored.create(store, schedule.id, name, now, definition, ScheduleState(next=first))
    if holder is not None:
        raise SpecError(f"a schedule named {name!r} exists already ({holder})")
    return schedule


def _view(schedule: Schedule, state: ScheduleState) -> dict[str, Any]:
    """The JSON shape of `schedule list --json` / `show --json` (times in seconds)."""
    t = schedule.trigger
    return {
        "id": schedule.id,
        "name": schedule.name,
        "job": schedule.spec.name,
        "kind": t.kind,
        "expr": t.expr,
        "tz": t.tz,
        "overlap": schedule.overlap,
        "catchup": schedule.catchup,
        "state": state.status,
        "created_at": schedule.created_ms / 1000,
        # a paused schedule fires nothing: its stored next fire falls behind (resume moves it)
        "next_fire": None if state.paused else _seconds(state.next),
        "pending_fire": _seconds(state.pending),
        "buffered_fire": _seconds(state.buffered),
        "last_fire": _seconds(state.last_fire),
        "last_job": state.last_job,
        "fires": state.fires,
        "skipped": state.skipped,
        "missed": state.missed,
        "failed": state.failed,
    }


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def list_schedules(store: Store) -> list[dict[str, Any]]:
    """Every schedule, oldest first, read LIST_PAGE at a time (each read stays short)."""
    rows: list[dict[str, Any]] = []
    gone: list[str] = []
    start = 0
    while True:
        found = stored.page(store, start, LIST_PAGE)
        start += len(found)
        for schedule_id, one in found:
            if one is None:
                gone.append(schedule_id)  # a finished one-time schedule past its retention
                continue
            rows.append(_view(*_load(one)))
        if len(found) < LIST_PAGE:
            break
    stored.forget(store, gone)
    return rows


def show_schedule(store: Store, ref: str, *, fires: int = SHOWN_FIRES) -> dict[str, Any]:
    """One schedule, its job spec and its `fires` most recent fire records."""
    found, records = stored.with_records(store, resolve(store, ref), fires)
    if found is None:
        raise _not_found(store, ref)
    schedule, state = _load(found)
    view = _view(schedule, state)
    view["spec"] = schedule.spec.to_dict()
    view["recent"] = [_record_view(r) for r in records]
    return view


def _record_view(record: object) -> dict[str, Any]:
    assert isinstance(record, dict)
    out = dict(record)
    for k in ("fire", "until", "at"):
        if k in out:
            out[k] = out[k] / 1000
    return out


def _change(
    store: Store,
    ref: str,
    fn: Callable[[Schedule, ScheduleState], ScheduleState],
    records: list[bytes] | None = None,
) -> dict[str, Any]:
    """Apply `fn` to a schedule's state as read (adding fire `records`), decided again when a
    tick changed the schedule meanwhile; returns the new view."""
    schedule_id = resolve(store, ref)
    for _ in range(CHANGE_ATTEMPTS):
        read = read_schedule(store, schedule_id)
        if read is None:
            raise _not_found(store, ref)
        schedule, state, revision = read
        new = fn(schedule, state)
        code = save_schedule(store, schedule, revision, new, records)
        if code == stored.SAVED:
            return _view(schedule, new)
        if code != stored.STALE:
            raise _not_found(store, ref)
    raise JobcenterError(f"schedule {ref!r} kept changing under a ticker; try again")


def pause_schedule(store: Store, ref: str) -> dict[str, Any]:
    """Stop firing until resumed (a fire already decided still completes)."""
    return _change(store, ref, lambda _s, state: replace(state, paused=True))


def resume_schedule(store: Store, ref: str, *, now: int | None = None) -> dict[str, Any]:
    """Fire again. Recurring fires that fell due while paused are not caught up: the next
    fire is the first one after now. A one-time fire that passed while paused follows the
    catch-up policy (one/all: it runs now; none: it is missed)."""
    t = store.now_ms() if now is None else now

    def resume(schedule: Schedule, state: ScheduleState) -> ScheduleState:
        nxt = state.next
        if schedule.trigger.kind != AT and nxt is not None and nxt <= t:
            nxt = schedule.next_after(t)
        return replace(state, paused=False, next=nxt)

    return _change(store, ref, resume)


def run_schedule_now(store: Store, ref: str) -> str:
    """Submit a schedule's job now, whatever its trigger, state or overlap policy (a person
    asked for it): the job is listed under the schedule and recorded as one of its fires;
    the next fire stays as it was. Returns the job id."""
    schedule_id = resolve(store, ref)
    read = read_schedule(store, schedule_id)
    if read is None:
        raise _not_found(store, ref)
    schedule = read[0]
    now = now_ms(store)
    # the key a fire at `now` would get: a second click in the same ms submits nothing more
    spec = schedule.fire_spec(now)
    ((job_id, _),) = store.submit_many([spec], fired=[(schedule.id, now / 1000)])

    def ran(_schedule: Schedule, state: ScheduleState) -> ScheduleState:
        return replace(state, last_fire=now, last_job=job_id, fires=state.fires + 1)

    fire = Fire(schedule.id, now, SUBMITTED, job_id, reason=RUN_NOW)
    _change(store, schedule_id, ran, [fire.record(now)])
    return job_id


def remove_schedule(store: Store, ref: str) -> str:
    """Delete a schedule and its records; jobs it submitted are untouched. Returns its id."""
    schedule_id = resolve(store, ref)
    read = read_schedule(store, schedule_id)
    name = None if read is None else read[0].name  # its key holds the id: freed with it
    if read is None or not stored.delete(store, schedule_id, name):
        raise _not_found(store, ref)
    return schedule_id
