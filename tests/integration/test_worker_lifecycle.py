"""A worker process's life: graceful and forced shutdown on signals, --burst, --node."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import subprocess_env
from helpers import pid_alive, wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client

STOPPING_LOG = "stopping (signal"  # what a worker logs once a first SIGTERM reached it


def test_sigterm_lets_the_running_task_finish_and_succeed_then_exits_0(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    first = workers.start(name="first")
    first_handler = workers.handler_of(first)
    job_id = client.submit(
        {
            "name": "graceful",
            "tasks": [
                {"id": "running", "task": "tasks_for_tests.block", "args": ["running"]},
                {"id": "next", "task": "tasks_for_tests.record", "depends_on": ["running"]},
            ],
        }
    )
    wait_until(lambda: scratch.events("started", "running"), message="task never started")

    first.signal(signal.SIGTERM)
    wait_until(lambda: STOPPING_LOG in first.log(), message="worker never got the SIGTERM")
    assert first.proc.poll() is None, "the worker must wait for its running task"
    scratch.open_gate("running")

    assert first.wait() == 0
    status = client.status(job_id)
    assert status["tasks"]["running"]["state"] == "succeeded"
    assert status["tasks"]["running"]["handler"] == first_handler
    assert status["tasks"]["running"]["attempts"] == 1
    # A stopping worker takes no new work: the released child waits for another worker.
    assert status["tasks"]["next"]["state"] == "queued"

    second = workers.start(name="second")
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert status["tasks"]["next"]["handler"] == workers.handler_of(second)
    assert [r["worker"] for r in scratch.events("finished")] == ["first"]


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_second_sigterm_gives_the_running_task_back_to_run_on_another_worker(
    pool: str, client: Client, workers: Workers, scratch: Scratch
) -> None:
    first = workers.start("--pool", pool, name="first")
    first_handler = workers.handler_of(first)
    job_id = client.submit(
        {
            "name": "forced",
            "tasks": [{"id": "running", "task": "tasks_for_tests.block", "args": ["running"]}],
        }
    )
    wait_until(lambda: scratch.events("started", "running"), message="task never started")

    first.signal(signal.SIGTERM)
    wait_until(lambda: STOPPING_LOG in first.log(), message="worker never got the SIGTERM")
    first.signal(signal.SIGTERM)

    assert first.wait() == 0
    task = client.status(job_id)["tasks"]["running"]
    assert task["state"] == "queued"
    assert task["attempts"] == 1
    # The given-back attempt must not run on beside the next one: whatever process ran it
    # (the worker itself, or its child with --pool process) is gone.
    attempt_pid = scratch.events("started", "running")[0]["pid"]
    wait_until(
        lambda: not pid_alive(attempt_pid),
        timeout=5,
        message=f"the given-back attempt still runs in process {attempt_pid}",
    )
    assert scratch.events("finished") == []

    second = workers.start(name="second")
    scratch.open_gate("running")
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    task = status["tasks"]["running"]
    assert task["handler"] == workers.handler_of(second) != first_handler
    assert task["attempts"] == 2
    assert [(h["attempt"], h["state"], h["handler"]) for h in client.history(job_id)] == [
        (1, "queued", first_handler),
        (2, "succeeded", task["handler"]),
    ]
    assert [(r["event"], r["worker"]) for r in scratch.runs()] == [
        ("started", "first"), ("started", "second"), ("finished", "second"),
    ]  # fmt: skip


def test_burst_worker_exits_0_once_the_submitted_job_is_finished(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    job_id = client.submit(
        {
            "name": "burst",
            "tasks": [
                {"id": "a", "task": "tasks_for_tests.record", "args": ["a", 0.05]},
                {"id": "b", "task": "tasks_for_tests.record", "args": ["b", 0.05]},
                {"id": "c", "task": "tasks_for_tests.record", "depends_on": ["a", "b"]},
                {"id": "d", "task": "tasks_for_tests.fail_times", "args": [1, "d"],
                 "depends_on": ["c"], "retries": 1, "retry_backoff": 0.2},
            ],
        }
    )  # fmt: skip

    burst = workers.start("--burst", wait_ready=False)

    assert burst.wait(JOB_SECONDS) == 0
    status = client.status(job_id)  # finished before the worker left, finalize included
    assert status["state"] == "succeeded"
    assert status["tasks"]["d"]["attempts"] == 2
    assert len(scratch.events("run")) == 5


def test_burst_worker_with_nothing_to_do_exits_0(workers: Workers) -> None:
    burst = workers.start("--burst", wait_ready=False)

    assert burst.wait(JOB_SECONDS) == 0


def test_task_pinned_to_a_node_runs_only_on_that_nodes_worker(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(name="plain")
    pinned = [f"pinned{i}" for i in range(4)]
    job_id = client.submit(
        {
            "name": "pinned",
            "tasks": [
                {"id": "free", "task": "tasks_for_tests.record"},
                *({"id": p, "task": "tasks_for_tests.record", "node": "n1"} for p in pinned),
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": pinned},
            ],
        }
    )
    wait_until(lambda: client.status(job_id)["tasks"]["free"]["state"] == "succeeded")
    tasks = client.status(job_id)["tasks"]
    assert {p: tasks[p]["state"] for p in pinned} == dict.fromkeys(pinned, "queued")

    n1 = workers.start("--node", "n1", name="n1")
    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "succeeded"
    n1_handler = workers.handler_of(n1)
    for p in pinned:
        assert status["tasks"][p]["handler"] == n1_handler, p
    ran_on = {r["task"]: r["worker"] for r in scratch.events("run")}
    assert {p: ran_on[p] for p in pinned} == dict.fromkeys(pinned, "n1")
    assert ran_on["free"] == "plain"


def test_the_worker_console_script_imports_task_modules_from_the_current_directory(
    client: Client, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """`jobcenter worker MODULE` finds MODULE in the directory it starts in, as
    `python -m jobcenter worker MODULE` does."""
    script = Path(sys.executable).parent / "jobcenter"
    assert script.exists(), "the package's console script is not installed"
    here = tmp_path / "project"
    here.mkdir()
    (here / "local_tasks.py").write_text(
        "from jobcenter import task\n\n\n@task(name='local.hello')\ndef hello() -> None: ...\n"
    )
    job_id = client.submit({"name": "local", "tasks": [{"id": "h", "task": "local.hello"}]})

    done = subprocess.run(
        [str(script), "worker", "local_tasks", "--burst"],
        cwd=here,
        env=subprocess_env(redis_url, namespace),
        capture_output=True,
        text=True,
        timeout=JOB_SECONDS,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert client.status(job_id)["state"] == "succeeded"


def test_a_stopping_worker_gives_back_the_tasks_it_prefetched_unused(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    """One slot: completing "quick" takes "held" to run and "after" beyond the slot (a
    prefetch: quick tasks go on without waiting for a round trip). A graceful stop lets
    "held" finish and gives "after" back to its queue, no attempt used; another worker
    runs it, once."""
    first = workers.start(name="first", concurrency=1)
    job_id = client.submit(
        {
            "name": "prefetched",
            "tasks": [
                {"id": "quick", "task": "tasks_for_tests.record", "args": ["quick"]},
                {"id": "held", "task": "tasks_for_tests.block", "args": ["held"]},
                {"id": "after", "task": "tasks_for_tests.record", "args": ["after"]},
            ],
        }
    )
    wait_until(lambda: scratch.events("started", "held"), message="held never started")
    assert client.status(job_id)["tasks"]["after"]["state"] == "running", "not prefetched"

    first.signal(signal.SIGTERM)
    wait_until(
        lambda: client.status(job_id)["tasks"]["after"]["state"] == "queued",
        message="the prefetched task was not given back",
    )
    scratch.open_gate("held")
    assert first.wait() == 0
    after = client.status(job_id)["tasks"]["after"]
    assert after["attempts"] == 1  # given back unused: its next attempt is not a retry
    history = [e for e in client.history(job_id) if e["task"] == "after"]
    assert [e["error"] for e in history] == ["given back by a stopping worker"]

    workers.start(name="second")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert [r["worker"] for r in scratch.events("run", "after")] == ["second"]
