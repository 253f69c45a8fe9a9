"""Retries with exponential backoff and full jitter, Fatal and Retry, and timeouts in the
thread and the process pool: real worker processes, real Redis. Times come from the
attempts' history and status (Redis TIME) and from what the tasks recorded (Redis TIME)."""

from __future__ import annotations

import itertools
from typing import Any

import redis
from helpers import pid_alive, wait_until
from integration_harness import JOB_SECONDS, Workers
from retry_tasks import records

from jobcenter import Client

MODULES = ("tasks_for_tests", "retry_tasks")
# Redis TIME is stored in ms; a worker claims a due retry within a round trip or two. Loaded
# CI machines are slow, so this is generous, yet far below a worker's 1 s idle wake-up (the
# delay a due retry used to wait for).
SCHEDULING_SLACK = 0.25
TIMEOUT = 0.5  # the task timeout of the timeout tests
SLEEP = 5.0  # how long their tasks would sleep if nothing stopped them
# An attempt stopped at its timeout ends within this of it: room for a loaded 2-core CI
# machine to schedule the supervising thread and the kill, yet far below SLEEP - TIMEOUT
# (an attempt nothing stopped).
TIMEOUT_SLACK = 2.0
# The process pool's timeout clock starts with the child: long enough for a child started on
# a loaded machine to run its task's first line, so the test sees where it ran.
CHILD_TIMEOUT = 1.5


def backoff_job(counter: str) -> dict[str, Any]:
    return {
        "name": "backoff",
        "tasks": [
            {"id": "flaky", "task": "retry_tasks.flaky", "args": [3, counter],
             "retries": 3, "retry_backoff": 0.2, "retry_backoff_max": 0.5},
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["flaky"]},
        ],
    }  # fmt: skip


def attempts_of(client: Client, job_id: str, task_id: str) -> list[dict[str, Any]]:
    return [h for h in client.history(job_id) if h["task"] == task_id]


def gaps(history: list[dict[str, Any]]) -> list[float]:
    """Seconds from the end of each attempt to the start of the next."""
    return [b["started_at"] - a["finished_at"] for a, b in itertools.pairwise(history)]


def test_task_failing_three_times_waits_in_retry_wait_and_succeeds_on_attempt_four(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    workers.start(modules=MODULES)
    job_id = client.submit(backoff_job("flaky"))

    waiting = wait_until(
        lambda: (t := client.status(job_id)["tasks"]["flaky"])["state"] == "retry_wait" and t,
        timeout=JOB_SECONDS,
        interval=0.002,
        message="the flaky task was never seen in retry_wait",
    )
    status = client.wait(job_id, JOB_SECONDS)

    assert "RuntimeError: flaky call" in waiting["error"], waiting
    assert status["state"] == "succeeded"
    assert status["tasks"]["flaky"]["attempts"] == 4
    assert status["tasks"]["flaky"]["error"] is None
    assert status["tasks"]["after"]["state"] == "succeeded"
    history = attempts_of(client, job_id, "flaky")
    assert [(h["attempt"], h["state"]) for h in history] == [
        (1, "retry_wait"), (2, "retry_wait"), (3, "retry_wait"), (4, "succeeded"),
    ]  # fmt: skip
    for h in history[:3]:
        assert "RuntimeError: flaky call" in h["error"]
        assert "Traceback" in h["error"]
    assert all(gap >= 0 for gap in gaps(history))
    starts = records(redis_client, namespace, "starts")
    assert [s["attempt"] for s in starts] == [1, 2, 3, 4]
    assert len({s["token"] for s in starts}) == 4, "every attempt has its own fencing token"


def fatal_and_retry_job(counter: str) -> dict[str, Any]:
    return {
        "name": "fatal-and-retry",
        "tasks": [
            {"id": "doomed", "task": "tasks_for_tests.fatal", "args": ["no hope"],
             "retries": 5, "retry_backoff": 0.01},
            {"id": "later", "task": "retry_tasks.retry_once", "args": [0.3, counter],
             "retries": 1, "retry_backoff": 5.0},
        ],
    }  # fmt: skip


def test_fatal_is_never_retried_and_retry_runs_again_after_the_delay_it_asked_for(
    client: Client, workers: Workers
) -> None:
    workers.start(modules=MODULES)
    job_id = client.submit(fatal_and_retry_job("later"))

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    doomed = status["tasks"]["doomed"]
    assert (doomed["state"], doomed["attempts"]) == ("failed", 1)
    assert "Fatal: no hope" in doomed["error"]
    assert [(h["attempt"], h["state"]) for h in attempts_of(client, job_id, "doomed")] == [
        (1, "failed")
    ]
    letters = [(d["job"], d["task"], d["attempts"]) for d in client.dead_letters()]
    assert letters == [(job_id, "doomed", 1)]
    later = status["tasks"]["later"]
    assert (later["state"], later["attempts"]) == ("succeeded", 2)
    history = attempts_of(client, job_id, "later")
    assert [h["state"] for h in history] == ["retry_wait", "succeeded"]
    assert "Retry: come back later" in history[0]["error"]
    # the delay the task asked for, not the spec's 5 s backoff
    assert 0.3 <= gaps(history)[0] < 5.0


def test_retries_run_within_their_backoff_bound_or_requested_delay(
    client: Client, workers: Workers
) -> None:
    workers.start(modules=MODULES)
    backoff_id = client.submit(backoff_job("spacing"))
    retry_id = client.submit(fatal_and_retry_job("delay"))

    client.wait(backoff_id, JOB_SECONDS)
    client.wait(retry_id, JOB_SECONDS)

    spacing = gaps(attempts_of(client, backoff_id, "flaky"))
    (delay,) = gaps(attempts_of(client, retry_id, "later"))
    print("backoff gaps (s):", [round(g, 3) for g in spacing], f"Retry(0.3) gap: {delay:.3f}")
    # attempt n waits uniform in [0, min(max, base * 2**(n-1))]: 0.2, 0.4, then capped 0.5
    bounds = [0.2, 0.4, 0.5]
    assert len(spacing) == 3
    for n, (gap, bound) in enumerate(zip(spacing, bounds, strict=True), start=1):
        assert 0 <= gap <= bound + SCHEDULING_SLACK, f"wait after attempt {n}: {gap:.3f}s"
    assert 0.3 <= delay <= 0.3 + SCHEDULING_SLACK


def timeout_job(retries: int, timeout: float = TIMEOUT) -> dict[str, Any]:
    return {
        "name": "too-slow",
        "tasks": [
            {"id": "slow", "task": "retry_tasks.sleep_then_mark", "args": [SLEEP],
             "timeout": timeout, "retries": retries, "retry_backoff": 0.01},
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["slow"]},
        ],
    }  # fmt: skip


