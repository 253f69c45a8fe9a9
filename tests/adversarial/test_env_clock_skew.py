"""Workers whose clocks are an hour off, one ahead and one behind (skewed_clock/sitecustomize
shifts their wall clock and their rq children's). Leases, retry backoff, schedule fire times
and every recorded task time still come out right: they are all taken from Redis TIME."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from harness import TESTS_DIR
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers, worker_pool
from lua_helpers import lease_deadline_ms, redis_now_ms
from tasks_for_tests import scratch_key

from jobcenter import Client
from jobcenter.model.states import TaskState

SKEWED_CLOCK_DIR = Path(__file__).resolve().parent / "skewed_clock"
SHIFT_SECONDS = 3600
LEASE_SECONDS = 2.0  # short, so a lease gets renewed a few times while the test watches
RETRY_DELAY_SECONDS = 2.0
EVERY_SECONDS = 1


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    """Two workers, one clock an hour ahead and one an hour behind; at teardown each must
    stop on SIGTERM with exit 0 and log no traceback."""
    with worker_pool(redis_url, namespace, tmp_path) as pool:
        for name, shift in (("ahead", SHIFT_SECONDS), ("behind", -SHIFT_SECONDS)):
            env = {
                "PYTHONPATH": os.pathsep.join([str(SKEWED_CLOCK_DIR), str(TESTS_DIR)]),
                "JOBCENTER_TEST_CLOCK_SHIFT_SECONDS": str(shift),
                "JOBCENTER_LEASE_SECONDS": str(LEASE_SECONDS),
            }
            pool.start(name=name, modules=("tasks_for_tests", "clock_tasks"), env=env)
        yield pool


@pytest.fixture
def client(redis_url: str, namespace: str) -> Client:
    return Client.from_url(redis_url, namespace)


def assert_an_hour_off(client: Client, redis_client: redis.Redis, namespace: str) -> None:
    """Whatever ran clock_tasks.wall_clock saw a clock about an hour from Redis's."""
    now = redis_now_ms(client.store) / 1000
    seen = [float(t) for t in redis_client.lrange(scratch_key(namespace, "wall-clock"), 0, -1)]
    assert seen and all(abs(abs(t - now) - SHIFT_SECONDS) < 600 for t in seen), (now, seen)


def test_leases_retries_and_task_times_come_from_redis_time(
    workers: Workers, client: Client, redis_client: redis.Redis, namespace: str
) -> None:
    scratch = Scratch(redis_client, namespace)
    store = client.store
    spec = {
        "name": "skewed",
        "tasks": [
            {"id": "hold", "task": "tasks_for_tests.block", "args": ["hold"]},
            {
                "id": "again",
                "task": "tasks_for_tests.retry_later",
                "args": [RETRY_DELAY_SECONDS],
                "retries": 1,
            },
            *({"id": f"clock{i}", "task": "clock_tasks.wall_clock"} for i in range(4)),
        ],
    }
    before = redis_now_ms(store) / 1000
    job_id = client.submit(spec)
    wait_until(lambda: scratch.events("started", "hold"), JOB_SECONDS, message="hold never ran")

    # Watch the lease of the running task for two leases: each renewal sets it one lease
    # after Redis's now (a worker clock would put it an hour early or late).
    lease_ms = LEASE_SECONDS * 1000
    index = list(client.status(job_id)["tasks"]).index("hold")
    first = redis_now_ms(store)
    deadlines = set()
    while (now := redis_now_ms(store)) < first + 2 * lease_ms:
        deadline = lease_deadline_ms(store, job_id, index)
        read_by = redis_now_ms(store)  # a renewal may land between the two reads
        assert deadline is not None, "the running task has no lease"
        assert now - lease_ms < deadline <= read_by + lease_ms, (now, deadline, read_by)
        deadlines.add(deadline)
        wait_until(lambda now=now: redis_now_ms(store) > now + 100)
    assert len(deadlines) > 1, "the lease was never renewed"

    redis_client.set(scratch_key(namespace, "gate:hold"), 1)
    status = client.wait(job_id, timeout=JOB_SECONDS)
    after = redis_now_ms(store) / 1000

    tasks = status["tasks"]
    assert tasks["hold"]["state"] == TaskState.SUCCEEDED and tasks["hold"]["attempts"] == 1
    assert len(scratch.events("started", "hold")) == 1  # never taken over
    for task_id, task in tasks.items():
        for field in ("queued_at", "started_at", "finished_at"):
            assert before <= task[field] <= after, (task_id, field, before, task[field], after)
    attempts = [h for h in client.history(job_id) if h["task"] == "again"]
    assert [h["attempt"] for h in attempts] == [1, 2]
    waited = attempts[1]["started_at"] - attempts[0]["finished_at"]
    assert RETRY_DELAY_SECONDS <= waited < SHIFT_SECONDS / 60, waited
    assert_an_hour_off(client, redis_client, namespace)


def test_schedules_fire_on_redis_time(
    workers: Workers, client: Client, redis_client: redis.Redis, namespace: str
) -> None:
    spec = {"name": "tick", "tasks": [{"id": "clock", "task": "clock_tasks.wall_clock"}]}
    schedule_id = client.schedule(spec, every=f"PT{EVERY_SECONDS}S", overlap="allow")
    created = next(s for s in client.schedules() if s["id"] == schedule_id)["created_at"]
    fired = wait_until(
        lambda: len(jobs := client.list(schedule_id=schedule_id)) >= 3 and jobs,
        JOB_SECONDS,
        message="the schedule did not fire three times",
    )
    client.remove_schedule(schedule_id)
    now = redis_now_ms(client.store) / 1000
    for job in fired:
        # fired once due by Redis's clock, promptly, on the schedule's own grid
        assert created < job["fire_time"] <= job["created_at"] <= now, (created, job, now)
        assert job["created_at"] - job["fire_time"] < SHIFT_SECONDS / 60, job
        assert round((job["fire_time"] - created) * 1000) % (EVERY_SECONDS * 1000) == 0, job
    for job in fired:
        client.wait(job["id"], timeout=JOB_SECONDS)
    assert_an_hour_off(client, redis_client, namespace)
