"""Schedules: jobs submitted once (`at`), on an interval (`every`, an ISO-8601 duration) or on
a cron expression (croniter), fired by one ticker at a time per namespace.

Guarantees, and how:

- No fire makes two jobs: each fire is submitted with idempotency key `schedule_id:fire_ms`.
- No fire is lost when a ticker dies: a fire is first *decided* (written to the schedule as
  `pending`, with the next fire time advanced, in one script), then submitted, then
  *confirmed* (recorded, `pending` cleared). A ticker that dies in between leaves `pending`
  behind; the next tick submits it again, which the idempotency key turns into a no-op if the
  first submit got through.
- One ticker at a time: a tick holds the `scheduler` singleton lease. Beyond that, every
  write is one Lua script (lua/schedule_*.lua). Decisions are made in Python from the
  schedule as read, at a revision the hash carries; schedule_save applies one only if the
  revision is unchanged, else the ticker reads again and decides again. So a ticker that lost
  its lease while stalled, or a `pause`/`remove` racing a tick, cannot apply a stale decision.

Every time is Redis TIME in milliseconds (worker clocks never count). Naive `at` times and
cron expressions are read in `tz`, UTC when it is not given. All schedule keys share shard 0's
hash tag, so one script may touch several on Redis Cluster too.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import redis
from croniter import CroniterBadDateError, CroniterError, croniter

from . import codec
from .errors import JobcenterError, NotFound, SpecError
from .ids import ulid
from .spec import ID_RE, JobSpec, parse_spec, spec_from_any
from .states import JobState
from .store import Store

log = logging.getLogger(__name__)

SINGLETON = "scheduler"  # the lease that makes one ticker at a time per namespace

AT, EVERY, CRON = "at", "every", "cron"
OVERLAP_POLICIES = ("skip", "allow", "buffer-one")
CATCHUP_POLICIES = ("none", "one", "all")
# Temporal's default: a run that outlasts its interval does not pile up more runs behind it.
DEFAULT_OVERLAP = "skip"
# Celery beat's and APScheduler's (coalesce) behaviour: after an outage the missed fires run
# once, not in a storm, and not never.
DEFAULT_CATCHUP = "one"

# A fire found later than this was missed (no ticker ran), not merely waiting for the next
# tick: above the tick interval plus one lease takeover after a ticker dies (30 s default).
MISFIRE_GRACE_MS = 60_000
# The ticker runs about once a second; a shorter interval could only fire late, in bursts.
MIN_INTERVAL_MS = 1_000
# Fire times stay exact as zset scores (doubles) and datetimes far below this.
MAX_INTERVAL_MS = 100 * 366 * 86_400_000
FIRES_KEPT = 100  # fire/skip/miss records kept per schedule (newest first)
LIST_PAGE = 500  # schedules `schedule list` reads per round trip
DUE_PER_TICK = 1_000  # schedules one tick visits at most; the rest wait for the next tick
STEPS_PER_SCHEDULE = 100  # fires one tick handles per schedule (catchup=all after an outage)
TICK_SECONDS = 1.0  # how often a worker should tick: the lateness of a fire in normal running
# Reads a pause/resume may take when ticks keep changing the schedule under it: a tick writes
# a schedule at most twice per fire, a job submit apart, so a retry almost always gets through.
CHANGE_ATTEMPTS = 20

# The schedule scripts' return codes (their headers list the same).
_SAVED = 0
_NAME_TAKEN = -1  # schedule_add: the name belongs to another schedule
_STALE = -2  # schedule_save: changed since the decision read it; read again, decide again
_GONE = -4  # schedule_save, schedule_remove: no such schedule
_REVISION = "rev"  # hash field every script bumps: what schedule_save compares

# Outcomes of a fire, as recorded and returned by Scheduler.tick().
SUBMITTED = "submitted"  # a job was submitted (or, after a crash, found submitted already)
SKIPPED = "skipped"  # overlap: the previous run was still going
BUFFERED = "buffered"  # overlap=buffer-one: runs when the previous run ends
MISSED = "missed"  # catch-up policy: not run (the ticker was down or the schedule paused)
FAILED = "failed"  # the stored spec could not be submitted

_CRON_FIELDS = {
    5: ("minute", "hour", "day-of-month", "month", "day-of-week"),
    6: ("second", "minute", "hour", "day-of-month", "month", "day-of-week"),
    7: ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year"),
}
_CRON_ALLOWED = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L or ?",
    "month": "1-12 or jan-dec",
    "day-of-week": "0-7 or sun-sat, n#k, L or ?",
    "year": "1970-2099",
}
_CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NUMBER = r"(\d+(?:[.,]\d+)?)"
_DURATION_RE = re.compile(
    rf"P(?:{_NUMBER}Y)?(?:{_NUMBER}M)?(?:{_NUMBER}W)?(?:{_NUMBER}D)?"
    rf"(?:T(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?"
)
_DURATION_MS = (None, None, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1_000)
_DURATION_HINT = "e.g. PT30S, PT1H30M, P1D"
_MISSED_REASON = {
    "one": "missed while no scheduler ran; catchup=one runs only the latest",
    "none": "missed while no scheduler ran; catchup=none runs none of them",
}


# -- triggers: parsing and fire times -------------------------------------------------------


@dataclass(frozen=True)
class Trigger:
    """When a schedule fires: once `at`, `every` fixed interval, or on a `cron` expression."""

    kind: str  # AT | EVERY | CRON
    expr: str  # at: ISO time in UTC; every: the ISO-8601 duration; cron: the expression
    tz: str | None = None  # cron and naive `at` times are read in this zone; None: UTC
    at_ms: int | None = None
    interval_ms: int | None = None

    @property
    def zone(self) -> tzinfo:
        return ZoneInfo(self.tz) if self.tz else UTC

    def next_after(self, t_ms: int, anchor_ms: int) -> int | None:
        """The first fire strictly after `t_ms`; None when there is none (a past `at`)."""
        if self.kind == AT:
            assert self.at_ms is not None
            return self.at_ms if self.at_ms > t_ms else None
        if self.kind == EVERY:
            assert self.interval_ms is not None
            k = max(1, (t_ms - anchor_ms) // self.interval_ms + 1)
            return anchor_ms + k * self.interval_ms
        return self._cron_step(t_ms, forward=True)

    def latest_at_or_before(self, t_ms: int, anchor_ms: int) -> int | None:
        """The last fire at or before `t_ms`; None when there is none."""
        if self.kind == AT:
            assert self.at_ms is not None
            return self.at_ms if self.at_ms <= t_ms else None
        if self.kind == EVERY:
            assert self.interval_ms is not None
            k = (t_ms - anchor_ms) // self.interval_ms
            return anchor_ms + k * self.interval_ms if k >= 1 else None
        # get_prev is strict, and cron fires fall on whole seconds: t + 1 ms includes t.
        return self._cron_step(t_ms + 1, forward=False)

    def count_between(self, first_ms: int, last_ms: int) -> int | None:
        """How many fires lie in [first, last]; None for cron (that would mean walking them)."""
        if self.kind == AT:
            return 1
        if self.kind == EVERY:
            assert self.interval_ms is not None
            return (last_ms - first_ms) // self.interval_ms + 1
        return None

    def _cron_step(self, t_ms: int, *, forward: bool) -> int | None:
        zone = self.zone
        it = croniter(
            self.expr, datetime.fromtimestamp(t_ms / 1000, zone), second_at_beginning=True
        )
        fixed_hour = _cron_hour_is_fixed(self.expr)
        try:
            while True:
                fire: datetime = it.get_next(datetime) if forward else it.get_prev(datetime)
                # Fall-back DST repeats an hour; like Vixie cron, a job at a fixed hour runs at
                # the first of the two occurrences only (an every-N-minutes job runs in both).
                if not (fixed_hour and _second_occurrence(fire)):
                    return round(fire.timestamp() * 1000)
        except CroniterBadDateError:
            return None


def _second_occurrence(dt: datetime) -> bool:
    """True when `dt`'s wall-clock time happens twice (DST fall-back) and this is the later."""
    return dt.fold == 1 and dt.replace(fold=0).utcoffset() != dt.utcoffset()


