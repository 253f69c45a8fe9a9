"""Cancel stops running work, with real workers: the process pool kills the attempt's child,
the thread pool tells the task (`current_task().cancelled`, `check_cancelled()` and
`progress()` raise; a coroutine is cancelled) and stops waiting for it; the slot is freed,
the worker logs a cancel, not a takeover, and how long the attempt ran on, and the metrics
count the stop (and an attempt that will not stop)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from adversarial.adversarial_tasks import marks
from helpers import pid_alive, wait_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.runtime.stopping import STOP_BOUND_SECONDS
from jobcenter.storage.metrics import read_counters
from jobcenter.web.metrics import exposition

MODULES = ("tasks_for_tests", "jobcenter.demo", "adversarial.adversarial_tasks")
# Workers learn of a cancel from their next heartbeat, every third of a lease.
SHORT_LEASE = {"JOBCENTER_LEASE_SECONDS": "1"}
ENDED = (
    r"job {job} task \S+ attempt 1 ended ([0-9.]+) s after it was stopped \(its job was cancelled\)"
)
TOLD = {  # what a task of the thread pool marks once it was told
    "adversarial.wait_until_cancelled": "saw cancel",
    "adversarial.progress_until_stopped": "progress refused",
    "adversarial.async_wait_until_cancelled": "cancelled",
}


@pytest.mark.parametrize(
    ("pool", "task", "runner"),
    [
        ("thread", "adversarial.wait_until_cancelled", "thread"),
        ("thread", "adversarial.progress_until_stopped", "thread"),  # it only reports progress
        ("thread", "adversarial.async_wait_until_cancelled", "async"),
        ("process", "adversarial.run_on", "process"),  # killed, whether it looks or not
    ],
    ids=["thread", "thread-progress", "thread-async", "process"],
)
def test_cancel_stops_the_running_attempt_and_frees_its_slot(
    pool: str, task: str, runner: str, client: Client, workers: Workers, tmp_path: Path,
    record_property: Any,
) -> None:  # fmt: skip
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
        wait_until(lambda: marks(path)[-1] == TOLD[task], message="the task was not told")
    wait_until(
        lambda: read_counters(client.store).stopped == {("cancelled", runner): 1},
        message="the stop was not counted",
    )
    wait_until(
        lambda: f"job {job_id} task long attempt 1 stopped: its job was cancelled" in worker.log(),
        message="the worker did not log the cancel",
    )
    ended = wait_until(
        lambda: re.search(ENDED.format(job=job_id), worker.log()),
        message="the worker did not log how long the stopped attempt ran on",
    )
    print(f"\n[cancel] {runner}: the attempt ran {ended.group(1)} s after it was stopped")
    record_property("ran_after_stop_seconds", float(ended.group(1)))
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


def test_an_attempt_that_does_not_stop_within_the_bound_is_reported_and_counted(
    client: Client, workers: Workers, tmp_path: Path
) -> None:
    """A coroutine that swallows its cancel runs on: the worker warns once the bound has
    passed, counts it, and logs when it ended at last."""
    worker = workers.start(concurrency=1, modules=MODULES, env=SHORT_LEASE)
    path = str(tmp_path / "marks")
    runs = STOP_BOUND_SECONDS + 1
    job_id = client.submit(
        {"name": "stubborn", "tasks": [{"id": "s", "task": "adversarial.swallow_cancel",
                                        "args": [path, runs]}]}
    )  # fmt: skip
    wait_until(lambda: marks(path), timeout=JOB_SECONDS, message="the task never started")

    assert client.cancel(job_id) == "cancelled"

    overdue = rf"job {job_id} task s attempt 1 still runs [0-9.]+ s after it was stopped"
    wait_until(
        lambda: re.search(overdue, worker.log()),
        timeout=STOP_BOUND_SECONDS + JOB_SECONDS,
        message="the worker did not warn of the attempt that does not stop",
    )
    assert "its coroutine swallows its cancel, or blocks the event loop" in worker.log()
    wait_until(
        lambda: read_counters(client.store).stop_overdue == {("cancelled", "async"): 1},
        message="the attempt that did not stop was not counted",
    )
    wait_until(lambda: marks(path)[-1] == "done", timeout=JOB_SECONDS, message="never ended")
    ended = wait_until(
        lambda: re.search(ENDED.format(job=job_id), worker.log()),
        message="the worker did not log when it ended",
    )
    assert float(ended.group(1)) >= STOP_BOUND_SECONDS
    assert read_counters(client.store).stopped == {("cancelled", "async"): 1}
    scraped = exposition(client.store).decode()
    assert 'jobcenter_attempts_stopped_total{reason="cancelled",runner="async"} 1.0' in scraped
    assert 'jobcenter_attempts_stop_overdue_total{reason="cancelled",runner="async"} 1.0' in scraped
