"""Submitting through the Python client."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from jobcenter import Client

RACERS = 8

SPEC = {
    "name": "nightly",
    "owner": "alice",
    "idempotency_key": "nightly-2026-11-22",
    "tasks": [{"id": "only", "task": "tasks_for_tests.record"}],
}


def test_submit_with_the_same_idempotency_key_returns_the_same_job(client: Client) -> None:
    first = client.submit(SPEC)
    second = client.submit(SPEC)

    assert second == first
    assert [row["id"] for row in client.list()] == [first]
    other = client.submit({**SPEC, "idempotency_key": "nightly-2026-11-23"})
    assert other != first
    assert {row["id"] for row in client.list()} == {first, other}


def test_concurrent_submits_with_one_idempotency_key_create_one_job(client: Client) -> None:
    spec = {**SPEC, "idempotency_key": "raced"}
    clients = [Client.from_url(client.settings.redis_url, client.settings.namespace)
               for _ in range(RACERS)]  # fmt: skip
    barrier = threading.Barrier(RACERS)

    def submit(racer: Client) -> str:
        barrier.wait()
        return racer.submit(spec)

    with ThreadPoolExecutor(RACERS) as pool:
        ids = set(pool.map(submit, clients))

    assert len(ids) == 1
    assert [row["id"] for row in client.list()] == list(ids)
