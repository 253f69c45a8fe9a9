"""Pausing with real workers and the CLI: a paused queue gives no task to a running fleet
and its work runs once resumed; a job paused while its leader splits it starts nothing
until it is resumed, and then runs whole."""

from __future__ import annotations

from typing import Any

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.keyspace.schema import JobField

BIG = INLINE_SPLIT_MAX * 4  # tasks: a leader splits it in several chunks


def flat(name: str, n: int, label: str) -> dict[str, Any]:
    tasks = [
        {"id": f"t{i}", "task": "tasks_for_tests.record", "kwargs": {"label": label}}
        for i in range(n)
    ]
    return {"name": name, "tasks": tasks}


def queue_drained(client: Client, queue: str = "default") -> bool:
    """No entry left in the queue: every claim since has parked or started what it met."""
    store = client.store
    return all(store.redis.zcard(store.keys.queue(s, queue)) == 0 for s in range(store.keys.shards))


def test_a_paused_queue_starts_nothing_and_runs_its_work_once_resumed(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start("--queues", "default,other")
    first = client.submit(flat("before", 1, "before"))
    client.wait(first, JOB_SECONDS)

    assert "queue default paused" in cli("pause", "--queue", "default").stdout
    job_id = client.submit(flat("held", 3, "held"))
    # a job on its other queue still runs: the worker claims on while default waits
    other = client.submit({**flat("other", 1, "other"), "queue": "other"})
    client.wait(other, JOB_SECONDS)
    listed = cli("paused").stdout
    status = client.status(job_id)

    assert "default" in listed
    assert {t["state"] for t in status["tasks"].values()} == {"queued"}
    assert not [r for r in scratch.runs() if r.get("label") == "held"]
    assert "queue default resumed" in cli("resume", "--queue", "default").stdout
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def test_a_job_paused_while_its_leader_splits_it_starts_nothing_until_resumed(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start()
    workers.start(name="second")
    client.pause_queue("default")  # hold everything until the split is under way
    job_id = client.submit(flat("big", BIG, "big"))
    store = client.store
    job_key = store.keys.job(job_id).job
    wait_until(
        lambda: int(store.redis.hget(job_key, JobField.WRITTEN) or 0) > 0, timeout=JOB_SECONDS
    )
    assert "paused" in cli("pause", job_id).stdout  # mid-split: the leader goes on writing
    client.resume_queue("default")

    # the split ends, and every claim after it parks the job's tasks instead of starting them
    wait_until(
        lambda: int(store.redis.hget(job_key, JobField.QUEUED) or 0) == BIG, timeout=JOB_SECONDS
    )
    wait_until(lambda: queue_drained(client), timeout=JOB_SECONDS)
    status = cli("status", job_id).stdout
    listed = cli("list").stdout

    assert "paused since" in status and "running (paused)" in listed
    assert not [r for r in scratch.runs() if r.get("label") == "big"]
    assert {t["state"] for t in client.status(job_id)["tasks"].values()} == {"queued"}
    assert "resumed" in cli("resume", job_id).stdout
    final = client.wait(job_id, JOB_SECONDS * 2)
    assert final["state"] == "succeeded" and final["paused_at"] is None
