"""Dead letters and re-running failed work through the CLI: `dlq list/show/requeue`,
`retry JOB` and `delete JOB`, with real workers and real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter.errors import NotFound
from jobcenter.storage.keyspace.keys import Keys

MODULES = ("tasks_for_tests", "retry_tasks")


def flaky(task_id: str, times: int, retries: int = 0, **more: Any) -> dict[str, Any]:
    """A task failing its first `times` calls (its counter is named after the task)."""
    return {"id": task_id, "task": "retry_tasks.flaky", "args": [times, task_id],
            "retries": retries, "retry_backoff": 0.01, **more}  # fmt: skip


def record(task_id: str, *deps: str) -> dict[str, Any]:
    return {"id": task_id, "task": "tasks_for_tests.record", "args": [task_id],
            "depends_on": list(deps)}  # fmt: skip


def attempts(client: Client, job_id: str, task_id: str) -> list[tuple[int, str]]:
    return [(h["attempt"], h["state"]) for h in client.history(job_id) if h["task"] == task_id]


def test_exhausted_task_is_dead_lettered_and_requeue_runs_it_and_its_children(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(modules=MODULES)
    job_id = client.submit({
        "name": "dead-letter",
        "tasks": [
            flaky("load", times=2, retries=1),  # both attempts fail; the third call succeeds
            record("report", "load"),
            record("publish", "report"),
            record("aside"),
        ],
    })  # fmt: skip
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    listed = cli("dlq", "list", "--json")
    shown = cli("dlq", "show", job_id, "load", "--json")

    assert listed.code == 0, listed.stderr
    (letter,) = listed.json()
    assert (letter["job"], letter["task"], letter["attempts"]) == (job_id, "load", 2)
    assert letter["error"].startswith("RuntimeError: flaky call 2 of 2")
    assert "Traceback (most recent call last)" in letter["error"]
    assert "retry_tasks.py" in letter["error"], "the traceback names the task's source"
    assert shown.code == 0, shown.stderr
    entry = shown.json()
    assert (entry["job"], entry["task"], entry["attempts"]) == (job_id, "load", 2)
    assert [(h["attempt"], h["state"]) for h in entry["history"]] == [
        (1, "retry_wait"), (2, "failed"),
    ]  # fmt: skip
    for h in entry["history"]:
        assert "RuntimeError: flaky call" in h["error"]
    status = client.status(job_id)
    assert [status["tasks"][t]["state"] for t in ("report", "publish", "aside")] == [
        "upstream_failed", "upstream_failed", "succeeded",
    ]  # fmt: skip

    requeued = cli("dlq", "requeue", job_id, "load")

    assert requeued.code == 0, requeued.stderr
    assert "3 tasks" in requeued.stdout  # load, and report and publish below it
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert {t: s["state"] for t, s in status["tasks"].items()} == dict.fromkeys(
        ("load", "report", "publish", "aside"), "succeeded"
    )
    assert status["tasks"]["load"]["attempts"] == 3
    assert attempts(client, job_id, "load") == [(1, "retry_wait"), (2, "failed"), (3, "succeeded")]
    assert attempts(client, job_id, "aside") == [(1, "succeeded")]
    assert [r["task"] for r in scratch.events("run")] == ["aside", "report", "publish"]
    after = cli("dlq", "list", "--json")
    assert after.code == 0 and after.json() == [], after.stdout
    gone = cli("dlq", "show", job_id, "load")
    assert gone.code == 2
    assert "not a dead letter" in gone.stderr


def test_retry_reruns_failed_and_blocked_tasks_and_keeps_succeeded_ones(
    cli: Cli, client: Client, workers: Workers
) -> None:
    workers.start(modules=MODULES)
    #   left --\                      ok -> ok_child
    #           join -> tail
    #   right -/
    job_id = client.submit({
        "name": "two-failures",
        "tasks": [
            flaky("left", times=1), flaky("right", times=1),
            record("join", "left", "right"), record("tail", "join"),
            record("ok"), record("ok_child", "ok"),
        ],
    })  # fmt: skip
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    # one of the two failed parents of `join` runs again: join stays blocked by the other
    assert cli("dlq", "requeue", job_id, "left").code == 0
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "failed"
    states = {t: s["state"] for t, s in status["tasks"].items()}
    assert states == {
        "left": "succeeded", "right": "failed", "join": "upstream_failed",
        "tail": "upstream_failed", "ok": "succeeded", "ok_child": "succeeded",
    }  # fmt: skip

    result = cli("retry", job_id)

    assert result.code == 0, result.stderr
    assert "3 tasks" in result.stdout  # right, and join and tail below it
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert {s["state"] for s in status["tasks"].values()} == {"succeeded"}
    for task_id in ("ok", "ok_child", "join", "tail"):
        assert status["tasks"][task_id]["attempts"] == 1, task_id
        assert attempts(client, job_id, task_id) == [(1, "succeeded")], task_id
    assert attempts(client, job_id, "left") == [(1, "failed"), (2, "succeeded")]
    assert attempts(client, job_id, "right") == [(1, "failed"), (2, "succeeded")]
    assert client.dead_letters() == []

    again = cli("retry", job_id)
    assert again.code == 5  # refused in the job's state: nothing failed
    assert "no failed task" in again.stderr
    unknown = cli("retry", "01NOSUCHJOB0000000000000000")
    assert unknown.code == 2
    assert "no job" in unknown.stderr


def test_delete_removes_a_finished_job_with_its_list_entry_and_dead_letters(
    cli: Cli, client: Client, workers: Workers, redis_client: redis.Redis,
    namespace: str,
) -> None:  # fmt: skip
    workers.start(modules=MODULES)
    job_id = client.submit({
        "name": "to-delete", "owner": "carol",
        "tasks": [{"id": "doomed", "task": "tasks_for_tests.fatal"}, record("after", "doomed")],
    })  # fmt: skip
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    keep_id = client.submit({"name": "to-keep", "owner": "carol",
                                     "tasks": [record("kept")]})  # fmt: skip
    assert client.wait(keep_id, JOB_SECONDS)["state"] == "succeeded"
    assert [d["job"] for d in client.dead_letters()] == [job_id]

    result = cli("delete", job_id)

    assert result.code == 0, result.stderr
    status = cli("status", job_id)
    assert status.code == 2
    assert job_id in status.stderr
    with pytest.raises(NotFound):
        client.history(job_id)
    assert [r["id"] for r in client.list()] == [keep_id]
    assert [r["id"] for r in client.list(owner="carol")] == [keep_id]
    assert client.dead_letters() == []
    assert [k for k in namespace_keys(redis_client, namespace) if job_id in k] == []
    keys = Keys(namespace)
    for index in (keys.jobs(0), keys.owner_jobs(0, "carol"), keys.expiring(0), keys.dlq(0)):
        members = [m.decode() for m in redis_client.zrange(index, 0, -1)]
        assert not [m for m in members if job_id in m], (index, members)
    assert cli("delete", job_id).code == 2, "deleting it twice names the missing job"


def test_delete_of_a_running_job_is_refused_with_a_hint_to_cancel_it(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(modules=MODULES)
    job_id = client.submit({
        "name": "still-running",
        "tasks": [{"id": "busy", "task": "tasks_for_tests.block", "args": ["busy"]}],
    })  # fmt: skip
    wait_until(lambda: scratch.events("started"), timeout=JOB_SECONDS)

    result = cli("delete", job_id)

    assert result.code != 0
    assert "cancel it first" in result.stderr
    assert client.status(job_id)["state"] == "running"
    scratch.open_gate("busy")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def namespace_keys(client: redis.Redis, namespace: str) -> list[str]:
    return [k.decode() for k in client.scan_iter(match=f"jc:{namespace}:*", count=1000)]
