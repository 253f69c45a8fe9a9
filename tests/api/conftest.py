"""Fixtures of the API tier: a real server per test (its own namespace) on a loopback port,
Python workers and reference executors beside it; every one is stopped at the test's end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from api_harness import ApiServer, Executor, Workers

from jobcenter import Client
from jobcenter.storage.server.embedded import RedisServer


@pytest.fixture
def api(redis_url: str, namespace: str) -> Iterator[ApiServer]:
    server = ApiServer(redis_url, namespace)
    yield server
    server.close()


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(redis_url, namespace, tmp_path)
    try:
        yield pool
    except BaseException:
        pool.close()
        raise
    problems = pool.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[list[Executor]]:
    """Executors a test starts (Executor(...)); each still running is stopped at its end."""
    started: list[Executor] = []
    yield started
    for executor in started:
        if executor.proc.poll() is None:
            executor.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, for a test that stops it."""
    server = RedisServer(tmp_path / "own-redis").start()
    yield server
    server.stop()


@pytest.fixture
def client(redis_url: str, namespace: str) -> Client:
    return Client.from_url(redis_url, namespace)
