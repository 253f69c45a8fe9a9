"""Cancel stops running work, with real workers: the process pool kills the attempt's child,
the thread pool tells the task (`current_task().cancelled`; a coroutine is cancelled) and
stops waiting for it; the slot is freed and the worker logs a cancel, not a takeover."""

from __future__ import annotations

from pathlib import Path

import pytest
from adversarial.adversarial_tasks import marks
from helpers import pid_alive, wait_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client

MODULES = ("tasks_for_tests", "jobcenter.demo", "adversarial.adversarial_tasks")
# Workers learn of a cancel from their next heartbeat, every third of a lease.
SHORT_LEASE = {"JOBCENTER_LEASE_SECONDS": "1"}


@pytest.mark.parametrize(
    ("pool", "task"),
    [
        ("thread", "adversarial.wait_until_cancelled"),
        ("thread", "adversarial.async_wait_until_cancelled"),
        ("process", "adversarial.run_on"),  # killed, whether it looks or not
    ],
    ids=["thread", "thread-async", "process"],
)
def test_cancel_stops_the_running_attempt_and_frees_its_slot(
    pool: str, task: str, client: Client, workers: Workers, tmp_path: Path
) -> None:
    worker = workers.start("--pool", pool, concurrency=1, modules=MODULES, env=SHORT_LEASE)
    path = str(tmp_path / "marks")
    job_id = client.submit(
        {
            "name": "long",
            "tasks": [
                {"id": "long", "task": task, "args": [path]},
                {"id": "next", "task": "adversarial.async_mark", "args": [path, "next"],
                 "depends_on": ["long"]},
            ],
        }
    )  # fmt: skip
    started = wait_until(lambda: marks(path), timeout=JOB_SECONDS, message="'long' never started")
    pid = int(started[0].split()[1])

    assert client.cancel(job_id) == "cancelled"

    if pool == "process":
        wait_until(lambda: not pid_alive(pid), message="the attempt's child process still runs")
        assert marks(path) == [f"started {pid}"]
    else:
        wait_until(
            lambda: marks(path)[-1] in ("saw cancel", "cancelled"), message="the task was not told"
        )
    wait_until(
        lambda: f"job {job_id} was cancelled: stopped its running task long" in worker.log(),
        message="the worker did not log the cancel",
    )
    after = client.submit(
        {"name": "after", "tasks": [{"id": "a", "task": "adversarial.async_mark",
                                     "args": [path, "after"]}]}
    )  # fmt: skip
    assert client.wait(after, JOB_SECONDS)["state"] == "succeeded", "the only slot was freed"
    status = client.status(job_id)
    assert status["state"] == "cancelled"
    assert status["tasks"]["long"]["state"] == status["tasks"]["next"]["state"] == "cancelled"
    assert [h["state"] for h in client.history(job_id)] == ["cancelled"]
    assert "taken over" not in worker.log()
    assert "late result" not in worker.log(), "a cancelled attempt reports nothing to Redis"
    assert not any(m.startswith("next") for m in marks(path))
