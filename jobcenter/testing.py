"""Test a DAG's data flow in a unit test, without a server: `run_job` submits a job to an
in-memory fakeredis (its Lua support runs the very scripts Redis runs: the same claims,
releases, inputs, map expansions and cascades) and runs its tasks here, one at a time,
through the worker's own outcome policy, until the job ends.

    from jobcenter.testing import run_job

    def test_etl() -> None:
        run = run_job(spec, modules=["myapp.tasks"])
        assert run.state == "succeeded"
        assert run.result("load") == 3

What differs from a worker: tasks run in this thread one after another, retries run at
once (no backoff wait), timeouts and cancels are not enforced. Needs `fakeredis[lua]`
(`pip install 'jobcenter[testing]'`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobcenter.config import ACKED, Settings
from jobcenter.errors import JobcenterError
from jobcenter.model.spec import JobSpec, spec_from_any
from jobcenter.model.states import JobState, TaskState
from jobcenter.runtime import registry
from jobcenter.runtime.execution.outcome import context_for, decode, execute
from jobcenter.runtime.leader import Leader
from jobcenter.storage.store import StartedTask, Store

HANDLER = "jobcenter-testing"  # the one in-process worker's handler id
NAMESPACE = "testing"
CLAIM_MAX = 100  # tasks claimed per round: each runs before the next claim
STEPS_MAX = 1_000_000  # claim rounds before a job that never ends is reported stuck


@dataclass(frozen=True)
class TaskRun:
    """How one task ended: its state, what it returned (None without a result), its last
    error and its number of attempts."""

    state: str
    result: Any
    error: str | None
    attempts: int


@dataclass(frozen=True)
class JobRun:
    """A finished job: its id, state and each task (map instances: `<task>[<i>]`) by id."""

    job_id: str
    state: str
    tasks: dict[str, TaskRun] = field(default_factory=dict)

    def result(self, task_id: str) -> Any:
        """What task `task_id` returned; KeyError for an unknown task."""
        return self.tasks[task_id].result

    def states(self) -> dict[str, str]:
        """Each task's final state by task id."""
        return {task_id: t.state for task_id, t in self.tasks.items()}


def in_memory_store() -> Store:
    """A Store on a fresh in-memory fakeredis with Lua (fakeredis[lua])."""
    try:
        import fakeredis
    except ImportError as exc:
        raise JobcenterError(
            "jobcenter.testing needs fakeredis with Lua: pip install 'jobcenter[testing]'"
        ) from exc
    settings = Settings(namespace=NAMESPACE, durability=ACKED)
    return Store(fakeredis.FakeRedis(), settings)


def run_job(
    spec: JobSpec | Mapping[str, Any] | Any,
    *,
    modules: Iterable[str] = (),
    store: Store | None = None,
    signals: Mapping[str, Any] | None = None,
) -> JobRun:
    """Submit `spec` (a dict, a JobSpec or a builder Job) and run its tasks in-process until
    the job ends; returns every task's state and result. Tasks are the ones registered with
    @task, after importing `modules`. `store`: another Store to run on (default: a fresh
    in-memory one). `signals`: name -> payload, sent at once to its `wait_for: {signal}`
    tasks (each takes its payload when it reaches its wait). A child job a task spawns runs
    here too."""
    registry.import_modules(modules)
    store = store or in_memory_store()
    job_id, _ = store.submit(spec_from_any(spec))
    for name, payload in (signals or {}).items():
        store.signal(job_id, name, payload)
    return finish_job(store, job_id)


def finish_job(store: Store, job_id: str) -> JobRun:
    """Run a submitted job's tasks in-process until it ends (again, after a retry)."""
    queues = store.job_meta(job_id).queues
    leader = Leader(store, HANDLER)
    for _ in range(STEPS_MAX):
        claimed = store.claim(HANDLER, queues, max_tasks=CLAIM_MAX, max_leader=CLAIM_MAX)
        for kind, message_job in claimed.leader:
            leader.handle(kind, message_job)
        _run(store, claimed.tasks)
        if not claimed.leader and not claimed.tasks:
            if store.progress(job_id).state.terminal:
                return _job_run(store, job_id)
            waits = ", ".join(f"{w.kind} {w.name}" for w in store.awaiting(job_id))
            raise JobcenterError(
                f"job {job_id} is stuck: no task is ready and it has not ended"
                + (f" (tasks wait for {waits}: pass run_job(signals=...))" if waits else "")
            )
    raise JobcenterError(f"job {job_id} did not end within {STEPS_MAX} rounds")


def _run(store: Store, tasks: list[StartedTask]) -> None:
    """Run the attempts and report them as a worker would: the successes in one batch,
    each failure with a retry due at once."""
    done = []
    for task in tasks:
        payload = decode(task)
        outcome = execute(task, payload, context_for(task, payload, HANDLER, lambda _: None))
        if outcome.ok:
            done.append((task.job_id, task.index, task.token, outcome.result))
        elif outcome.missing_task:
            raise JobcenterError(
                f"task {outcome.missing_task!r} is not registered: pass its module in `modules`"
            )
        else:
            delay = 0 if outcome.retry_delay_ms >= 0 else -1
            store.fail(HANDLER, task.job_id, task.index, task.token, outcome.error, delay)
    if done:
        store.complete(HANDLER, done)


def _job_run(store: Store, job_id: str) -> JobRun:
    status = store.status(job_id)
    results = store.results(job_id)
    tasks = {}
    for task_id, t in status["tasks"].items():
        result = results.get(task_id) if t["state"] == TaskState.SUCCEEDED else None
        tasks[task_id] = TaskRun(t["state"], result, t["error"], t["attempts"])
    return JobRun(job_id, JobState(status["state"]).value, tasks)
