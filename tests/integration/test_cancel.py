"""Cancelling jobs through the CLI: running, not yet split, and waiting out a retry."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter.storage.keyspace.keys import Keys

GATED_JOB = {
    "name": "to-cancel",
    "tasks": [
        {"id": "long", "task": "tasks_for_tests.block", "args": ["long"]},
        {"id": "next", "task": "tasks_for_tests.record", "depends_on": ["long"]},
        {"id": "last", "task": "tasks_for_tests.record", "depends_on": ["next"]},
    ],
}


def run_marker_job(client: Client) -> None:
    """Runs one more job to its end: what the worker would still run of a cancelled job
    was queued before this one, so it would have run by now."""
    marker = client.submit({"name": "marker", "tasks": [{"id": "m", "task": "jobcenter.demo.step",
                                                         "args": [0]}]})  # fmt: skip
    assert client.wait(marker, JOB_SECONDS)["state"] == "succeeded"


def test_cancel_stops_the_job_and_discards_the_running_tasks_late_result(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    worker = workers.start()
    spec = tmp_path / "gated.json"
    spec.write_text(json.dumps(GATED_JOB))
    waiting = cli.start("submit", str(spec), "--wait", "--json")
    rows = wait_until(client.list, timeout=JOB_SECONDS, message="the job was never submitted")
    job_id = rows[0]["id"]
    wait_until(lambda: scratch.events("started", "long"), message="'long' never started")
    assert client.status(job_id)["tasks"]["long"]["state"] == "running"

    result = cli("cancel", job_id)

    assert result.code == 0, result.stderr
    assert "cancelled" in result.stdout
    status = client.status(job_id)
    assert status["state"] == "cancelled"
    assert {k: t["state"] for k, t in status["tasks"].items()} == {
        "long": "cancelled", "next": "cancelled", "last": "cancelled",
    }  # fmt: skip
    submitted = cli.finish(waiting)  # `submit --wait` sees the job end, and not succeed
    assert submitted.code == 1, submitted.stderr
    assert submitted.json()["state"] == "cancelled"

    # The running attempt now ends (it does not look at current_task().cancelled), and its
    # result is discarded: by the worker if a heartbeat told it of the cancel first (see
    # test_cancel_running.py), else by Redis when the worker reports it.
    scratch.open_gate("long")
    wait_until(lambda: scratch.events("finished", "long"), message="'long' never returned")
    wait_until(
        lambda: (
            f"late result of job {job_id} task long discarded" in worker.log()
            or f"job {job_id} task long attempt 1 ended" in worker.log()
        ),
        message="the cancelled attempt's result was not discarded",
    )
    run_marker_job(client)
    status = client.status(job_id)
    assert status["state"] == "cancelled"
    assert status["tasks"]["long"]["state"] == "cancelled"
    assert status["tasks"]["long"]["attempts"] == 1
    for task_id in ("next", "last"):
        assert status["tasks"][task_id]["started_at"] is None
        assert status["tasks"][task_id]["attempts"] == 0
    assert [r["task"] for r in scratch.runs()] == ["long", "long"]  # started, finished
    assert [h["state"] for h in client.history(job_id)] == ["cancelled"]


def test_cancel_before_the_job_is_split_cancels_every_task(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    job_id = client.submit(GATED_JOB)  # no worker yet: the job stays pending

    result = cli("cancel", job_id)

    assert result.code == 0, result.stderr
    status = client.status(job_id)
    assert status["state"] == "cancelled"
    assert {k: t["state"] for k, t in status["tasks"].items()} == {
        "long": "cancelled", "next": "cancelled", "last": "cancelled",
    }  # fmt: skip
    workers.start()
    run_marker_job(client)
    assert scratch.runs() == []
    assert client.status(job_id)["state"] == "cancelled"


def test_cancel_of_a_task_waiting_out_a_retry_leaves_nothing_queued(
    cli: Cli,
    client: Client,
    workers: Workers,
    scratch: Scratch,
    namespace: str,
    redis_client: redis.Redis,
) -> None:
    workers.start()
    job_id = client.submit(
        {
            "name": "retrying",
            "tasks": [
                {"id": "again", "task": "tasks_for_tests.retry_later", "args": [3600],
                 "retries": 5},
                {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["again"]},
            ],
        }
    )  # fmt: skip
    wait_until(lambda: client.status(job_id)["tasks"]["again"]["state"] == "retry_wait")

    result = cli("cancel", job_id)

    assert result.code == 0, result.stderr
    status = client.status(job_id)
    assert status["state"] == "cancelled"
    assert status["tasks"]["again"]["state"] == "cancelled"
    assert status["tasks"]["after"]["state"] == "cancelled"
    keys = Keys(namespace)
    assert redis_client.zcard(keys.delayed(0, "default")) == 0
    assert redis_client.zcard(keys.queue(0, "default")) == 0
    assert len(scratch.events("run", "again")) == 1