def _cron_hour_is_fixed(expr: str) -> bool:
    fields = _CRON_ALIASES.get(expr.strip().lower(), expr).split()
    hour = fields[1] if len(fields) == 5 else fields[2]
    return not hour.startswith("*")


def parse_zone(tz: str | None) -> str | None:
    """Check an IANA zone name (Europe/Paris); SpecError names an unknown one."""
    if tz is None:
        return None
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise SpecError(
            f"unknown time zone {tz!r} (give an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None
    return tz


def parse_at(value: str | datetime, tz: str | None = None) -> int:
    """An ISO-8601 time (or a datetime) as ms since the epoch; naive times are in `tz`/UTC."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise SpecError(
                f"time {value!r} is not an ISO-8601 date-time "
                "(e.g. 2026-11-22T09:00:00+01:00, or 2026-11-22 09:00 read in --tz)"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(tz) if tz else UTC)
    return round(moment.timestamp() * 1000)


def parse_duration(value: str | timedelta) -> int:
    """An ISO-8601 duration (PT30S, PT1H30M, P1D, P1W) or a timedelta, as ms.

    Months and years are refused: they have no fixed length (use cron for "monthly").
    """
    if isinstance(value, timedelta):
        ms = round(value.total_seconds() * 1000)
        shown = str(value)
    else:
        shown = str(value)
        text = shown.strip().upper()
        match = _DURATION_RE.fullmatch(text)
        if not match or text in ("P", "") or text.endswith("T") or not any(match.groups()):
            raise SpecError(f"interval {shown!r} is not an ISO-8601 duration ({_DURATION_HINT})")
        if match.group(1) or match.group(2):
            raise SpecError(
                f"interval {shown!r}: months and years have no fixed length; "
                "use --cron for calendar schedules (e.g. '0 0 1 * *' for monthly)"
            )
        total = Decimal(0)
        for raw, unit in zip(match.groups()[2:], _DURATION_MS[2:], strict=True):
            if raw is not None and unit is not None:
                try:
                    total += Decimal(raw.replace(",", ".")) * unit
                except InvalidOperation:  # pragma: no cover - the regex admits numbers only
                    raise SpecError(f"interval {shown!r} has a bad number") from None
        ms = int(total.to_integral_value())
    if ms < MIN_INTERVAL_MS:
        raise SpecError(f"interval {shown!r} is shorter than the minimum of 1 second")
    if ms > MAX_INTERVAL_MS:
        raise SpecError(f"interval {shown!r} is longer than the maximum of 100 years")
    return ms


def _cron_problem(expr: str) -> str:
    """What is wrong with a cron expression croniter rejects, naming the field."""
    if expr.startswith("@"):
        known = ", ".join(_CRON_ALIASES)
        return f"unknown shorthand {expr!r} (known: {known})"
    fields = expr.split()
    names = _CRON_FIELDS.get(len(fields))
    if names is None:
        return (
            f"it has {len(fields)} fields; give 5 (minute hour day-of-month month day-of-week), "
            "6 (a second field first) or 7 (second first, year last)"
        )
    for index, (name, value) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter.expand(" ".join(probe), second_at_beginning=True)
        except CroniterError:
            return f"the {name} field {value!r} is not valid (allowed: {_CRON_ALLOWED[name]})"
    return "croniter rejects the combination of its fields"


def parse_cron(expr: str, tz: str | None = None, now_ms: int | None = None) -> str:
    """Check a cron expression: 5 fields, or 6/7 with seconds first (and a year last), or an
    @alias. SpecError names the bad field, or says the expression can never fire."""
    expr = " ".join(str(expr).split())
    if not expr:
        raise SpecError("cron expression is empty")
    try:
        croniter.expand(expr, second_at_beginning=True)
    except CroniterError:
        raise SpecError(f"bad cron expression {expr!r}: {_cron_problem(expr)}") from None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if Trigger(CRON, expr, tz).next_after(now, now) is None:
        detail = "no time matches it from now on"
        try:
            croniter.expand(expr, second_at_beginning=True, strict=True)
        except CroniterError as exc:  # e.g. "Day(s) [31] can never occur in month(s) [2]"
            reason = str(exc).split("is not acceptable.", 1)[-1].strip()
            detail = reason[:1].lower() + reason[1:] if reason else detail
        raise SpecError(f"cron expression {expr!r} can never fire: {detail}")
    return expr


def parse_trigger(
    *,
    at: str | datetime | None = None,
    every: str | timedelta | None = None,
    cron: str | None = None,
    tz: str | None = None,
    now_ms: int | None = None,
) -> Trigger:
    """Exactly one of at/every/cron, checked; SpecError names whatever is wrong."""
    given = [name for name, v in ((AT, at), (EVERY, every), (CRON, cron)) if v is not None]
    if len(given) != 1:
        which = ", ".join(f"--{g}" for g in given) if given else "none"
        raise SpecError(f"give exactly one of --at, --every, --cron (got {which})")
    tz = parse_zone(tz)
    if at is not None:
        at_ms = parse_at(at, tz)
        iso = datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds")
        return Trigger(AT, iso, tz, at_ms=at_ms)
    if every is not None:
        if tz is not None:
            raise SpecError("--tz applies to --cron and --at; an --every interval is fixed")
        text = every if isinstance(every, str) else _iso_duration(parse_duration(every))
        return Trigger(EVERY, text.strip().upper(), interval_ms=parse_duration(every))
    assert cron is not None
    return Trigger(CRON, parse_cron(cron, tz, now_ms), tz)


def _iso_duration(ms: int) -> str:
    seconds = Decimal(ms) / 1000
    return f"PT{seconds.normalize():f}S"


# -- the schedule, its state, and the catch-up plan ---------------------------------------


@dataclass(frozen=True)
class Schedule:
    """A stored job template and when to submit it."""

    id: str
    trigger: Trigger
    spec: JobSpec
    name: str | None = None
    overlap: str = DEFAULT_OVERLAP
    catchup: str = DEFAULT_CATCHUP
    created_ms: int = 0  # also the anchor of an `every` interval: fires at created + k * every

    def next_after(self, t_ms: int) -> int | None:
        return self.trigger.next_after(t_ms, self.created_ms)

    def latest_at_or_before(self, t_ms: int) -> int | None:
        return self.trigger.latest_at_or_before(t_ms, self.created_ms)

    def to_dict(self) -> dict[str, Any]:
        t = self.trigger
        return {
            "id": self.id,
            "name": self.name,
            "kind": t.kind,
            "expr": t.expr,
            "tz": t.tz,
            "at_ms": t.at_ms,
            "interval_ms": t.interval_ms,
            "overlap": self.overlap,
            "catchup": self.catchup,
            "created_ms": self.created_ms,
            "spec": self.spec.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schedule:
        trigger = Trigger(d["kind"], d["expr"], d["tz"], d["at_ms"], d["interval_ms"])
        return cls(
            id=d["id"],
            trigger=trigger,
            spec=parse_spec(d["spec"]),
            name=d["name"],
            overlap=d["overlap"],
            catchup=d["catchup"],
            created_ms=d["created_ms"],
        )


_STATE_INTS = ("next", "pending", "buffered", "last_fire")
_STATE_COUNTERS = ("fires", "skipped", "missed", "failed")


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
        last_job = raw.get("last_job")
        return cls(
            paused=raw.get("paused") == b"1",
            last_job=last_job.decode() if last_job else None,
            **ints,  # type: ignore[arg-type]
            **counters,
        )

    def fields(self) -> list[Any]:
        """The state as the hash's field/value pairs for the scripts; '' marks an absent field."""
        values: dict[str, Any] = {"paused": int(self.paused)}
        values.update({k: getattr(self, k) for k in (*_STATE_INTS, "last_job", *_STATE_COUNTERS)})
        return [x for k, v in values.items() for x in (k, "" if v is None else v)]


@dataclass(frozen=True)
class Plan:
    """What to do with the fires due by `now` (a pure decision; see plan_fires)."""

    fire: int | None  # the fire to run (subject to the overlap policy); None: none runs
    next: int | None  # the first fire after those handled here
    missed_from: int | None = None  # the range of fires not run, when there is one
    missed_until: int | None = None
    missed_count: int | None = None  # None when unknown (cron: it would mean walking them)


def plan_fires(schedule: Schedule, next_ms: int, now_ms: int, grace_ms: int) -> Plan:
    """Apply the catch-up policy to the fires from `next_ms` (due) up to `now_ms`.

    all: run every fire, one per call, oldest first. one: run the latest due fire; earlier
    ones are missed. none: like one, but the latest runs only if it is at most `grace_ms`
    late, i.e. on time rather than caught up after an outage.
    """
    if schedule.catchup == "all":
        return Plan(fire=next_ms, next=schedule.next_after(next_ms))
    latest = schedule.latest_at_or_before(now_ms)
    if latest is None or latest < next_ms:
        latest = next_ms
    fire: int | None
    missed_until: int | None
    if schedule.catchup == "none" and now_ms - latest > grace_ms:
        fire, missed_until = None, latest
    else:
        fire = latest
        missed_until = schedule.latest_at_or_before(latest - 1) if latest > next_ms else None
        if missed_until is not None and missed_until < next_ms:
            missed_until = None
    count = None
    if missed_until is not None:
        count = schedule.trigger.count_between(next_ms, missed_until)
    return Plan(
        fire=fire,
        next=schedule.next_after(latest),
        missed_from=next_ms if missed_until is not None else None,
        missed_until=missed_until,
        missed_count=count,
    )


@dataclass(frozen=True)
class Fire:
    """One thing that happened to one fire of a schedule (as returned by tick, and recorded)."""

    schedule_id: str
    fire_ms: int
    outcome: str  # SUBMITTED | SKIPPED | BUFFERED | MISSED | FAILED
    job_id: str | None = None
    created: bool = False  # SUBMITTED: False when a crashed tick had submitted it already
    reason: str | None = None
    until_ms: int | None = None  # MISSED: the last fire of the missed range
    count: int | None = None  # MISSED: how many fires, when known

    def record(self, at_ms: int) -> bytes:
        data = {
            "fire": self.fire_ms,
            "outcome": self.outcome,
            "job": self.job_id,
            "reason": self.reason,
            "until": self.until_ms,
            "count": self.count,
            "at": at_ms,
        }
        return codec.pack({k: v for k, v in data.items() if v is not None}, what="fire record")


# -- storage --------------------------------------------------------------------------------


def now_ms(store: Store) -> int:
    """Redis TIME in ms: the one clock every schedule decision uses."""
    seconds, micros = store.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _text(value: Any) -> str:
    """A reply from Redis (bytes: the clients here do not decode responses) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _decode(raw: Mapping[Any, Any]) -> dict[str, bytes]:
    return {_text(k): v for k, v in raw.items()}


def _load(raw: Mapping[str, bytes]) -> tuple[Schedule, ScheduleState]:
    definition = codec.unpack(raw["def"])
    assert isinstance(definition, dict)
    return Schedule.from_dict(definition), ScheduleState.from_hash(raw)


def _read(store: Store, schedule_id: str) -> tuple[Schedule, ScheduleState, int] | None:
    """A schedule, its state and the revision they were read at; None when it is gone."""
    raw = _decode(store.redis.hgetall(store.keys.schedule(schedule_id)))
    if not raw:
        return None
    return *_load(raw), int(raw.get(_REVISION, 0))


def _due(state: ScheduleState) -> int | str:
    score = state.due_score()
    return "" if score is None else score


def _save(
    store: Store,
    schedule: Schedule,
    revision: int,
    state: ScheduleState,
    fires: Sequence[Fire] = (),
    now: int = 0,
) -> int:
    """Write `state` (and the records of `fires`) if the schedule is still at `revision`:
    _SAVED, _STALE (decide again from a fresh read) or _GONE."""
    # a finished one-time schedule is kept as long as a finished job
    retention = int(store.settings.retention_seconds * 1000) if state.done else ""
    records = [f.record(now) for f in fires]
    args = [schedule.id, revision, _due(state), retention, FIRES_KEPT, len(records), *records]
    keys = store.keys.schedule_keys(schedule.id, schedule.name)
    return int(store.scripts.run("schedule_save", keys, [*args, *state.fields()])[0])


def resolve(store: Store, ref: str) -> str:
    """A schedule id from an id or a name; NotFound names what was asked for."""
    if store.redis.exists(store.keys.schedule(ref)):
        return ref
    found = store.redis.get(store.keys.schedule_name(ref))
    if found is not None and store.redis.exists(store.keys.schedule(_text(found))):
        return _text(found)
    raise _not_found(store, ref)


def _not_found(store: Store, ref: str) -> NotFound:
    return NotFound(f"no schedule {ref!r} in namespace {store.settings.namespace!r}")


def add_schedule(
    store: Store,
    spec: JobSpec | Mapping[str, Any] | Any,
    *,
    at: str | datetime | None = None,
    every: str | timedelta | None = None,
    cron: str | None = None,
    tz: str | None = None,
    name: str | None = None,
    overlap: str = DEFAULT_OVERLAP,
    catchup: str = DEFAULT_CATCHUP,
) -> Schedule:
    """Store a schedule; its first fire is the first trigger time after now (or `at`)."""
    job = spec_from_any(spec)
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
    now = now_ms(store)
    trigger = parse_trigger(at=at, every=every, cron=cron, tz=tz, now_ms=now)
    schedule = Schedule(ulid(), trigger, job, name, overlap, catchup, created_ms=now)
    first = trigger.at_ms if trigger.kind == AT else schedule.next_after(now)
    state = ScheduleState(next=first)
    definition = codec.pack(schedule.to_dict(), what="schedule")
    keys = store.keys.schedule_keys(schedule.id, name)
    args = [schedule.id, now, _due(state), "def", definition, *state.fields()]
    reply = store.scripts.run("schedule_add", keys, args)
    if int(reply[0]) == _NAME_TAKEN:
        raise SpecError(f"a schedule named {name!r} exists already ({_text(reply[1])})")
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
        "next_fire": _seconds(state.next),
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
    keys = store.keys
    rows: list[dict[str, Any]] = []
    gone: list[str] = []
    read = 0
    while True:
        ids = [
            _text(raw) for raw in store.redis.zrange(keys.schedules(), read, read + LIST_PAGE - 1)
        ]
        read += len(ids)
        pipe = store.redis.pipeline(transaction=False)
        for schedule_id in ids:
            pipe.hgetall(keys.schedule(schedule_id))
        for schedule_id, raw in zip(ids, pipe.execute(), strict=True):
            if not raw:
                gone.append(schedule_id)  # a finished one-time schedule past its retention
                continue
            rows.append(_view(*_load(_decode(raw))))
        if len(ids) < LIST_PAGE:
            break
    if gone:
        store.redis.zrem(keys.schedules(), *gone)
    return rows


def show_schedule(store: Store, ref: str, *, fires: int = 20) -> dict[str, Any]:
    """One schedule, its job spec and its `fires` most recent fire records."""
    schedule_id = resolve(store, ref)
    keys = store.keys
    pipe = store.redis.pipeline(transaction=False)
    pipe.hgetall(keys.schedule(schedule_id))
    pipe.lrange(keys.schedule_fires(schedule_id), 0, max(0, fires - 1))
    raw, records = pipe.execute()
    if not raw:
        raise NotFound(f"no schedule {ref!r} in namespace {store.settings.namespace!r}")
    schedule, state = _load(_decode(raw))
    view = _view(schedule, state)
    view["spec"] = schedule.spec.to_dict()
    view["recent"] = [_record_view(codec.unpack(r)) for r in records] if fires > 0 else []
    return view


def _record_view(record: object) -> dict[str, Any]:
    assert isinstance(record, dict)
    out = dict(record)
    for k in ("fire", "until", "at"):
        if k in out:
            out[k] = out[k] / 1000
    return out


def _change(
    store: Store, ref: str, fn: Callable[[Schedule, ScheduleState], ScheduleState]
) -> dict[str, Any]:
    """Apply `fn` to a schedule's state as read, decided again when a tick changed the
    schedule meanwhile; returns the new view."""
    schedule_id = resolve(store, ref)
    for _ in range(CHANGE_ATTEMPTS):
        read = _read(store, schedule_id)
        if read is None:
            raise _not_found(store, ref)
        schedule, state, revision = read
        new = fn(schedule, state)
        code = _save(store, schedule, revision, new)
        if code == _SAVED:
            return _view(schedule, new)
        if code != _STALE:
            raise _not_found(store, ref)
    raise JobcenterError(f"schedule {ref!r} kept changing under a ticker; try again")


def pause_schedule(store: Store, ref: str) -> dict[str, Any]:
    """Stop firing until resumed (a fire already decided still completes)."""
    return _change(store, ref, lambda _s, state: replace(state, paused=True))


def resume_schedule(store: Store, ref: str, *, now: int | None = None) -> dict[str, Any]:
    """Fire again. Recurring fires that fell due while paused are not caught up: the next
    fire is the first one after now. A one-time fire that passed while paused follows the
    catch-up policy (one/all: it runs now; none: it is missed)."""
    t = now_ms(store) if now is None else now

    def resume(schedule: Schedule, state: ScheduleState) -> ScheduleState:
        nxt = state.next
        if schedule.trigger.kind != AT and nxt is not None and nxt <= t:
            nxt = schedule.next_after(t)
        return replace(state, paused=False, next=nxt)

    return _change(store, ref, resume)


def remove_schedule(store: Store, ref: str) -> str:
    """Delete a schedule and its records; jobs it submitted are untouched. Returns its id."""
    schedule_id = resolve(store, ref)
    read = _read(store, schedule_id)
    name = None if read is None else read[0].name  # its key holds the id: freed with it
    keys = store.keys.schedule_keys(schedule_id, name)
    if read is None or int(store.scripts.run("schedule_remove", keys, [schedule_id])[0]) == _GONE:
        raise _not_found(store, ref)
    return schedule_id


# -- the ticker -----------------------------------------------------------------------------


@dataclass
class _Decision:
    fires: list[Fire] = field(default_factory=list)  # skips, buffers and misses recorded
    submit: int | None = None  # a fire to submit now (it is `pending` in Redis)
    schedule: Schedule | None = None
    stop: bool = False  # nothing more is due for this schedule in this tick


class Scheduler:
    """Fires due schedules; any number of workers may tick, one tick runs at a time."""

    def __init__(
        self,
        store: Store,
        handler: str,
        *,
        grace_ms: int = MISFIRE_GRACE_MS,
        lease_ms: int | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        self.grace_ms = grace_ms
        # A ticker silent for one lease is gone, like a task attempt's holder.
        self.lease_ms = lease_ms if lease_ms is not None else store.settings.lease_ms

    def tick(self, now: int | None = None) -> list[Fire]:
        """Handle every fire due by `now` (default Redis TIME) unless another ticker holds
        the lease; returns what happened, each fire reported by exactly one ticker."""
        store = self.store
        t = now_ms(store) if now is None else now
        due = store.keys.schedules_due()
        if not store.redis.zrangebyscore(due, "-inf", t, 0, 1):
            return []  # the idle path: no lease taken
        if store.singleton(SINGLETON, "acquire", self.handler, self.lease_ms) != 0:
            return []
        try:
            ids = [_text(raw) for raw in store.redis.zrangebyscore(due, "-inf", t, 0, DUE_PER_TICK)]
            return self._run(ids, t)
        finally:
            store.singleton(SINGLETON, "release", self.handler, self.lease_ms)

    def _run(self, schedule_ids: list[str], now: int) -> list[Fire]:
        """Step the due schedules in rounds: a round decides one step of each schedule still
        due, then submits all of the round's fires in one batch (one round trip, one
        durability wait), then confirms them."""
        fires: list[Fire] = []
        due = schedule_ids
        for _ in range(STEPS_PER_SCHEDULE):
            if not due:
                break
            to_submit: list[tuple[Schedule, int]] = []
            still_due = []
            for schedule_id in due:
                try:
                    decision = self._decide(schedule_id, now)
                except SpecError as exc:  # a stored definition this version cannot read
                    log.error("schedule %s cannot be read, skipped: %s", schedule_id, exc)
                    continue
                fires += decision.fires
                if decision.submit is not None and decision.schedule is not None:
                    to_submit.append((decision.schedule, decision.submit))
                if not decision.stop:
                    still_due.append(schedule_id)
            fires += [f for f in self._submit(to_submit) if self._confirm(f, now)]
            due = still_due
            if self.store.singleton(SINGLETON, "renew", self.handler, self.lease_ms) != 0:
                log.warning("scheduler lease lost mid-tick; leaving the rest to its holder")
                break
        return fires

    def _running(self, job_id: str | None) -> bool:
        """Whether the schedule's previous run is still going (an expired job is not)."""
        if job_id is None:
            return False
        raw = self.store.redis.hget(self.store.keys.job(job_id).job, "state")
        return raw is not None and not JobState(_text(raw)).terminal

    def _decide(self, schedule_id: str, now: int) -> _Decision:
        """Step 1 of a fire: decide it from the schedule as read, and advance the schedule
        (schedule_save) unless it changed meanwhile: then the next step reads it again."""
        store = self.store
        due = store.keys.schedules_due()
        read = _read(store, schedule_id)
        if read is None:  # removed or expired; ids are never reused, so nothing races this
            store.redis.zrem(due, schedule_id)
            return _Decision(stop=True)
        schedule, state, revision = read
        if state.pending is not None:  # a ticker died between decide and confirm
            return _Decision(submit=state.pending, schedule=schedule)
        if state.buffered is not None and not state.paused and not self._running(state.last_job):
            new = replace(state, pending=state.buffered, buffered=None)
            decision = _Decision(submit=state.buffered, schedule=schedule)
        elif not state.paused and state.next is not None and state.next <= now:
            new, decision = self._apply(schedule, state, now)
        else:
            if store.redis.zscore(due, schedule_id) != state.due_score():
                _save(store, schedule, revision, state)
            return _Decision(stop=True)
        if _save(store, schedule, revision, new, decision.fires, now) != _SAVED:
            return _Decision()
        return decision

    def _apply(
        self, schedule: Schedule, state: ScheduleState, now: int
    ) -> tuple[ScheduleState, _Decision]:
        """The catch-up and overlap policies applied to the fires due by `now`."""
        assert state.next is not None
        plan = plan_fires(schedule, state.next, now, self.grace_ms)
        decision = _Decision(schedule=schedule)
        new = replace(state, next=plan.next)
        sid = schedule.id
        if plan.missed_from is not None:
            decision.fires.append(
                Fire(
                    sid,
                    plan.missed_from,
                    MISSED,
                    reason=_MISSED_REASON[schedule.catchup],
                    until_ms=plan.missed_until,
                    count=plan.missed_count,
                )
            )
            new = replace(new, missed=new.missed + (plan.missed_count or 1))
        if plan.fire is None:
            return new, decision
        if schedule.overlap != "allow" and self._running(state.last_job):
            still = f"previous run {state.last_job} still going"
            if schedule.overlap == "buffer-one" and state.buffered is None:
                decision.fires.append(Fire(sid, plan.fire, BUFFERED, reason=still))
                return replace(new, buffered=plan.fire), decision
            if state.buffered is not None:
                still += " and a fire is buffered already"
            decision.fires.append(Fire(sid, plan.fire, SKIPPED, reason=still))
            return replace(new, skipped=new.skipped + 1), decision
        decision.submit = plan.fire
        return replace(new, pending=plan.fire), decision

    def _submit(self, due: list[tuple[Schedule, int]]) -> list[Fire]:
        """Step 2: submit the fires' jobs (idempotent per fire), all in one batch."""
        specs: list[JobSpec] = []
        fired: list[tuple[Schedule, int]] = []
        failed: list[Fire] = []
        for schedule, fire_ms in due:
            try:  # a stored spec this version no longer accepts fails its fire alone
                spec = spec_from_any(
                    replace(schedule.spec, idempotency_key=f"{schedule.id}:{fire_ms}")
                )
            except JobcenterError as exc:
                failed.append(self._failed(schedule, fire_ms, exc))
                continue
            specs.append(spec)
            fired.append((schedule, fire_ms))
        if not specs:
            return failed
        origins = [(schedule.id, fire_ms / 1000) for schedule, fire_ms in fired]
        try:
            results = self.store.submit_many(specs, fired=origins)
        except JobcenterError as exc:
            if len(specs) == 1:
                return failed + [self._failed(*fired[0], exc)]
            # one job refused the batch: each again on its own (the idempotency keys make
            # the ones that got through no-ops), so the others still fire
            return failed + [fire for item in fired for fire in self._submit([item])]
        return failed + [
            Fire(schedule.id, fire_ms, SUBMITTED, job_id, created)
            for (schedule, fire_ms), (job_id, created) in zip(fired, results, strict=True)
        ]

    def _failed(self, schedule: Schedule, fire_ms: int, exc: JobcenterError) -> Fire:
        log.error("schedule %s: fire %d not submitted: %s", schedule.id, fire_ms, exc)
        return Fire(schedule.id, fire_ms, FAILED, reason=str(exc))

    def _confirm(self, fire: Fire, now: int) -> bool:
        """Record a submitted (or failed) fire and clear `pending`; False when another
        ticker confirmed it first, the schedule was removed, or it changed since read (the
        fire stays pending: the next step submits it again, a no-op, and confirms it)."""
        read = _read(self.store, fire.schedule_id)
        if read is None:
            return False
        schedule, state, revision = read
        if state.pending != fire.fire_ms:
            return False
        if fire.outcome == SUBMITTED:
            new = replace(
                state,
                pending=None,
                last_fire=fire.fire_ms,
                last_job=fire.job_id,
                fires=state.fires + 1,
            )
        else:
            new = replace(state, pending=None, failed=state.failed + 1)
        return _save(self.store, schedule, revision, new, [fire], now) == _SAVED


def run_ticker(
    store: Store, handler: str, stopped: threading.Event, interval: float = TICK_SECONDS
) -> None:
    """A worker thread's loop: tick every `interval` seconds until `stopped` is set. A failed
    tick is retried at the next one (every step of a fire is safe to repeat)."""
    scheduler = Scheduler(store, handler)
    while not stopped.wait(interval):
        try:
            scheduler.tick()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("scheduler tick failed: redis unreachable (%s)", exc)
        except Exception:  # a bug must not end the thread: schedules would silently stop
            log.exception("scheduler tick failed")
