"""The Python client: submit jobs, read their status, wait for them, cancel them."""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Unpack

from jobcenter.model import codec
from jobcenter.model.fire_times import given_fire_time
from jobcenter.model.spec import JobSpec, check_name, spec_from_any
from jobcenter.model.states import JobState, TaskState
from jobcenter.storage.events import Events
from jobcenter.storage.keyspace.schema import JobField, PayloadKey, TaskField
from jobcenter.storage.server.embedded import local_url
from jobcenter.storage.server.outages import ride_out
from jobcenter.storage.store import JobProgress, JobQuery, Store, served_member

from . import schedules as _schedule
from .config import Settings
from .errors import NotFound
from .schedules.manage import ScheduleOptions
from .storage import admin, limits, operate, task_logs
from .storage import export as _export
from .storage import pause as _pause

SUBMIT_BATCH = 200  # jobs per round trip in submit_many: large gains, short script bursts
WAIT_POLL_MIN = 0.01  # first status poll of wait(): short jobs return fast
WAIT_POLL_MAX = 0.25  # polls slow down to this for long jobs


class Client:
    """A connection to one jobcenter namespace."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def from_url(
        cls, url: str | None = None, namespace: str | None = None, **settings: Any
    ) -> Client:
        """A client for Redis at `url`. Without one, it finds the server as the CLI does:
        JOBCENTER_REDIS_URL, else the one a running `jobcenter up` recorded in the nearest
        .jobcenter/ here or above (else the one this user started last), else
        redis://127.0.0.1:6379/0."""
        if url is None and not os.environ.get("JOBCENTER_REDIS_URL"):
            url, _ = local_url()
        return cls(
            Store.from_settings(Settings.from_env(redis_url=url, namespace=namespace, **settings))
        )

    @classmethod
    def from_env(cls, namespace: str | None = None, **settings: Any) -> Client:
        """A client for the server the CLI would use here (see from_url)."""
        return cls.from_url(None, namespace, **settings)

    @property
    def settings(self) -> Settings:
        return self.store.settings

    def submit(
        self, spec: JobSpec | dict[str, Any] | Any, *, fire_time: datetime | str | None = None
    ) -> str:
        """Validate and submit a job (a dict, a JobSpec or a builder); returns its id. With an
        idempotency key, a repeated submit returns the first job's id. `fire_time` (a
        datetime, or ISO 8601; UTC when it has no zone) is the time the run is for: its
        tasks read it (current_task().fire_time) and its placeholders are filled with it,
        in its own zone."""
        parsed = spec_from_any(spec)
        if fire_time is None:
            job_id, _ = self.store.submit(parsed)
            return job_id
        filled, seconds = given_fire_time(parsed, fire_time, "fire_time")
        job_id, _ = self.store.submit(filled, fire_time=seconds)
        return job_id

    def submit_many(
        self, specs: Iterable[JobSpec | dict[str, Any] | Any], *, batch: int = SUBMIT_BATCH
    ) -> builtins.list[str]:
        """Submit many jobs, `batch` per round trip; returns their ids in order. Each is
        validated first; a bad one raises before anything of its batch is written. Returns
        once all of them are durable (one wait for every batch; docs: Durability)."""
        parsed = [spec_from_any(spec) for spec in specs]
        batches = (parsed[start : start + batch] for start in range(0, len(parsed), batch))
        results = self.store.submit_batches(batches)
        if any(created for _, created in results):
            self.store.wait_durable()
        return [job_id for job_id, _ in results]

    def status(self, job_id: str) -> dict[str, Any]:
        return self.store.status(job_id)

    def unserved(self, pairs: Iterable[tuple[str, str]]) -> builtins.list[tuple[str, str]]:
        """Of (queue, task name) `pairs`, those no live worker has registered: its tasks wait
        until one does. Empty when no worker is known at all (nothing to compare with)."""
        live_since = self.store.now_ms() - int(self.settings.worker_timeout_seconds * 1000)
        served = self.store.served_since(live_since)
        if not served:
            return []
        return sorted({pair for pair in pairs if served_member(*pair) not in served})

    def spec_tasks(self, spec: JobSpec) -> builtins.list[tuple[str, str]]:
        """Each (queue, task name) a spec's tasks run as (a wait runs nowhere: none)."""
        return [(task.queue or spec.queue, task.task) for task in spec.tasks if not task.wait_for]

    def queued_unserved(self, job_id: str) -> dict[str, str]:
        """The job's queued tasks whose task name no live worker has registered on their
        queue: task id -> task name (what `status` says they wait for)."""
        fields = self.store.task_fields(job_id, TaskField.ID, TaskField.STATE, TaskField.QUEUE)
        queued = [i for i, s in fields[TaskField.STATE].items() if s == TaskState.QUEUED]
        if not queued:
            return {}
        job_queue = self.store.redis.hget(self.store.keys.job(job_id).job, JobField.QUEUE)
        payloads = self.store.records(job_id).values([TaskField.PAYLOAD.of(i) for i in queued])
        names = {}
        for index, payload in zip(queued, payloads, strict=True):
            decoded = codec.unpack(payload) if payload else None
            name = decoded.get(PayloadKey.TASK, "?") if isinstance(decoded, dict) else "?"
            queue = fields[TaskField.QUEUE].get(index) or (job_queue or b"default").decode()
            names[index] = (queue, str(name))
        missing = set(self.unserved(names.values()))
        ids = fields[TaskField.ID]
        return {ids.get(i, i): pair[1] for i, pair in names.items() if pair in missing}

    def events(self) -> Events:
        """The event streams: every transition of every job, merged across shards."""
        return Events(self.store)

    def result(self, job_id: str, task_id: str) -> Any:
        """What task `task_id` returned (a mapped task: its instances' results, in element
        order). NotFound for an unknown job or task; NoResult while it has not succeeded."""
        return self.store.result(job_id, task_id)

    def progress(self, job_id: str) -> JobProgress:
        """The job's state and how many of its tasks have ended: a read of three fields,
        cheap whatever the job's size."""
        return self.store.progress(job_id)

    def task_states(self, job_id: str) -> dict[str, str]:
        """Each written task's state by task id, in spec order, read in bounded pages."""
        fields = self.store.task_fields(job_id, TaskField.ID, TaskField.STATE)
        ids = fields[TaskField.ID]
        by_index = sorted(fields[TaskField.STATE].items(), key=lambda item: int(item[0]))
        return {ids.get(index, index): state for index, state in by_index}

    def state(self, job_id: str) -> str:
        state = self.store.job_state(job_id)
        if state is None:
            raise NotFound.job(job_id, self.settings.namespace)
        return state.value

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job is finished; returns its status. TimeoutError after `timeout`.
        A Redis outage meanwhile (a restart, a failover) is waited out, reconnecting with
        backoff: the job goes on without this wait, so the wait goes on too, until its
        timeout (without one: until Redis answers again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting = f"waiting for job {job_id}"
        pause = WAIT_POLL_MIN
        while not ride_out(lambda: JobState(self.state(job_id)).terminal, deadline, waiting):
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} not finished after {timeout}s")
            time.sleep(pause)
            pause = min(pause * 1.5, WAIT_POLL_MAX)
        return ride_out(lambda: self.status(job_id), deadline, waiting)

    def cancel(self, job_id: str) -> str:
        """Cancel a job: queued and waiting tasks never run, running attempts are revoked
        (their results are discarded), and the child jobs its tasks spawned are cancelled.
        Returns the job's state afterwards."""
        children = set(self.store.child_jobs(job_id))
        self.store.stop_job(job_id, "cancel")
        # the child jobs its tasks spawned go too (theirs in turn); a spawn after the stop is
        # refused, and its worker cancels the child it started
        for child in children | set(self.store.child_jobs(job_id)):
            state = self.store.job_state(child)
            if state is not None and not state.terminal:
                self.cancel(child)
        return self.state(job_id)  # the step that stopped the last task finalized the job

    def pause(self, job_id: str) -> bool:
        """Pause a job: none of its tasks starts until `resume`; running attempts finish.
        False when it was paused already."""
        return self.store.pause_job(job_id)

    def resume(self, job_id: str) -> bool:
        """Resume a paused job: its waiting tasks go back into their queues, in their
        places. False when it was not paused."""
        return self.store.resume_job(job_id)

    def pause_queue(self, queue: str) -> bool:
        """Pause a queue: no task of it is claimed until `resume_queue`; running attempts
        finish. False when it was paused already."""
        return _pause.pause_queue(self.store, check_name(queue, "a queue"))

    def resume_queue(self, queue: str) -> bool:
        return _pause.resume_queue(self.store, check_name(queue, "a queue"))

    def paused(self) -> dict[str, Any]:
        """What is paused: `queues` (each `queue` and `since`, epoch s) and `jobs` (how
        many; `list` and `status` show which)."""
        return {
            "queues": [
                {"queue": q.queue, "since": q.since} for q in _pause.paused_queues(self.store)
            ],
            "jobs": _pause.paused_job_count(self.store),
        }

    def signal(self, job_id: str, name: str, payload: Any = None) -> tuple[int, int]:
        """Send signal `name` to a job: its tasks with `wait_for: {signal: name}` that wait
        succeed with `payload` (plain data) as their result, and their children run; those
        not there yet keep it for when they get there. Returns (tasks released, tasks keeping
        it); (0, 0) when the same signal was sent already. WrongState when nothing waits for
        it or it was sent before with another payload."""
        return self.store.signal(job_id, name, payload)

    def list(self, **query: Unpack[JobQuery]) -> builtins.list[dict[str, Any]]:
        """Job summaries, newest first: `limit` (100) of them, filtered by `owner`, `state`,
        `schedule_id` (a schedule's id or name) and creation `since` (epoch seconds), as
        Store.list_jobs reads them."""
        if query.get("schedule_id"):
            query["schedule_id"] = _schedule.filter_id(self.store, str(query["schedule_id"]))
        return self.store.list_jobs(**query)

    def history(
        self, job_id: str, start: int = 0, count: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Every finished attempt of every task, oldest first (from the `start`th on, `count`
        of them at most: a page)."""
        return self.store.history(job_id, start, count)

    def task_log(self, job_id: str, task_id: str, attempt: int | None = None) -> dict[str, Any]:
        """What an attempt of a task printed and logged (its last 64 KiB), with the worker's
        lines about it: `log` (None when it wrote nothing), `attempt` (default: the latest),
        `attempts`, `logged_attempts`, `state`, and `running` while the attempt runs."""
        return task_logs.for_task(self.store, job_id, task_id, attempt)

    def retry(self, job_id: str) -> int:
        """Re-run a job's failed tasks and every task below them that ended (a cleanup that
        ran runs again after them); its other succeeded tasks are kept."""
        return admin.retry_job(self.store, job_id)

    def clear(
        self,
        job_id: str,
        task_ids: builtins.list[str],
        *,
        downstream: bool = False,
        upstream: bool = False,
        by: str,
        reason: str = "",
    ) -> tuple[int, builtins.list[str]]:
        """Put tasks back to run again, whatever they ended as, with every task below them
        (`downstream`) or above them (`upstream`) that ended; the rest keeps its state and
        results. `by` and `reason` go in the history. Returns how many tasks were cleared
        and the ids asked for."""
        return operate.clear(
            self.store, job_id, task_ids, downstream=downstream, upstream=upstream, by=by,
            reason=reason,
        )  # fmt: skip

    def mark(
        self,
        job_id: str,
        task_id: str,
        outcome: str,
        *,
        result: Any = None,
        by: str,
        reason: str = "",
    ) -> str:
        """Settle a failed or waiting task by hand as `outcome` (succeeded, with `result`;
        failed; skipped): the job goes on as if it had ended so. Returns its state before."""
        return operate.mark(
            self.store, job_id, task_id, outcome, result=result, by=by, reason=reason
        )

    def delete(self, job_id: str) -> None:
        """Delete a finished job and its index entries."""
        admin.delete_job(self.store, job_id)

    def dead_letters(self, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """The newest dead letters (tasks that failed for good)."""
        return admin.dead_letters(self.store, limit)

    def dead_letter(self, job_id: str, task_id: str) -> dict[str, Any]:
        return admin.dead_letter(self.store, job_id, task_id)

    def schedule(
        self, spec: JobSpec | dict[str, Any] | Any, **options: Unpack[ScheduleOptions]
    ) -> str:
        """Schedule `spec` once (`at`), `every` duration (90s, 15m, PT1H), or on `cron` (in
        `tz`), with an optional unique `name` and the `overlap` and `catchup` policies;
        returns the schedule id."""
        return _schedule.add_schedule(self.store, spec, **options).id

    def schedules(self) -> builtins.list[dict[str, Any]]:
        return _schedule.list_schedules(self.store)

    def remove_schedule(self, schedule_id: str) -> None:
        _schedule.remove_schedule(self.store, schedule_id)

    def export(
        self,
        since: float,
        until: float | None = None,
        states: Sequence[str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Finished jobs created between `since` and `until` (epoch seconds; until: now),
        oldest first, each with its tasks (as `status`) and attempts (as `history`); in
        `states` (finished states) only, when given."""
        high = self.store.now_ms() if until is None else int(until * 1000)
        chosen = states or _export.FINISHED_STATES
        return _export.export(self.store, int(since * 1000), high, chosen)

    def requeue(self, job_id: str, task_id: str) -> int:
        """Run a dead-lettered task again; its job re-opens and finalizes again."""
        return admin.requeue(self.store, job_id, task_id)

    def set_pool(self, name: str, slots: int) -> None:
        """Create pool `name` or change its size: at most `slots` slots of it are taken by
        running tasks at once (a task's `pool_slots`, 1 by default)."""
        limits.set_pool(self.store, name, slots)

    def delete_pool(self, name: str) -> None:
        """Delete an idle pool (refused while its slots are in use or tasks wait for it)."""
        limits.delete_pool(self.store, name)

    def pools(self) -> builtins.list[dict[str, Any]]:
        """Every pool set or named by a task: `name`, `slots` (None: never set), `used`,
        `waiting` (tasks parked until a slot frees)."""
        return [
            {"name": p.name, "slots": p.total, "used": p.used, "waiting": p.waiting}
            for p in limits.pools(self.store)
        ]

    def set_rate(self, target: str, rate: str) -> None:
        """Limit `queue:NAME` or `pool:NAME` to `rate` starts, e.g. "100/1s": at most that
        many of its tasks start per window of the period; the others wait in their place."""
        limits.set_rate(self.store, target, rate)

    def delete_rate(self, target: str) -> None:
        limits.delete_rate(self.store, target)

    def rates(self) -> builtins.list[dict[str, Any]]:
        """Every rate limit: `target` (queue:NAME or pool:NAME), `starts`, `period` (s)."""
        return [
            {"target": r.target, "starts": r.starts, "period": r.period}
            for r in limits.rates(self.store)
        ]
