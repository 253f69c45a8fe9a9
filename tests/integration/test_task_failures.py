"""How task failures end, with real workers: unknown task names, retries, Fatal."""

from __future__ import annotations

import pytest
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client


def test_unregistered_task_name_fails_naming_it_and_descendants_are_upstream_failed(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start()
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
    assert "tasks_for_tests.not_registered" in tasks["ghost"]["error"]
    assert tasks["ghost"]["attempts"] == 1, "an unknown name will not be known on a retry"
    for task_id in ("child", "grandchild"):
        assert tasks[task_id]["state"] == "upstream_failed", tasks[task_id]
        assert tasks[task_id]["started_at"] is None
    assert tasks["aside"]["state"] == "succeeded"
    assert {r["task"] for r in scratch.events("run")} == {"first", "aside"}


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
