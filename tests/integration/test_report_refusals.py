"""A worker's reporter when a completion's reply is lost (a connection reset after Redis ran
the call), and what it logs when Redis refuses a heartbeat, result or failure: the real
cause, never "taken over" for a cancel. The worker runs in this process on the session's
Redis; the lost reply is injected around the real store call, and a recording runner stands
in for the task pool."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis
from helpers import wait_until
from integration_harness import RecordingRunner

from jobcenter.config import Settings
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.execution.outcome import Outcome
from jobcenter.runtime.worker import Options, Running, Worker
from jobcenter.storage import admin
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.store import StartedTask, Store, connect

SPEC = {
    "name": "parent-child",
    "tasks": [{"id": "p", "task": "t.p"}, {"id": "c", "task": "t.c", "depends_on": ["p"]}],
}


def test_children_a_completion_took_before_its_reply_was_lost_run_on_this_worker(
    redis_url: str, namespace: str
) -> None:
    store = Store(connect(redis_url), Settings(redis_url=redis_url, namespace=namespace))
    worker = Worker(store, Options(leader=False, recovery=False, concurrency=2))
    runner = RecordingRunner()
    worker.runner = runner  # type: ignore[assignment]
    job_id, _ = store.submit(parse_spec(SPEC))
    (parent,) = store.claim(worker.handler, ["default"], max_tasks=1, max_leader=0).tasks
    worker.running[(job_id, 0)] = Running(parent)

    real_complete = store.complete
    replies: list[Any] = []

    def complete_then_lose_the_first_reply(*args: Any, **kwargs: Any) -> Any:
        replies.append(real_complete(*args, **kwargs))
        if len(replies) == 1:
            raise redis.ConnectionError("connection reset by the test")
        return replies[-1]

    store.complete = complete_then_lose_the_first_reply  # type: ignore[method-assign]
    worker._report_with_retry([Outcome(parent, True)])

    _, first_taken = replies[0]
    assert [t.index for t in first_taken] == [1], "the lost reply had taken the child"
    assert replies[1][0] == {(job_id, 0): 1}, "sent again, the completion was found done"
    assert [(t.job_id, t.index, t.attempt) for t in runner.started] == [(job_id, 1, 1)]
    assert list(worker.running) == [(job_id, 1)]
    store.redis.close()


HANDLER, OTHER = "this-worker", "another-worker"
SHORT_LEASE_SECONDS = 0.2  # the takeover case waits one out


def _cancel(store: Store, job_id: str, _: StartedTask) -> None:
    store.stop_job(job_id, "cancel")


def _cancel_and_pack(store: Store, job_id: str, task: StartedTask) -> None:
    _cancel(store, job_id, task)
    assert store.compact(job_id)


def _cancel_and_delete(store: Store, job_id: str, task: StartedTask) -> None:
    _cancel(store, job_id, task)
    admin.delete_job(store, job_id)


def _take_over(store: Store, job_id: str, task: StartedTask) -> None:
    """The attempt's lease runs out; the task is run again by another worker."""
    shard = store.keys.job_shard(job_id)

    def requeued() -> bool:
        store.expire(store.expired_leases(shard, 10), grace_ms=0)
        return store.task_field(job_id, TaskField.STATE)["0"] == "queued"

    wait_until(requeued, message="the lease never ran out")
    (again,) = store.claim(OTHER, ["default"], max_tasks=1, max_leader=0).tasks
    assert again.attempt == task.attempt + 1


def _report_it_meanwhile(store: Store, job_id: str, task: StartedTask) -> None:
    """The worker's own report lands between its heartbeat's snapshot and the heartbeat."""
    assert store.complete(HANDLER, [(job_id, 0, task.token)])[0] == {(job_id, 0): 0}


CAUSES: dict[str, tuple[Callable[[Store, str, StartedTask], None], str]] = {
    "cancelled": (_cancel, "its job was cancelled"),
    "cancelled and packed": (_cancel_and_pack, "its job was cancelled"),
    "deleted": (_cancel_and_delete, "its job is gone"),
    "taken over": (_take_over, f"attempt 2 (handler {OTHER}) took the task over"),
}
HEARTBEAT_CAUSES = {  # a refused heartbeat stops the attempt (logged with its cause)
    "cancelled": "job {job} task a attempt 1 stopped: its job was cancelled",
    "cancelled and packed": "job {job} task a attempt 1 stopped: its job was cancelled",
    "deleted": "job {job} task a attempt 1 stopped: its job is gone",
    "taken over": f"job {{job}} task a attempt 1 stopped: attempt 2 (handler {OTHER}) took the "
    "task over",
    "reported meanwhile": "the task is succeeded now, not running",
}


@pytest.mark.parametrize(
    ("cause", "report"),
    [(cause, report) for cause in CAUSES for report in ("heartbeat", "result", "failure")]
    + [("reported meanwhile", "heartbeat")],  # a report made already is not made again
)
def test_a_refused_report_is_logged_with_its_real_cause(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture, cause: str, report: str
) -> None:
    settings = Settings(redis_url=redis_url, namespace=namespace, lease_seconds=SHORT_LEASE_SECONDS)
    store = Store(connect(redis_url), settings)
    worker = Worker(store, Options(leader=False, recovery=False, concurrency=2))
    worker.handler = HANDLER
    worker.runner = RecordingRunner()  # type: ignore[assignment]
    job_id, _ = store.submit(
        parse_spec({"name": "refused", "tasks": [{"id": "a", "task": "t", "retries": 1}]})
    )
    (task,) = store.claim(worker.handler, ["default"], max_tasks=1, max_leader=0).tasks
    worker.running[(job_id, 0)] = Running(task)
    make_it_so = _report_it_meanwhile if cause == "reported meanwhile" else CAUSES[cause][0]
    make_it_so(store, job_id, task)

    with caplog.at_level(logging.INFO, logger="jobcenter.runtime.worker"):
        if report == "heartbeat":
            worker._heartbeat()
            expected = HEARTBEAT_CAUSES[cause].format(job=job_id)
        else:
            outcome = Outcome(task, True) if report == "result" else Outcome(task, False, "boom")
            worker._report_with_retry([outcome])
            expected = CAUSES[cause][1]

    assert expected in caplog.text
    if cause != "taken over":
        assert "taken over" not in caplog.text and "took the task over" not in caplog.text
    store.redis.close()
