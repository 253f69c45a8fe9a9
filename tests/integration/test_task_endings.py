"""Every way a task can end is an outcome, with real workers: BaseExceptions in both pools,
process-pool children that exit, are killed or lose their pipe, and async tasks that must
really run. Each attempt ends failed with an error that says how, retried by its policy; the
slot is freed (the workers have one) and the worker still stops gracefully (the fixture)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from adversarial.adversarial_tasks import BASE_EXCEPTIONS, marks
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.runtime.execution.outcome import ERROR_TEXT_MAX

MODULES = ("tasks_for_tests", "jobcenter.demo", "adversarial.adversarial_tasks")
RETRY = {"retries": 1, "retry_backoff": 0.01, "retry_backoff_max": 0.02}


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_every_base_exception_a_task_raises_fails_its_attempts_by_policy_and_the_worker_runs_on(
    pool: str, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start("--pool", pool, concurrency=1, modules=MODULES)
    path = str(tmp_path / "marks")
    kinds = sorted(BASE_EXCEPTIONS)
    tasks = [{"id": k, "task": "adversarial.raise_base", "args": [k, path], **RETRY} for k in kinds]
    tasks.append({"id": "after", "task": "adversarial.async_mark", "args": [path, "after"]})
    job_id = client.submit({"name": "base-exceptions", "tasks": tasks})

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    for kind in kinds:
        ended = status["tasks"][kind]
        assert ended["state"] == "failed", ended
        assert ended["attempts"] == 2, "retried by its policy"
        assert ended["error"].startswith(kind), ended["error"]
        assert "a task cannot stop its worker" in ended["error"]
    assert status["tasks"]["after"]["state"] == "succeeded"
    assert sorted(marks(path)) == sorted(
        [f"{k} {n}" for k in kinds for n in (1, 2)] + ["after after"]
    )


@pytest.mark.parametrize(
    ("task", "args", "error"),
    [
        ("adversarial.exit_process", [7], "task process exited with code 7 before reporting"),
        ("adversarial.kill_self", [int(signal.SIGKILL)], "killed by signal 9 (SIGKILL)"),
        ("adversarial.close_pipe_then_progress", [], "its pipe to the worker broke"),
    ],
    ids=["exit", "signal", "broken-pipe"],
)
def test_a_process_pool_child_that_dies_fails_its_attempt_saying_how_and_is_retried(
    task: str, args: list[object], error: str, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start("--pool", "process", concurrency=1, modules=MODULES)
    path = str(tmp_path / "marks")
    job_id = client.submit(
        {
            "name": "dying-child",
            "tasks": [
                {"id": "dies", "task": task, "args": args, **RETRY},
                {"id": "after", "task": "adversarial.async_mark", "args": [path, "after"]},
            ],
        }
    )

    status = client.wait(job_id, JOB_SECONDS)

    dies = status["tasks"]["dies"]
    assert dies["state"] == "failed"
    assert dies["attempts"] == 2
    assert error in dies["error"], dies["error"]
    assert status["tasks"]["after"]["state"] == "succeeded"
    assert marks(path) == ["after after"]


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_async_tasks_run_before_they_succeed_and_their_failures_are_failures(
    pool: str, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start("--pool", pool, concurrency=1, modules=MODULES)
    path = str(tmp_path / "marks")
    job_id = client.submit(
        {
            "name": "async",
            "tasks": [
                {"id": "first", "task": "adversarial.async_mark", "args": [path, "ran"]},
                {"id": "second", "task": "adversarial.async_mark", "args": [path, "ran"],
                 "depends_on": ["first"]},
                {"id": "boom", "task": "adversarial.async_fail", "args": ["async boom"],
                 **RETRY},
                {"id": "slow", "task": "adversarial.async_wait_until_cancelled",
                 "args": [path], "timeout": 0.3},
            ],
        }
    )  # fmt: skip

    status = client.wait(job_id, JOB_SECONDS)

    tasks = status["tasks"]
    assert tasks["first"]["state"] == tasks["second"]["state"] == "succeeded"
    assert [m for m in marks(path) if m.startswith("ran")] == ["ran first", "ran second"]
    assert tasks["boom"]["state"] == "failed"
    assert tasks["boom"]["attempts"] == 2
    assert tasks["boom"]["error"].startswith("RuntimeError: async boom")
    assert tasks["slow"]["state"] == "failed"
    assert tasks["slow"]["error"].startswith("TimeoutError: task ran past its timeout of 0.3s")
    assert status["state"] == "failed"
    if pool == "thread":  # its thread was not left running: the coroutine was cancelled
        assert "cancelled" in marks(path)


def test_async_tasks_on_a_workers_event_loop_pass_their_results_on(
    client: Client, workers: Workers
) -> None:
    """A wide level of async tasks, more than the slots, on the thread pool's event loop:
    each succeeds once with its own result, reported in batches, and the join gets them all."""
    workers.start(concurrency=4, modules=MODULES)
    width = 40
    level = [{"id": f"add{i}", "task": "adversarial.async_add", "args": [i, 1]}
             for i in range(width)]  # fmt: skip
    join = {"id": "sum", "task": "adversarial.async_add",
            "depends_on": ["add0", "add1"], "inputs": {"x": "add0", "y": "add1"}}  # fmt: skip
    job_id = client.submit({"name": "async-level", "tasks": [*level, join]})

    status = client.wait(job_id, JOB_SECONDS)

    failed = {k: t.get("error") for k, t in status["tasks"].items() if t["state"] != "succeeded"}
    assert status["state"] == "succeeded", failed
    assert all(t["attempts"] == 1 for t in status["tasks"].values())
    assert [client.result(job_id, f"add{i}") for i in range(width)] == [i + 1 for i in range(width)]
    assert client.result(job_id, "sum") == 1 + 2


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_errors_and_progress_over_the_limits_are_stored_bounded_and_escaped(
    pool: str, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start("--pool", pool, concurrency=1, modules=MODULES)
    path, hold = str(tmp_path / "marks"), tmp_path / "hold"
    job_id = client.submit(
        {
            "name": "over-the-limits",
            "tasks": [
                {"id": "progress", "task": "adversarial.non_utf8_progress",
                 "args": [path, str(hold)]},
                {"id": "non-utf8", "task": "adversarial.non_utf8_error",
                 "depends_on": ["progress"]},
                {"id": "huge", "task": "adversarial.huge_error", "args": [10 * 1024 * 1024],
                 "depends_on": ["progress"]},
                {"id": "str-raises", "task": "adversarial.str_raises",
                 "depends_on": ["progress"]},
                {"id": "after", "task": "adversarial.async_mark", "args": [path, "after"],
                 "depends_on": ["progress"]},
            ],
        }
    )  # fmt: skip
    wait_until(
        lambda: client.status(job_id)["tasks"]["progress"]["progress"] == "\\udcff\\udcfe",
        timeout=JOB_SECONDS,
        message="the progress was not stored",
    )
    hold.touch()

    status = client.wait(job_id, JOB_SECONDS)

    tasks = status["tasks"]
    assert tasks["progress"]["state"] == tasks["after"]["state"] == "succeeded"
    assert tasks["non-utf8"]["error"].startswith("ValueError: caf\\udce9 \\udcff\\udcfe")
    assert tasks["huge"]["error"].startswith("ValueError: xxx")
    assert len(tasks["huge"]["error"]) <= ERROR_TEXT_MAX
    assert tasks["str-raises"]["error"].startswith("StrRaises: <str() of the exception raised")
