"""Backfill: run a schedule for each of its fire times in a past (or any) window, oldest
first, at most N runs unfinished at a time, each run with its own fire time.

Idempotent per fire: each fire is submitted with the fire's idempotency key (keys.fire_key),
the one the ticker uses, so a fire the schedule ran already is found (Store.schedule_runs)
and not run again, and a backfill run again (or after its process died half way) submits
only the fires still missing. Reruns, on request: `failed` retries a failed run in place
(the same job: its failed tasks and what is downstream of them run again), `all` submits a
new run for each finished fire, under the key of its next rerun (`<key>:rerun:<n>`), which
Store.schedule_run then names as the fire's run.

The limit is counted from Redis (the runs' states), not from what this process remembers:
runs a dead backfill left unfinished count against it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobcenter.errors import IdempotencyConflict, Refused, SpecError
from jobcenter.model.states import JobState
from jobcenter.storage import admin
from jobcenter.storage.store import Store

from .manage import find_schedule
from .planning import Schedule

FIRES_MAX = 10_000  # fires one backfill may run: a typo in --from must not submit a million
POLL_SECONDS = 0.5  # how often a backfill at its limit looks for a run that ended
RERUN_FAILED, RERUN_ALL = "failed", "all"
RERUNS = (RERUN_FAILED, RERUN_ALL)

# What a backfill did for a fire, or saw happen to a run it waits for.
SUBMITTED = "submitted"  # a first run of this fire
RETRIED = "retried"  # its failed run retried in place (rerun failed)
RERUN = "rerun"  # a new run of a fire that ran already (rerun all; a cancelled run)
RUNNING = "running"  # its run was under way already (it counts against the limit)
KEPT = "kept"  # it ran already: not run again
ENDED = "ended"  # a run this backfill waited for ended (its state says how)


@dataclass(frozen=True)
class BackfillLine:
    """One line of a backfill's progress: a fire, its run, what happened."""

    fire_ms: int
    job_id: str | None
    outcome: str
    state: str | None = None  # the run's state, where the line knows it
    unfinished: int = 0  # runs of the backfill unfinished just after this line
    total: int = 0  # fires in the window

    def to_dict(self) -> dict[str, Any]:
        return {
            "fire_time": datetime.fromtimestamp(self.fire_ms / 1000, UTC).isoformat(),
            "fire_ms": self.fire_ms,
            "job_id": self.job_id,
            "outcome": self.outcome,
            "state": self.state,
            "unfinished": self.unfinished,
            "total": self.total,
        }


def window_fires(schedule: Schedule, start: datetime, end: datetime) -> list[int]:
    """The schedule's fire times in [start, end), oldest first; SpecError past FIRES_MAX."""
    if end <= start:
        raise SpecError(f"--to ({end.isoformat()}) must come after --from ({start.isoformat()})")
    start_ms, end_ms = round(start.timestamp() * 1000), round(end.timestamp() * 1000)
    fires = schedule.trigger.fires_in(start_ms, end_ms, schedule.created_ms, FIRES_MAX + 1)
    if len(fires) > FIRES_MAX:
        raise SpecError(
            f"schedule {schedule.name or schedule.id} fires more than {FIRES_MAX} times from "
            f"{start.isoformat()} to {end.isoformat()}: backfill a shorter window at a time"
        )
    return fires


