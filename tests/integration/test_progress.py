"""A running task's progress (seed 004's execution step) and its fencing token, as status
shows them, with either pool."""

from __future__ import annotations

import pytest
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_status_shows_a_running_tasks_progress_and_its_token_names_the_attempt(
    pool: str, client: Client, workers: Workers, scratch: Scratch
) -> None:
    worker = workers.start("--pool", pool)
    job_id = client.submit({"name": "progress", "tasks": [
        {"id": "step", "task": "tasks_for_tests.report_then_block", "args": ["copying 3/7", "g"]},
    ]})  # fmt: skip

    wait_until(lambda: scratch.events("reported", "step"), message="the task never reported")
    # In the process pool the child hands its progress to the worker, which writes it a
    # moment after the task recorded its report: wait for status to show it.
    wait_until(
        lambda: client.status(job_id)["tasks"]["step"]["progress"] is not None,
        message="status never showed the progress",
    )
    task = client.status(job_id)["tasks"]["step"]
    assert task["state"] == "running"
    assert task["progress"] == "copying 3/7"
    (reported,) = scratch.events("reported", "step")
    assert reported["token"].startswith(f"{task['attempts']}:{task['handler']}:")
    assert task["handler"] == workers.handler_of(worker)

    scratch.open_gate("g")
    done = client.wait(job_id, JOB_SECONDS)["tasks"]["step"]
    assert done["state"] == "succeeded"
    assert done["progress"] is None  # a finished task shows no stale progress
