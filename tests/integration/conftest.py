"""Fixtures of the integration tier (real worker processes, real CLI runs, real Redis); the
machinery behind them is in integration_harness.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from integration_harness import Scratch, Workers, worker_pool

from jobcenter import Client


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    """Starts worker processes; at teardown each must stop on SIGTERM with exit 0 and
    without a traceback in its log, or the test fails."""
    with worker_pool(redis_url, namespace, tmp_path) as pool:
        yield pool


@pytest.fixture
def client(redis_url: str, namespace: str) -> Client:
    return Client.from_url(redis_url, namespace)


@pytest.fixture
def scratch(redis_client: redis.Redis, namespace: str) -> Scratch:
    """What tasks_for_tests recorded in this namespace, and the gates its tasks wait on."""
    return Scratch(redis_client, namespace)
