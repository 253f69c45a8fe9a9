"""Small helpers shared by the test tiers."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> T:
    """Poll predicate until it returns something truthy, and return that.

    Raises AssertionError (with message) if it has not within timeout seconds. This waits for a
    condition to hold; it is not a sleep standing in for synchronisation.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(
                message or f"condition not met within {timeout:g} s: {predicate!r}"
            )
        time.sleep(interval)


# What `jobcenter worker --health-port N` logs once its endpoint listens (N may be 0: any port).
HEALTH_LOG = re.compile(r"health endpoint on http://[^:]+:(\d+)/")
PROBE_TIMEOUT_SECONDS = 5.0  # an endpoint answers in well under a second, even with Redis hung


def health_port(log: Callable[[], str]) -> int:
    """The port a worker's health endpoint listens on, from its log (polled until it is there)."""
    match = wait_until(lambda: HEALTH_LOG.search(log()), message="no health endpoint logged")
    return int(match.group(1))


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET a worker's /healthz or /readyz: (HTTP status, JSON body)."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_probe(port: int, path: str, status: int, timeout: float = 10.0) -> dict[str, Any]:
    """Poll a worker's /healthz or /readyz until it answers `status`; its JSON body."""
    last: list[tuple[int, dict[str, Any]]] = []

    def answered() -> bool:
        last[:] = [probe(port, path)]
        return last[0][0] == status

    wait_until(answered, timeout, message=f"{path} never answered {status}: last {last}")
    return last[0][1]
