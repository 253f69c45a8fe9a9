"""A bug in one of a worker's loops (claim, leader, reporter, heartbeat) must not leave a live
process that does no work: the worker gives its running tasks back and exits non-zero, so its
supervisor restarts it, and another worker finishes the job."""

from __future__ import annotations

from typing import Any

import pytest
from chaos_harness import PROCESS_START_SECONDS, Cluster
from chaos_tasks import BREAK_LOOP_ENV

from jobcenter import Client
from jobcenter.runtime.worker import EXIT_LOOP_FAILED
from jobcenter.storage.store import INLINE_SPLIT_MAX

JOB_SECONDS = 45.0


def job_for(loop: str) -> dict[str, Any]:
    """A job that makes the broken loop do its work: a split for the leader, a task that
    runs (until its gate opens, for the heartbeat) for the others."""
    if loop == "leader":
        count = INLINE_SPLIT_MAX + 1  # split by a leader, not by its submit
        return {
            "name": "large",
            "tasks": [{"id": f"t{k}", "task": "chaos.step"} for k in range(count)],
        }
    kwargs = {"gate": "go"} if loop == "heartbeat" else {}
    return {"name": f"for-{loop}", "tasks": [{"id": "a", "task": "chaos.step", "kwargs": kwargs}]}


@pytest.mark.parametrize("loop", ["claim", "leader", "reporter", "heartbeat"])
def test_a_worker_whose_loop_fails_gives_its_tasks_back_and_exits_non_zero(
    cluster: Cluster, client: Client, loop: str
) -> None:
    broken = cluster.start(name="broken", env={BREAK_LOOP_ENV: loop})
    job_id = client.submit(job_for(loop))

    code = broken.proc.wait(PROCESS_START_SECONDS)
    broken.stopped_by_test = True
    assert code == EXIT_LOOP_FAILED, broken.log()
    assert f"its {loop} loop failed" in broken.log()
    assert f"the {loop} loop is broken by the test" in broken.log()
    if loop in ("reporter", "heartbeat"):  # it held a running task: given back, not left to expire
        history = client.history(job_id)
        assert [h["error"] for h in history] == ["given back by a stopping worker"], history

    cluster.start(name="healthy")
    cluster.open_gate("go")
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded", (status, client.history(job_id))
