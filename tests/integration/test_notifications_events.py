"""Notifications of events besides a job's end, with real workers and a real local endpoint:
a job past its sla is told once as `late` (then its end as `finished`); a task that fails
for good is told as `task_failed`, naming it; a job whose `notify.on` lists neither is told
of neither."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers
from test_notifications import FAST, MODULES
from test_priority_and_retention import marked_late, recovery_pass
from webhook_server import WebhookServer, allowing, webhook_server

from jobcenter import Client


@pytest.fixture
def client(client: Client) -> Client:
    return allowing(client)


def kinds(server: WebhookServer) -> list[str]:
    return [r.json()["kind"] for r in server.received]


def queued(client: Client, job_id: str) -> list[str]:
    """The job's deliveries still due (not told yet) in its shard's due zset."""
    keys = client.store.keys
    due = client.store.redis.zrange(keys.notify_due(keys.job_shard(job_id)), 0, -1)
    return [m.decode() for m in due if m.decode().endswith(f"|{job_id}")]


def test_a_job_past_its_sla_is_told_once_it_is_late_then_of_its_end(
    workers: Workers, client: Client, scratch: Scratch
) -> None:
    workers.start(modules=MODULES, env=FAST)
    with webhook_server([204]) as server:
        task = {"id": "t1", "task": "tasks_for_tests.block", "kwargs": {"gate": "slow"}}
        notify = {"on": ["late", "succeeded"], "webhook": server.url}
        job_id = client.submit({"name": "nightly", "sla": "2s", "notify": notify, "tasks": [task]})
        wait_until(lambda: client.status(job_id)["tasks"]["t1"]["state"] == "running")
        wait_until(lambda: marked_late(client, job_id), timeout=JOB_SECONDS)
        wait_until(server.count, JOB_SECONDS)
        assert recovery_pass(client).late == 0  # told once: a later pass finds it marked

        scratch.open_gate("slow")
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
        wait_until(lambda: server.count() == 2, JOB_SECONDS)

    assert kinds(server) == ["late", "finished"]
    late, final = (r.json() for r in server.received)
    assert (late["job_id"], late["name"], late["state"]) == (job_id, "nightly", "running")
    assert final["state"] == "succeeded"
    headers = [r.headers["x-jobcenter-delivery"] for r in server.received]
    assert headers == [f"{job_id}:webhook:late", f"{job_id}:webhook"]
    deliveries = client.status(job_id)["notifications"]["deliveries"]
    assert deliveries["webhook:late"]["state"] == deliveries["webhook"]["state"] == "delivered"


def test_a_task_that_fails_for_good_is_told_naming_the_task_and_its_error(
    workers: Workers, client: Client
) -> None:
    workers.start(modules=MODULES, env=FAST)
    with webhook_server([204]) as server:
        tasks = [
            {"id": "ok", "task": "tasks_for_tests.record"},
            {"id": "broken", "task": "tasks_for_tests.fatal", "args": ["disk full"]},
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["broken"]},
        ]
        notify = {"on": ["task_failed"], "webhook": server.url}
        job_id = client.submit({"name": "told-per-task", "notify": notify, "tasks": tasks})
        assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
        wait_until(server.count, JOB_SECONDS)
        wait_until(lambda: not queued(client, job_id), JOB_SECONDS)

    assert kinds(server) == ["task_failed"]  # not its upstream_failed child, not its end
    body = server.received[0].json()
    assert (body["job_id"], body["task"], body["attempts"]) == (job_id, "broken", 1)
    assert "disk full" in body["error"]
    assert (
        server.received[0]
        .headers["x-jobcenter-delivery"]
        .startswith(f"{job_id}:webhook:task_failed:")
    )


def test_a_job_whose_notify_on_lists_no_event_is_told_only_of_its_end(
    workers: Workers, client: Client, scratch: Scratch
) -> None:
    workers.start(modules=MODULES, env=FAST)
    with webhook_server([204]) as server:
        tasks: list[dict[str, Any]] = [
            {"id": "broken", "task": "tasks_for_tests.fatal"},
            {"id": "slow", "task": "tasks_for_tests.block", "kwargs": {"gate": "quiet"}},
        ]
        notify = {"on": ["failed"], "webhook": server.url}
        job = {"name": "quiet", "sla": "1s", "notify": notify, "tasks": tasks}
        job_id = client.submit(job)
        wait_until(lambda: client.status(job_id)["tasks"]["broken"]["state"] == "failed")
        wait_until(lambda: marked_late(client, job_id), timeout=JOB_SECONDS)
        assert queued(client, job_id) == []  # neither the failed task nor the sla queued one

        scratch.open_gate("quiet")
        assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
        wait_until(server.count, JOB_SECONDS)
        wait_until(lambda: not queued(client, job_id), JOB_SECONDS)

    assert kinds(server) == ["finished"]
    assert list(client.status(job_id)["notifications"]["deliveries"]) == ["webhook"]
