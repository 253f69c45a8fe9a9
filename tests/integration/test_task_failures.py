"""How task failures end, with real workers: task names a worker lacks, retries, Fatal."""

from __future__ import annotations

from typing import Any

import pytest
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client

# A task no live worker has fails after 1 s (instead of 10 min), found by a recovery pass
# each second.
NO_WORKER_LIMIT_ENV = {
    "JOBCENTER_UNKNOWN_TASK_TIMEOUT_SECONDS": "1",
    "JOBCENTER_RECOVERY_INTERVAL_SECONDS": "1",
}
WAITED_SECONDS = 2.0  # long enough for a task to be given back and claimed again a few times
# The worker without the module goes on claiming the given-back tasks in a race with the one
# that has it; each loss costs GIVE_BACK_DELAY_MIN_MS once the full worker has published what
# it serves. Before that fix, each cost up to 10 s, and two CI runs passed 30 s: the bound
# keeps room for a loaded machine.
HANDOVER_SECONDS = 60.0


def test_a_task_no_live_worker_has_fails_after_the_limit_naming_it_and_cascades(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(env=NO_WORKER_LIMIT_ENV)
    job_id = client.submit(
        {
            "name": "unknown-task",
            "tasks": [
                {"id": "first", "task": "tasks_for_tests.record"},
                {"id": "ghost", "task": "tasks_for_tests.not_registered",
                 "depends_on": ["first"], "retries": 2},
                {"id": "child", "task": "tasks_for_tests.record", "depends_on": ["ghost"]},
                {"id": "grandchild", "task": "tasks_for_tests.record", "depends_on": ["child"]},
                {"id": "aside", "task": "tasks_for_tests.record", "depends_on": ["first"]},
            ],
        }
    )  # fmt: skip

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    tasks = status["tasks"]
    assert tasks["ghost"]["state"] == "failed"
    assert tasks["ghost"]["error"].startswith(
        "no live worker has task 'tasks_for_tests.not_registered' registered (queue 'default')"
    )
    assert tasks["ghost"]["attempts"] == 0, "given back each time, it never ran"
    for task_id in ("child", "grandchild"):
        assert tasks[task_id]["state"] == "upstream_failed", tasks[task_id]
        assert tasks[task_id]["started_at"] is None
    assert tasks["aside"]["state"] == "succeeded"
    assert {r["task"] for r in scratch.events("run")} == {"first", "aside"}


def test_a_worker_without_a_tasks_module_leaves_it_queued_for_a_worker_that_has_it(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    lacking = workers.start(name="lacking", modules=("jobcenter.demo",))
    job_id = client.submit(
        {
            "name": "rolling-deploy",
            "tasks": [
                {"id": "one", "task": "tasks_for_tests.record"},
                {"id": "two", "task": "tasks_for_tests.record"},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["one"]},
            ],
        }
    )

    def given_back_for_a_while() -> dict[str, Any] | None:
        tasks = client.status(job_id)["tasks"]
        waits = [tasks[t]["waiting_for"] for t in ("one", "two")]
        if not all(waits):  # and several give-backs each, to see the warning is not repeated
            return None
        seconds, micros = workers.redis.time()
        waited = seconds + micros / 1e6 - max(w["since"] for w in waits)
        return tasks if waited > WAITED_SECONDS else None

    tasks = wait_until(given_back_for_a_while, JOB_SECONDS, message="never given back")

    for task_id in ("one", "two"):
        task = tasks[task_id]
        assert (task["state"], task["attempts"], task["error"]) == ("queued", 0, None), task
        assert task["waiting_for"]["task"] == "tasks_for_tests.record"
    assert tasks["after"]["state"] == "waiting"
    warning = "task 'tasks_for_tests.record' is not registered on this worker"
    assert lacking.log().count(warning) == 1, lacking.log()
    shown = cli("status", job_id).stdout
    assert "for a worker with tasks_for_tests.record" in shown, shown

    workers.start(name="full")
    status = client.wait(job_id, HANDOVER_SECONDS)

    assert status["state"] == "succeeded"
    for task in status["tasks"].values():
        assert (task["attempts"], task["waiting_for"]) == (1, None), task
    assert {r["worker"] for r in scratch.events("run")} == {"full"}
    assert lacking.proc.poll() is None, "the worker without the module went on"


def test_task_that_fails_twice_succeeds_on_its_third_attempt(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start()
    job_id = client.submit(
        {
            "name": "flaky",
            "tasks": [
                {"id": "flaky", "task": "tasks_for_tests.fail_times", "args": [2, "flaky"],
                 "retries": 2, "retry_backoff": 0.01, "retry_backoff_max": 0.02},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["flaky"]},
            ],
        }
    )  # fmt: skip

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "succeeded"
    assert status["tasks"]["flaky"]["attempts"] == 3
    history = [(h["task"], h["attempt"], h["state"]) for h in client.history(job_id)]
    assert history == [
        ("flaky", 1, "retry_wait"),
        ("flaky", 2, "retry_wait"),
        ("flaky", 3, "succeeded"),
        ("after", 1, "succeeded"),
    ]
    assert [r["calls"] for r in scratch.events("run", "flaky")] == [1, 2, 3]


def test_fatal_error_is_not_retried_even_with_retries_left(
    client: Client, workers: Workers
) -> None:
    workers.start()
    job_id = client.submit(
        {
            "name": "fatal",
            "tasks": [{"id": "f", "task": "tasks_for_tests.fatal", "args": ["no hope"],
                       "retries": 3, "retry_backoff": 0.01}],
        }
    )  # fmt: skip

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    assert status["tasks"]["f"]["attempts"] == 1
    assert "Fatal: no hope" in status["tasks"]["f"]["error"]


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_task_running_past_its_timeout_fails_with_a_timeout_error(
    pool: str, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start("--pool", pool)
    job_id = client.submit(
        {
            "name": "too-slow",
            "tasks": [
                {"id": "slow", "task": "tasks_for_tests.block", "args": ["never"], "timeout": 0.3},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["slow"]},
            ],
        }
    )

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    slow = status["tasks"]["slow"]
    assert slow["state"] == "failed"
    assert slow["error"].startswith("TimeoutError"), slow["error"]
    assert "0.3" in slow["error"]
    assert slow["finished_at"] - slow["started_at"] >= 0.3
    assert status["tasks"]["after"]["state"] == "upstream_failed"
    assert scratch.events("finished") == []  # the attempt never got to return in time
