"""Notifications as a person uses them: a job with `notify:` run by real workers, told to a
real local HTTP endpoint (http.server in a thread) that fails or never answers, and to a
job-finished hook registered on the worker; `status` shows every attempt; bad `notify:`
values are refused at submit with exit 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers
from notify_hooks import FAILS_ONCE, notices_key
from webhook_server import ALLOW_ENV, HANG, allowing, webhook_server

from jobcenter import Client

SECRET = "test-webhook-secret"
FAST = {  # short waits, so the retries of a test take well under a second each
    **ALLOW_ENV,
    "JOBCENTER_WEBHOOK_SECRET": SECRET,
    "JOBCENTER_NOTIFY_BACKOFF_SECONDS": "0.1",
    "JOBCENTER_NOTIFY_TIMEOUT_SECONDS": "0.5",
}
MODULES = ("tasks_for_tests", "notify_hooks")


@pytest.fixture
def client(client: Client) -> Client:
    """The tests' endpoints listen on loopback: allow-listed, as the workers' ALLOW_ENV."""
    return allowing(client)


def job(name: str, notify: dict[str, Any], task: str = "tasks_for_tests.record") -> dict[str, Any]:
    args: list[Any] = ["boom"] if task == "tasks_for_tests.fatal" else []
    return {
        "name": name,
        "notify": notify,
        "tasks": [
            {"id": "first", "task": task, "args": args},
            {"id": "second", "task": "tasks_for_tests.record", "depends_on": ["first"]},
        ],
    }


def delivery(client: Client, job_id: str, channel: str) -> dict[str, Any]:
    return client.status(job_id)["notifications"]["deliveries"][channel]


def ended(client: Client, job_id: str, channel: str) -> dict[str, Any] | None:
    d = delivery(client, job_id, channel)
    return d if d["state"] in ("delivered", "failed") else None


def test_a_webhook_failing_at_first_is_retried_until_delivered_each_post_signed(
    workers: Workers, client: Client, cli: Cli
) -> None:
    workers.start(modules=MODULES, env=FAST)
    with webhook_server([500, 503, 204]) as server:
        notify = {"on": ["failed"], "webhook": server.url}
        job_id = client.submit(job("told-of-failure", notify, "tasks_for_tests.fatal"))
        assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

        done = wait_until(lambda: ended(client, job_id, "webhook"), JOB_SECONDS)

    assert done["state"] == "delivered" and done["attempts"] == 3
    assert server.count() == 3
    assert all(r.signed_by(SECRET) for r in server.received)
    assert not server.received[0].signed_by("another secret")
    assert {r.headers["x-jobcenter-delivery"] for r in server.received} == {f"{job_id}:webhook"}
    body = server.received[-1].json()
    assert (body["job_id"], body["name"], body["state"]) == (job_id, "told-of-failure", "failed")
    assert body["attempt"] == 3 and body["finished_at"] >= body["created_at"]
    assert body["failed_tasks"] == [{"task": "first", "error": body["failed_tasks"][0]["error"],
                                     "attempts": 1}]  # fmt: skip
    assert "boom" in body["failed_tasks"][0]["error"]
    assert (body["tasks"], body["tasks_failed"]) == (2, 2)

    shown = cli("status", job_id, "--json").json()["notifications"]
    assert [(a["attempt"], a["outcome"], a["detail"]) for a in shown["attempts"]] == [
        (1, "retrying", "HTTP 500"),
        (2, "retrying", "HTTP 503"),
        (3, "delivered", "HTTP 204"),
    ]
    text = cli("status", job_id).stdout
    assert "notify on failed" in text and "webhook  delivered  attempts=3" in text


def test_an_endpoint_that_never_answers_holds_up_no_job_and_status_shows_it_failed(
    workers: Workers, client: Client, cli: Cli
) -> None:
    workers.start(modules=MODULES, concurrency=1, env={**FAST, "JOBCENTER_NOTIFY_ATTEMPTS": "2"})
    with webhook_server([HANG]) as server:
        notify = {"on": ["succeeded"], "webhook": server.url}
        told = client.submit(job("told-a-dead-endpoint", notify))
        assert client.wait(told, JOB_SECONDS)["state"] == "succeeded"
        wait_until(server.count, JOB_SECONDS)  # its first delivery hangs now...
        # ...and neither the worker's one task slot nor a later job waits for it
        later = client.submit(job("later", notify))
        assert client.wait(later, JOB_SECONDS)["state"] == "succeeded"

        failed = wait_until(lambda: ended(client, told, "webhook"), JOB_SECONDS)

    assert failed["state"] == "failed" and failed["attempts"] == 2
    assert failed["error"] == "no answer within 0.5s"
    text = cli("status", told).stdout
    assert "webhook  failed" in text and "last error: no answer within 0.5s" in text
    assert "webhook attempt 1: retrying" in text and "webhook attempt 2: failed" in text


def test_a_hook_registered_on_the_worker_is_told_and_called_again_after_it_raised(
    workers: Workers, client: Client, redis_client: redis.Redis, namespace: str
) -> None:
    workers.start(modules=MODULES, env=FAST)
    job_id = client.submit(job(FAILS_ONCE, {"on": ["succeeded", "failed"], "hook": True}))
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    done = wait_until(lambda: ended(client, job_id, "hook"), JOB_SECONDS)

    assert done["state"] == "delivered" and done["attempts"] == 2
    (notice,) = [json.loads(n) for n in redis_client.lrange(notices_key(namespace), 0, -1)]
    assert (notice["job_id"], notice["state"], notice["failed_tasks"]) == (job_id, "succeeded", [])
    attempts = client.status(job_id)["notifications"]["attempts"]
    assert attempts[0]["outcome"] == "retrying"
    assert "the hook fails its first call on purpose" in attempts[0]["detail"]


def test_a_worker_without_the_secret_sends_unsigned_webhooks(
    workers: Workers, client: Client
) -> None:
    workers.start(modules=MODULES, env={**ALLOW_ENV, "JOBCENTER_NOTIFY_BACKOFF_SECONDS": "0.1"})
    with webhook_server([200]) as server:
        job_id = client.submit(job("unsigned", {"on": ["succeeded"], "webhook": server.url}))
        client.wait(job_id, JOB_SECONDS)
        wait_until(lambda: ended(client, job_id, "webhook"), JOB_SECONDS)
    assert "x-jobcenter-signature" not in server.received[0].headers
    assert "x-jobcenter-timestamp" in server.received[0].headers


@pytest.mark.parametrize(
    ("notify", "named"),
    [
        ({"on": ["finished"], "webhook": "http://x.test/"}, "'finished', not a final job state"),
        ({"on": [], "webhook": "http://x.test/"}, "'on' must list"),
        ({"on": ["failed"], "webhook": "ftp://x.test/"}, "'webhook' must be an http"),
        ({"on": ["failed"], "webhook": "not a url"}, "'webhook' must be an http"),
        ({"on": ["failed"], "webhook": "http://:80/"}, "'webhook' must be an http"),
        ({"on": ["failed"], "hook": "yes"}, "'hook' must be true or false"),
        ({"on": ["failed"]}, "give a 'webhook' URL, or 'hook: true'"),
        ({"on": ["failed"], "hook": True, "url": "http://x.test/"}, "unknown key 'url'"),
        (["failed"], "must be a mapping"),
    ],
)
def test_bad_notify_values_exit_2_naming_them_and_write_nothing(
    cli: Cli,
    redis_client: redis.Redis,
    namespace: str,
    tmp_path: Path,
    notify: Any,
    named: str,
) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(job("bad-notify", notify)))

    result = cli("submit", str(path))

    assert result.code == 2, result.stderr
    assert "'notify'" in result.stderr and named in result.stderr, result.stderr
    assert list(redis_client.scan_iter(match=f"jc:{namespace}:*")) == []
