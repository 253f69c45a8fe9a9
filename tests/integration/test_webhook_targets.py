"""A webhook is no way into the workers' network: a target that is not public (the cloud's
metadata service, a private range, the Redis server itself) is refused at submit unless
allow-listed; a name that resolves to loopback by the time a worker posts is refused then;
and a failed delivery is recorded in our words, never the target's answer or the system's
error text (which would tell the submitter which ports are open)."""

from __future__ import annotations

import json
import socket
from ipaddress import ip_address
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers
from webhook_server import ALLOW, ALLOW_ENV, raw_server, webhook_server

from jobcenter import Client, SpecError
from jobcenter.model.webhook_targets import TargetRules, parse_allow
from jobcenter.runtime import webhook

ONE_ATTEMPT = {"JOBCENTER_NOTIFY_ATTEMPTS": "1", "JOBCENTER_NOTIFY_TIMEOUT_SECONDS": "5"}
SECRET_WORDS = "secret-marker"  # what a target says; none of it may reach the record


def told(url: str, name: str = "told") -> dict[str, Any]:
    return {
        "name": name,
        "notify": {"on": ["succeeded"], "webhook": url},
        "tasks": [{"id": "a", "task": "tasks_for_tests.record"}],
    }


def given_up(client: Client, job_id: str) -> dict[str, Any] | None:
    delivery = client.status(job_id)["notifications"]["deliveries"]["webhook"]
    return delivery if delivery["state"] == "failed" else None


def inner_targets(redis_url: str) -> list[tuple[str, str]]:
    redis_port = urlsplit(redis_url).port
    return [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        (f"http://127.0.0.1:{redis_port}/", f"127.0.0.1:{redis_port} is a Redis server"),
        ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
    ]


def test_a_webhook_to_an_inner_address_exits_2_at_submit_naming_it_with_nothing_written(
    cli: Cli, redis_client: redis.Redis, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    for url, why in inner_targets(redis_url):
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(told(url)))

        result = cli("submit", str(path))

        assert result.code == 2, result.stderr
        assert f"webhook {url!r} is refused: {why}" in result.stderr, result.stderr
        assert "JOBCENTER_WEBHOOK_ALLOW" in result.stderr
    keys = {key.decode() for key in redis_client.scan_iter(match=f"jc:{namespace}:*")}
    assert keys <= {f"jc:{namespace}:schema", f"jc:{namespace}:shards"}  # what a connect writes


def test_a_schedule_with_an_inner_webhook_is_refused_too(client: Client) -> None:
    with pytest.raises(SpecError, match="is a link-local address"):
        client.schedule(told("http://169.254.169.254/"), every="PT1H")
    assert client.schedules() == []


def test_the_allow_list_admits_inner_targets_and_the_redis_port_only_by_name(
    cli: Cli, redis_url: str, tmp_path: Path
) -> None:
    redis_port = urlsplit(redis_url).port
    loopback = {"JOBCENTER_WEBHOOK_ALLOW": "169.254.169.254,10.0.0.0/8,127.0.0.0/8"}
    exact = {"JOBCENTER_WEBHOOK_ALLOW": f"127.0.0.1:{redis_port}"}
    for url, _ in inner_targets(redis_url):
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(told(url)))
        is_redis = url.startswith("http://127.0.0.1")

        result = cli("submit", str(path), env=loopback)

        assert result.code == (2 if is_redis else 0), result.stderr
        if is_redis:  # a loopback range allowed for the receivers does not open Redis
            assert "is a Redis server" in result.stderr
            assert cli("submit", str(path), env=exact).code == 0


def test_a_name_that_resolves_to_loopback_when_the_worker_posts_is_refused_then(
    workers: Workers, client: Client, redis_url: str, namespace: str
) -> None:
    # The submitter's own allow-list let the name through (any name passes a submit that
    # cannot know what it will resolve to); the worker, with none, checks what it resolves to.
    submitter = Client.from_url(redis_url, namespace, webhook_allow="localhost")
    workers.start(env=ONE_ATTEMPT)
    with webhook_server([200]) as server:
        port = urlsplit(server.url).port
        job_id = submitter.submit(told(f"http://localhost:{port}/hooks/jobcenter"))
        failed = wait_until(lambda: given_up(client, job_id), JOB_SECONDS)

        assert server.count() == 0
    assert failed["error"].startswith("refused: localhost resolves to a loopback address")
    assert "JOBCENTER_WEBHOOK_ALLOW" in failed["error"]


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return int(listener.getsockname()[1])  # nothing listens there once it is closed


def test_a_failed_delivery_records_a_status_or_connection_failed_never_what_the_target_said(
    workers: Workers, client: Client, redis_url: str, namespace: str
) -> None:
    workers.start(env={**ALLOW_ENV, **ONE_ATTEMPT})
    submitter = Client.from_url(redis_url, namespace, webhook_allow=ALLOW)
    answer = f"HTTP/1.1 500 {SECRET_WORDS}\r\nContent-Length: 13\r\n\r\n{SECRET_WORDS}"
    with (
        raw_server(answer.encode()) as http_500,
        raw_server(f"SSH-2.0-OpenSSH_{SECRET_WORDS}\r\n".encode()) as not_http,
    ):
        urls = {
            "HTTP 500": http_500,
            "connection failed": not_http,
            "closed": f"http://127.0.0.1:{closed_port()}/hooks/jobcenter",
        }
        jobs = {
            expected: submitter.submit(told(url, f"told-{i}"))
            for i, (expected, url) in enumerate(urls.items())
        }
        failed = {
            expected: wait_until(lambda j=job_id: given_up(client, j), JOB_SECONDS)
            for expected, job_id in jobs.items()
        }

    assert failed["HTTP 500"]["error"] == "HTTP 500"
    assert failed["connection failed"]["error"] == "connection failed"
    assert failed["closed"]["error"] == "connection failed"  # as a port that speaks no HTTP
    for job_id in jobs.values():
        (attempt,) = client.status(job_id)["notifications"]["attempts"]
        assert SECRET_WORDS not in attempt["detail"] and "Errno" not in attempt["detail"]


def test_a_post_connects_to_the_address_it_checked_not_to_a_second_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker's one lookup says 127.0.0.1; a `.invalid` name never resolves (RFC 6761), so
    # the post can only arrive if the connection went to the checked address itself.
    monkeypatch.setattr(webhook, "resolve", lambda host, port: [ip_address("127.0.0.1")])
    rules = TargetRules(parse_allow([ALLOW]))
    with webhook_server([204]) as server:
        port = urlsplit(server.url).port
        url = f"http://rebound.invalid:{port}/hooks/jobcenter?to=ü"

        outcome = webhook.post(url, b"{}", {"Content-Type": "application/json"}, 5.0, rules)

    assert outcome == (True, "HTTP 204")
    assert server.received[0].headers["host"] == f"rebound.invalid:{port}"  # the name kept