def backfill(
    store: Store,
    ref: str,
    start: datetime,
    end: datetime,
    *,
    max_running: int = 1,
    rerun: str | None = None,
    wait: bool = False,
    poll_seconds: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[BackfillLine]:
    """Run schedule `ref` (id or name) once per fire time in [start, end), oldest first,
    with at most `max_running` of its runs in the window unfinished at a time; yields a
    line per fire as it is decided, and per run as it ends. With `wait`, returns once every
    run it started has ended, else once the last one is submitted."""
    if max_running < 1:
        raise SpecError(f"--max-running must be 1 or more, got {max_running}")
    if rerun is not None and rerun not in RERUNS:
        raise SpecError(f"rerun must be one of {', '.join(RERUNS)}, got {rerun!r}")
    schedule = find_schedule(store, ref)
    fires = window_fires(schedule, start, end)
    return _Backfill(store, schedule, fires, max_running, rerun, poll_seconds, sleep).run(wait)


class _Backfill:
    def __init__(
        self,
        store: Store,
        schedule: Schedule,
        fires: list[int],
        max_running: int,
        rerun: str | None,
        poll_seconds: float,
        sleep: Callable[[float], None],
    ) -> None:
        self.store, self.schedule, self.fires = store, schedule, fires
        self.max_running, self.rerun = max_running, rerun
        self.poll_seconds, self.sleep = poll_seconds, sleep
        self.unfinished: dict[str, int] = {}  # job id -> fire ms: the runs counted

    def line(
        self, fire_ms: int, job_id: str | None, outcome: str, state: Any = None
    ) -> BackfillLine:
        shown = None if state is None else str(state)
        return BackfillLine(fire_ms, job_id, outcome, shown, len(self.unfinished), len(self.fires))

    def run(self, wait: bool) -> Iterator[BackfillLine]:
        runs = self.store.schedule_runs(self.schedule.id, self.fires)
        ids = [job_id for job_id, _ in runs.values() if job_id is not None]
        states = dict(zip(ids, self.store.job_states(ids), strict=True))
        todo: list[tuple[int, str | None, int]] = []  # fire, its run, its reruns so far
        for fire in self.fires:
            job_id, reruns = runs[fire]
            state = states.get(job_id) if job_id is not None else None
            if job_id is not None and state is not None and not state.terminal:
                self.unfinished[job_id] = fire
                yield self.line(fire, job_id, RUNNING, state)
            elif job_id is None or self._again(state):
                todo.append((fire, job_id, reruns))
            else:  # ran already (an expired run's key may outlive it: it ran)
                yield self.line(fire, job_id, KEPT, state or "expired")
        for fire, job_id, reruns in todo:
            while len(self.unfinished) >= self.max_running:
                yield from self._wait_for_one()
            yield self._start(fire, job_id, reruns)
        while wait and self.unfinished:
            yield from self._wait_for_one()

    def _again(self, state: JobState | None) -> bool:
        """Whether a finished fire runs again: all of them with rerun all, the failed and
        cancelled ones with rerun failed."""
        if self.rerun == RERUN_ALL:
            return True
        return self.rerun == RERUN_FAILED and state in (JobState.FAILED, JobState.CANCELLED)

    def _start(self, fire: int, job_id: str | None, reruns: int) -> BackfillLine:
        """Run `fire`: its first run, its failed run retried in place, or a new rerun."""
        if job_id is not None and self.rerun == RERUN_FAILED:
            try:
                admin.retry_job(self.store, job_id)
            except Refused:  # cancelled, or no failed task left: a new run instead
                pass
            else:
                self.unfinished[job_id] = fire
                return self.line(fire, job_id, RETRIED)
        rerun = 0 if job_id is None else reruns + 1
        spec = self.schedule.fire_spec(fire, rerun)
        try:
            ((new_id, _),) = self.store.submit_many([spec], fired=[(self.schedule.id, fire / 1000)])
        except IdempotencyConflict:  # the ticker fired it meanwhile, from a changed spec
            found = self.store.schedule_run(self.schedule.id, fire)
            assert found is not None
            new_id = found
        self.unfinished[new_id] = fire
        return self.line(fire, new_id, SUBMITTED if rerun == 0 else RERUN)

    def _wait_for_one(self) -> Iterator[BackfillLine]:
        """Poll the unfinished runs' states until one has ended; a line for each ended."""
        while True:
            ids = list(self.unfinished)
            ended = [
                (job_id, state)
                for job_id, state in zip(ids, self.store.job_states(ids), strict=True)
                if state is None or state.terminal
            ]
            if ended:
                for job_id, state in ended:
                    fire = self.unfinished.pop(job_id)
                    yield self.line(fire, job_id, ENDED, state or "expired")
                return
            self.sleep(self.poll_seconds)
