"""A schedule, and the pure decision of what to do with its due fires: the catch-up policy
(plan_fires) and the record of what happened to each fire. No I/O: the ticker reads, calls
these, and writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jobcenter.model import codec
from jobcenter.model.fire_times import fill_spec, fire_datetime
from jobcenter.model.placeholders import FireValues
from jobcenter.model.spec import JobSpec, parse_spec, spec_from_any
from jobcenter.storage.keyspace.keys import fire_key

from .triggers import Trigger

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

# Outcomes of a fire, as recorded and returned by Scheduler.tick().
SUBMITTED = "submitted"  # a job was submitted (or, after a crash, found submitted already)
SKIPPED = "skipped"  # overlap: the previous run was still going
BUFFERED = "buffered"  # overlap=buffer-one: runs when the previous run ends
MISSED = "missed"  # catch-up policy: not run (the ticker was down or the schedule paused)
FAILED = "failed"  # the stored spec could not be submitted

MISSED_REASON = {
    "one": "missed while no scheduler ran; catchup=one runs only the latest",
    "none": "missed while no scheduler ran; catchup=none runs none of them",
}


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

    def fire_spec(self, fire_ms: int, rerun: int = 0) -> JobSpec:
        """The job this schedule submits for the fire at `fire_ms`: its spec with the fire's
        idempotency key (so a fire makes one job, whoever submits it: the ticker, run-now,
        a backfill) and its placeholders filled, times in the schedule's zone."""
        at = fire_datetime(fire_ms / 1000, self.trigger.zone)
        assert at is not None
        spec = fill_spec(self.spec, FireValues(at, self.id, self.name))
        return spec_from_any(replace(spec, idempotency_key=fire_key(self.id, fire_ms, rerun)))

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
