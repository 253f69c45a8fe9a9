"""Tasks that wait for the world, with real worker processes and the CLI: an approval waits
holding no worker slot until `jobcenter signal`, whose payload its child receives; a signal
sent twice is one signal; a signal sent before the task reached its wait is kept for it; a
job waits for another schedule's run of the same fire; a kill -9 of the worker that finishes
an awaited job loses no release; a wait marked by hand (`jobcenter mark`) lets the job go on,
and what it waited for changes nothing afterwards."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client


def approval_job(first: dict[str, Any]) -> dict[str, Any]:
    """first -> approve (waits for signal 'approve') -> ship (echoes the payload)."""
    return {
        "name": "approval",
        "tasks": [
            {"id": "first", **first},
            {"id": "approve", "wait_for": {"signal": "approve"}, "depends_on": "first"},
            {"id": "ship", "task": "tasks_for_tests.echo", "depends_on": "approve",
             "inputs": {"approval": "approve"}},
        ],
    }  # fmt: skip


def submit(cli: Cli, tmp_path: Path, spec: dict[str, Any]) -> str:
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    result = cli("submit", str(path))
    assert result.code == 0, result.stderr
    return result.stdout.strip()


def task_state(client: Client, job_id: str, task_id: str) -> str:
    return str(client.status(job_id)["tasks"][task_id]["state"])


def test_an_approval_waits_with_no_slot_held_until_signalled(
    cli: Cli, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start(concurrency=1)  # one slot: a wait that held it would stop everything else
    job_id = submit(cli, tmp_path, approval_job({"task": "tasks_for_tests.record"}))
    wait_until(
        lambda: task_state(client, job_id, "approve") == "awaiting",
        timeout=JOB_SECONDS,
        message="'approve' never reached its wait",
    )
    other = client.submit(
        {"name": "other", "tasks": [{"id": "x", "task": "tasks_for_tests.record"}]}
    )
    assert client.wait(other, JOB_SECONDS)["state"] == "succeeded"  # the one slot was free
    assert task_state(client, job_id, "approve") == "awaiting"

    sent = cli("signal", job_id, "approve", "--payload", '{"by": "ann", "ok": true}')
    assert sent.code == 0, sent.stderr
    assert "released 1 task" in sent.stdout
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "approve") == {"by": "ann", "ok": True}
    assert client.result(job_id, "ship") == {"approval": {"by": "ann", "ok": True}}

    again = cli("signal", job_id, "approve", "--payload", '{"by": "ann", "ok": true}')
    assert again.code == 0 and "sent already" in again.stdout, again.stderr  # one signal
    other = cli("signal", job_id, "approve", "--payload", '{"by": "bob"}')
    assert other.code == 5, other.stdout  # the job finished: nothing waits any more
    assert "has finished" in other.stderr


def test_a_signal_before_the_wait_is_kept_and_a_second_one_is_one_signal(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    workers.start(concurrency=1)
    job_id = submit(
        cli, tmp_path, approval_job({"task": "tasks_for_tests.block", "args": ["first"]})
    )
    wait_until(lambda: scratch.events("started"), message="'first' never started")

    early = cli("signal", job_id, "approve", "--payload", '"yes"')
    assert early.code == 0, early.stderr
    assert "kept by 1" in early.stdout
    twice = cli("signal", job_id, "approve", "--payload", '"yes"')
    assert twice.code == 0, twice.stderr
    assert "sent already" in twice.stdout
    other = cli("signal", job_id, "approve", "--payload", '"no"')
    assert other.code == 5, other.stdout
    assert "another payload" in other.stderr
    bad = cli("signal", job_id, "approve", "--payload", "{not json")
    assert bad.code == 2 and "--payload" in bad.stderr
    assert task_state(client, job_id, "approve") == "waiting"

    scratch.open_gate("first")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "ship") == {"approval": "yes"}


def add_schedule(cli: Cli, tmp_path: Path, spec: dict[str, Any], name: str, at: str) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    added = cli("schedule", "add", str(path), "--at", at, "--tz", "UTC", "--name", name)
    assert added.code == 0, added.stderr


def fired_run(client: Client, schedule: str) -> str:
    rows = wait_until(
        lambda: client.list(schedule_id=schedule),
        timeout=JOB_SECONDS,
        message=f"schedule {schedule} never fired",
    )
    return str(rows[0]["id"])


def test_a_job_waiting_for_another_schedules_run_of_the_same_fire_starts_when_it_succeeds(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    # both schedules fire at the same time (a few seconds from now, as "every night at 2")
    at = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S")
    nightly = {"name": "load", "tasks": [
        {"id": "load", "task": "tasks_for_tests.block", "args": ["load"]}]}  # fmt: skip
    report = {"name": "report", "tasks": [
        {"id": "loaded", "wait_for": {"schedule": "nightly"}},
        {"id": "report", "task": "tasks_for_tests.echo", "depends_on": "loaded",
         "inputs": {"load": "loaded"}},
    ]}  # fmt: skip
    add_schedule(cli, tmp_path, report, "report", at)  # the waiting one fires first, maybe
    add_schedule(cli, tmp_path, nightly, "nightly", at)
    workers.start(concurrency=1)
    waiting, run = fired_run(client, "report"), fired_run(client, "nightly")
    wait_until(lambda: scratch.events("started", None), message="the nightly run never started")
    wait_until(
        lambda: task_state(client, waiting, "loaded") == "awaiting",
        timeout=JOB_SECONDS,
        message="the report never waited",
    )
    assert task_state(client, run, "load") == "running"  # the one slot: the wait holds none

    scratch.open_gate("load")
    assert client.wait(waiting, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(waiting, "report") == {"load": {"job": run, "state": "succeeded"}}
    assert client.state(run) == "succeeded"


def test_kill_9_of_the_worker_that_finishes_the_awaited_job_loses_no_release(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    upstream = client.submit(
        {"name": "up", "tasks": [{"id": "u", "task": "tasks_for_tests.block", "args": ["up"]}]}
    )
    waiting = client.submit({"name": "down", "tasks": [
        {"id": "wait", "wait_for": {"job": upstream}},
        {"id": "after", "task": "tasks_for_tests.record", "args": ["after"],
         "depends_on": "wait", "queue": "later"},
    ]})  # fmt: skip
    first = workers.start(concurrency=1)  # runs the upstream task and plays leader
    wait_until(lambda: scratch.events("started"), message="the upstream task never started")
    wait_until(lambda: task_state(client, waiting, "wait") == "awaiting", message="never waited")

    scratch.open_gate("up")
    wait_until(lambda: client.state(upstream) == "succeeded", interval=0.001)
    first.expect_exit.add(-signal.SIGKILL)
    first.kill9()  # as the job ended: its release may be under way on this worker, or not yet
    workers.start("--queues", "later", concurrency=1)  # another worker, serving the rest
    assert client.wait(waiting, JOB_SECONDS)["state"] == "succeeded"
    assert [e["label"] for e in scratch.runs() if e.get("label") == "after"] == ["after"]


def parent_job(**kwargs: Any) -> dict[str, Any]:
    """spawn (spawner) -> after (echoes what the child returned)."""
    return {"name": "parent", "tasks": [
        {"id": "spawn", "task": "tasks_for_tests.spawner", "kwargs": kwargs, "retries": 1},
        {"id": "after", "task": "tasks_for_tests.echo", "depends_on": "spawn",
         "inputs": {"child": "spawn"}},
    ]}  # fmt: skip


def test_a_parent_task_waits_for_its_child_job_with_its_slot_freed(
    client: Client, workers: Workers
) -> None:
    # one slot: the child (and its own child) can run only if each parent gave its slot back
    workers.start(concurrency=1)
    parent = client.submit(parent_job(depth=2))
    assert client.wait(parent, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(parent, "after") == {"child": "leaf-1"}
    (child,) = client.store.child_jobs(parent)
    (grandchild,) = client.store.child_jobs(child)
    assert client.state(child) == client.state(grandchild) == "succeeded"
    assert client.result(parent, "spawn") == client.result(child, "inner") == "leaf-1"


def test_a_failed_child_fails_its_parent_task_after_its_retries(
    client: Client, workers: Workers
) -> None:
    workers.start(concurrency=1)
    parent = client.submit(parent_job(fail=True))
    status = client.wait(parent, JOB_SECONDS)
    assert status["state"] == "failed"
    spawn_task = status["tasks"]["spawn"]
    assert spawn_task["attempts"] == 2  # retries: 1, each attempt a child of its own
    assert "child job" in spawn_task["error"] and "ended failed" in spawn_task["error"]
    assert status["tasks"]["after"]["state"] == "upstream_failed"


def test_cancelling_the_parent_cancels_its_children(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(concurrency=2)
    parent = client.submit(parent_job(depth=2, gate="leaf"))
    wait_until(lambda: scratch.events("started"), timeout=JOB_SECONDS, message="no leaf started")
    (child,) = client.store.child_jobs(parent)
    (grandchild,) = client.store.child_jobs(child)
    assert client.cancel(parent) == "cancelled"
    assert client.state(child) == client.state(grandchild) == "cancelled"


def test_an_approval_marked_succeeded_by_hand_lets_the_job_go_on(
    cli: Cli, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start(concurrency=1)
    job_id = submit(cli, tmp_path, approval_job({"task": "tasks_for_tests.record"}))
    wait_until(
        lambda: task_state(client, job_id, "approve") == "awaiting",
        timeout=JOB_SECONDS,
        message="'approve' never reached its wait",
    )

    marked = cli("mark", job_id, "approve", "--succeeded", "--result", '{"by": "on-call"}',
                 "--by", "ann", "--reason", "approved on the phone")  # fmt: skip

    assert marked.code == 0, marked.stderr
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.result(job_id, "ship") == {"approval": {"by": "on-call"}}
    line = [h for h in client.history(job_id) if h["task"] == "approve"][-1]
    assert line["error"] == "marked succeeded by ann: approved on the phone"
    late = cli("signal", job_id, "approve", "--payload", '{"by": "bob"}')
    assert late.code == 5 and "has finished" in late.stderr, late.stdout  # no second release


def test_a_wait_for_a_job_marked_by_hand_is_left_alone_when_that_job_ends(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    upstream = client.submit(
        {"name": "up", "tasks": [{"id": "u", "task": "tasks_for_tests.block", "args": ["up"]}]}
    )
    waiting = client.submit({"name": "down", "tasks": [
        {"id": "wait", "wait_for": {"job": upstream}},
        {"id": "after", "task": "tasks_for_tests.echo", "depends_on": "wait",
         "inputs": {"up": "wait"}},
    ]})  # fmt: skip
    workers.start(concurrency=2)
    wait_until(lambda: scratch.events("started"), message="the upstream task never started")
    wait_until(lambda: client.store.job_awaiters(upstream) == [waiting], message="never waited")

    marked = cli("mark", waiting, "wait", "--succeeded", "--result", '"by hand"')

    assert marked.code == 0, marked.stderr
    assert client.wait(waiting, JOB_SECONDS)["state"] == "succeeded"
    scratch.open_gate("up")
    assert client.wait(upstream, JOB_SECONDS)["state"] == "succeeded"
    wait_until(lambda: client.store.job_awaiters(upstream) == [], message="waiters never told")
    assert client.state(waiting) == "succeeded"
    assert client.result(waiting, "wait") == "by hand"
    assert client.result(waiting, "after") == {"up": "by hand"}