def test_thread_pool_fails_an_attempt_at_its_timeout_retries_it_and_fails_the_job_early(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    # two slots: the first attempt's thread cannot be stopped and keeps its slot
    workers.start("--pool", "thread", modules=MODULES, concurrency=2)
    job_id = client.submit(timeout_job(retries=1))

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    slow = status["tasks"]["slow"]
    assert (slow["state"], slow["attempts"]) == ("failed", 2)
    assert "timeout of 0.5s" in slow["error"]
    assert "cannot stop a thread" in slow["error"]
    assert status["tasks"]["after"]["state"] == "upstream_failed"
    history = attempts_of(client, job_id, "slow")
    assert [h["state"] for h in history] == ["retry_wait", "failed"]
    for h in history:
        assert h["error"].startswith(f"TimeoutError: task ran past its timeout of {TIMEOUT}s")
        assert TIMEOUT <= h["finished_at"] - h["started_at"] <= TIMEOUT + TIMEOUT_SLACK, h
    assert status["finished_at"] - status["created_at"] < SLEEP - 1.0
    assert records(redis_client, namespace, "woke") == []  # still asleep: results discarded


def test_thread_pool_slot_of_a_timed_out_task_stays_busy_until_its_thread_returns(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    workers.start("--pool", "thread", modules=MODULES, concurrency=1)
    job_id = client.submit(
        {
            "name": "busy-slot",
            "tasks": [
                {"id": "slow", "task": "retry_tasks.sleep_then_mark", "args": [1.5],
                 "timeout": 0.3, "priority": 1},
                {"id": "next", "task": "retry_tasks.ordered", "args": ["next"]},
            ],
        }
    )  # fmt: skip

    status = client.wait(job_id, JOB_SECONDS)

    assert status["tasks"]["slow"]["state"] == "failed"
    assert status["tasks"]["next"]["state"] == "succeeded"
    (woke,) = records(redis_client, namespace, "woke")
    (ran,) = records(redis_client, namespace, "order")
    assert ran["at"] >= woke["at"], "the only slot was still running the timed-out thread"


def test_process_pool_kills_the_child_at_its_timeout(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    workers.start("--pool", "process", modules=MODULES, concurrency=1)
    job_id = client.submit(timeout_job(retries=0, timeout=CHILD_TIMEOUT))

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    slow = status["tasks"]["slow"]
    assert (slow["state"], slow["attempts"]) == ("failed", 1)
    assert slow["error"].startswith(f"TimeoutError: task ran past its timeout of {CHILD_TIMEOUT}s")
    assert "its process was killed" in slow["error"]
    (slept,) = records(redis_client, namespace, "slept")
    # the clock starts with the child (the first one waits for the forkserver to start)
    assert slow["finished_at"] - slept["at"] <= CHILD_TIMEOUT + TIMEOUT_SLACK
    assert slept["pid"] != workers.started[0].pid, "the attempt ran in a child process"
    wait_until(lambda: not pid_alive(slept["pid"]), timeout=5, message="child still alive")
    # the child is gone, so its write after the sleep can never happen
    assert records(redis_client, namespace, "woke") == []
