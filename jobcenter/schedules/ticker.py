"""The ticker: fires due schedules, one ticker at a time per namespace.

Guarantees, and how:

- No fire makes two jobs: each fire is submitted with idempotency key `schedule_id:fire_ms`.
- No fire is lost when a ticker dies: a fire is first *decided* (written to the schedule as
  `pending`, with the next fire time advanced, in one script), then submitted, then
  *confirmed* (recorded, `pending` cleared). A ticker that dies in between leaves `pending`
  behind; the next tick submits it again, which the idempotency key turns into a no-op if the
  first submit got through.
- One ticker at a time: a tick holds the `scheduler` singleton lease. Beyond that, every
  write is one Lua script (storage/lua/schedule_*.lua). Decisions are made in Python from the
  schedule as read, at a revision the hash carries; schedule_save applies one only if the
  revision is unchanged, else the ticker reads again and decides again. So a ticker that lost
  its lease while stalled, or a `pause`/`remove` racing a tick, cannot apply a stale decision.

Every time is Redis TIME in milliseconds (worker clocks never count).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace

from jobcenter.errors import JobcenterError, SpecError
from jobcenter.model.spec import JobSpec
from jobcenter.storage import schedules as stored
from jobcenter.storage.schedules import ScheduleState
from jobcenter.storage.server.errors import RedisError
from jobcenter.storage.store import Store

from .manage import read_schedule, save_schedule
from .planning import (
    BUFFERED,
    FAILED,
    MISFIRE_GRACE_MS,
    MISSED,
    MISSED_REASON,
    SKIPPED,
    SUBMITTED,
    Fire,
    Schedule,
    plan_fires,
)

log = logging.getLogger(__name__)

SINGLETON = "scheduler"  # the lease that makes one ticker at a time per namespace
DUE_PER_TICK = 1_000  # schedules one tick visits at most; the rest wait for the next tick
STEPS_PER_SCHEDULE = 100  # fires one tick handles per schedule (catchup=all after an outage)
TICK_SECONDS = 1.0  # how often a worker should tick: the lateness of a fire in normal running


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
        t = store.now_ms() if now is None else now
        if not stored.due_ids(store, t, 1):
            return []  # the idle path: no lease taken
        if store.singleton(SINGLETON, "acquire", self.handler, self.lease_ms) != 0:
            return []
        try:
            return self._run(stored.due_ids(store, t, DUE_PER_TICK), t)
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
        state = self.store.job_state(job_id)
        return state is not None and not state.terminal

    def _decide(self, schedule_id: str, now: int) -> _Decision:
        """Step 1 of a fire: decide it from the schedule as read, and advance the schedule
        (schedule_save) unless it changed meanwhile: then the next step reads it again."""
        store = self.store
        read = read_schedule(store, schedule_id)
        if read is None:  # removed or expired; ids are never reused, so nothing races this
            stored.undue(store, schedule_id)
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
            if stored.due_at(store, schedule_id) != state.due_score():
                save_schedule(store, schedule, revision, state)
            return _Decision(stop=True)
        records = [f.record(now) for f in decision.fires]
        if save_schedule(store, schedule, revision, new, records, now) != stored.SAVED:
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
                    reason=MISSED_REASON[schedule.catchup],
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
                spec = schedule.fire_spec(fire_ms)
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
        read = read_schedule(self.store, fire.schedule_id)
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
        return (
            save_schedule(self.store, schedule, revision, new, [fire.record(now)], now)
            == stored.SAVED
        )


def run_ticker(
    store: Store, handler: str, stopped: threading.Event, interval: float = TICK_SECONDS
) -> None:
    """A worker thread's loop: tick every `interval` seconds until `stopped` is set. A failed
    tick is retried at the next one (every step of a fire is safe to repeat), whatever Redis
    answered (unreachable, out of memory, read-only)."""
    scheduler = Scheduler(store, handler)
    while not stopped.wait(interval):
        try:
            scheduler.tick()
        except RedisError as exc:
            log.warning("scheduler tick failed: redis refused or unreachable (%s)", exc)
        except Exception:  # a bug must not end the thread: schedules would silently stop
            log.exception("scheduler tick failed")
