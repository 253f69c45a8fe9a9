"""The leader's side of waits for other jobs (`wait_for: {job: ID}` or `{schedule: NAME}`, and
a task's wait for the child job it spawned):
register each wait with the job it waits for, in that job's shard, and tell the waiting jobs
when it ends. Every step is idempotent and its leader message is removed only once it is
done, so a leader that dies half way is simply followed by the next one (ARCHITECTURE.md,
Waiting for the world)."""

from __future__ import annotations

import logging

from jobcenter.errors import UnknownJob
from jobcenter.model import codec
from jobcenter.model.states import JobState
from jobcenter.storage import schedules
from jobcenter.storage.store import Store

log = logging.getLogger(__name__)

# How soon to look again for a schedule's run that is due but not submitted yet (its fire
# is pending or buffered behind the previous run): one look per waiting job, not per task.
RUN_RECHECK_MS = 5_000


def await_step(store: Store, job_id: str) -> None:
    """A job's 'await' message: register its new job waits (a schedule's run found first),
    settle those whose job ended already, then fail the waits past their timeout."""
    recheck: int | None = None
    for wait in store.job_waits(job_id):
        target = wait.bound if wait.kind == "schedule" else wait.name
        if target is None:
            target, problem, later = _scheduled_run(store, job_id, wait.name)
            if problem:
                store.await_settle(job_id, "fail", [wait.index, problem])
                continue
            if target is None:
                recheck = later if recheck is None else min(recheck, later)
                continue
            store.await_settle(job_id, "bind", [wait.index, target])
        state = store.await_register(target, job_id)
        if state == "" or JobState(state).terminal:
            store.await_settle(
                job_id, "end", [target, state, _result(store, job_id, target, state)]
            )
    store.await_due(job_id, recheck)


def awaited_step(store: Store, job_id: str) -> None:
    """A job's 'waiters' message (it ended and tasks of other jobs wait for it): settle their
    waits, then forget them and the message."""
    state = store.job_state(job_id)
    if state is not None and not state.terminal:  # retried since: its next end tells them
        store.drop_leader_message("waiters", job_id)
        return
    outcome = "" if state is None else state.value
    told = store.job_awaiters(job_id)
    for waiter in told:
        try:
            result = _result(store, waiter, job_id, outcome)
            ended = store.await_settle(waiter, "end", [job_id, outcome, result])
        except UnknownJob:
            continue
        log.info("job %s %s: %d waiting task(s) of job %s settled", job_id, outcome, ended, waiter)
    store.awaiters_told(job_id, told)
    store.drop_leader_message("waiters", job_id)


def lost_waits(store: Store, job_id: str) -> bool:
    """Recovery's check of an unfinished job's waits: whether a step they need was lost (a
    leader message gone with writes Redis lost, a registration never made): a wait with a
    timeout, or a schedule's run not found yet, without the job's 'await' message; a wait
    for a job that ended or is gone. Reads only; the 'await' step it asks for is idempotent."""
    waits = store.awaiting(job_id)
    if not waits:
        return False
    pending = store.leader_message_due(job_id, "await") is not None
    for wait in waits:
        target = wait.bound if wait.kind == "schedule" else wait.name
        if wait.kind == "signal" or target is None:
            if not pending and (wait.timeout or wait.kind == "schedule"):
                return True
            continue
        state = store.job_state(target)
        if state is None or state.terminal:
            return True
    return False


def _result(store: Store, waiter: str, job_id: str, state: str) -> bytes:
    """What a wait for job `job_id` that succeeded returns: for a task that spawned it, the
    child's results (by task id) or the one result it names; else the job and its state."""
    if state != JobState.SUCCEEDED:
        return b""
    spawner = [w for w in store.job_waits(waiter) if w.kind == "child" and w.name == job_id]
    if not spawner:
        return codec.pack({"job": job_id, "state": state})
    results = store.results(job_id)
    named = spawner[0].bound
    return codec.pack(results.get(named) if named else results)


def _scheduled_run(store: Store, job_id: str, name: str) -> tuple[str | None, str, int]:
    """The run of schedule `name` fired at the same time as job `job_id`: (its id, '', 0),
    or (None, why it can never come, 0), or (None, '', when to look again)."""
    schedule_id = schedules.find(store, name)
    if schedule_id is None:
        return None, f"schedule {name} does not exist (removed?): no run of it to wait for", 0
    fire = store.fire_ms(job_id)
    if fire is None:
        return (
            None,
            (
                f"job {job_id} was not fired by a schedule: wait_for schedule waits for the run "
                "fired at the same time"
            ),
            0,
        )
    run = store.schedule_run(schedule_id, fire)
    if run is not None:
        return run, "", 0
    stored = schedules.read(store, schedule_id)
    state = stored.state if stored else None
    coming = state is not None and (
        fire in (state.pending, state.buffered) or (state.next is not None and state.next <= fire)
    )
    run = store.schedule_run(schedule_id, fire)  # submitted while the state was read?
    if run is not None:
        return run, "", 0
    if not coming:
        return None, f"schedule {name} did not run at fire time {fire} ms (skipped or missed)", 0
    return None, "", max(store.now_ms(), fire) + RUN_RECHECK_MS
