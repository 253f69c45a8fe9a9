"""A worker's reporter when a completion's reply is lost (a connection reset after Redis ran
the call): the worker runs in this process on the session's Redis; the lost reply is
injected around the real store call, and a recording runner stands in for the task pool."""

from __future__ import annotations

from typing import Any

import redis

from jobcenter.config import Settings
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.execution import Outcome
from jobcenter.runtime.worker import Options, Running, Worker
from jobcenter.storage.store import StartedTask, Store, connect

SPEC = {
    "name": "parent-child",
    "tasks": [{"id": "p", "task": "t.p"}, {"id": "c", "task": "t.c", "depends_on": ["p"]}],
}


class RecordingRunner:
    """Takes the attempts a worker starts, runs none."""

    busy = 0

    def __init__(self) -> None:
        self.started: list[StartedTask] = []

    def submit(self, task: StartedTask, *_: Any) -> None:
        self.started.append(task)


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
