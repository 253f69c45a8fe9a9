"""A worker process ends with the code it chose: a task that calls os._exit(0) cannot make a
worker that did not choose to stop exit 0 (a supervisor restarting on failure would leave it
down), and a thread a task left running cannot keep a stopped worker alive."""

from __future__ import annotations

import signal

import pytest
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.runtime.exits import EXIT_TASK_ENDED_IT


def one_task(task: str, *args: object) -> dict[str, object]:
    return {"name": task, "tasks": [{"id": "t", "task": task, "args": list(args), "retries": 0}]}


@pytest.mark.parametrize(("code", "exit_code"), [(0, EXIT_TASK_ENDED_IT), (5, 5)])
def test_a_task_calling_os_exit_ends_the_worker_non_zero_naming_the_task(
    client: Client, workers: Workers, code: int, exit_code: int
) -> None:
    worker = workers.start()
    worker.expect_exit = {exit_code}
    job_id = client.submit(one_task("tasks_for_tests.end_process", code))

    assert worker.wait(JOB_SECONDS) == exit_code
    log = worker.log()
    assert f"os._exit({code}) called by task 't' of job {job_id} (attempt 1)" in log, log
    assert f"the worker exits {exit_code}" in log


def test_in_the_process_pool_a_task_calling_os_exit_0_fails_only_its_attempt(
    client: Client, workers: Workers
) -> None:
    worker = workers.start("--pool", "process")
    status = client.wait(client.submit(one_task("tasks_for_tests.end_process", 0)), JOB_SECONDS)

    assert status["state"] == "failed"
    assert status["tasks"]["t"]["error"].startswith("task process exited with code 0")
    assert worker.alive
    ok = client.wait(client.submit(one_task("tasks_for_tests.record")), JOB_SECONDS)
    assert ok["state"] == "succeeded"  # the worker serves on; it stops with 0 (teardown)


def test_a_process_a_task_forks_may_call_os_exit_without_ending_the_worker(
    client: Client, workers: Workers
) -> None:
    worker = workers.start()
    job_id = client.submit(one_task("tasks_for_tests.fork_child_that_exits", 0))

    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "t") == 0  # the child's own code, untouched
    assert worker.alive


def test_a_stopped_worker_exits_0_though_a_task_left_a_thread_running(
    client: Client, workers: Workers
) -> None:
    worker = workers.start()
    job_id = client.submit(one_task("tasks_for_tests.leave_thread_running"))
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0
    assert "not waiting for 1 thread(s) its tasks left running: left-behind" in worker.log()


def test_a_burst_worker_exits_0_at_its_end_though_a_task_left_a_thread_running(
    client: Client, workers: Workers
) -> None:
    job_id = client.submit(one_task("tasks_for_tests.leave_thread_running"))

    burst = workers.start("--burst", wait_ready=False)

    assert burst.wait(JOB_SECONDS) == 0
    assert client.state(job_id) == "succeeded"
