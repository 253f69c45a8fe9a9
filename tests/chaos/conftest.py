"""Fixtures of the chaos tier: worker processes that tests kill -9 and freeze, on the session's
Redis or on a Redis of the test's own (for tests that kill Redis itself). The machinery is in
chaos_harness.py; the tasks the workers run are in chaos_tasks.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_harness import Cluster, close_cluster, short_settings

from jobcenter import Client
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import Store, connect


@pytest.fixture
def cluster(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    """Workers on the session's Redis; at teardown every worker and rq child must be gone."""
    c = Cluster(redis_url, namespace, tmp_path)
    yield c
    close_cluster(c)


@pytest.fixture
def store(redis_url: str, namespace: str) -> Store:
    """The test's own view of the namespace, with the same short lease as the workers."""
    return Store(connect(redis_url), short_settings(redis_url, namespace))


@pytest.fixture
def client(store: Store) -> Client:
    return Client(store)


@pytest.fixture
def private_cluster(
    private_redis: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Cluster]:
    """Workers on a Redis of this test's own (appendfsync always), which the test may kill."""
    c = Cluster(private_redis.url, namespace, tmp_path)
    yield c
    close_cluster(c)


@pytest.fixture
def outage_cluster(
    private_redis: RedisServer, redis_url: str, namespace: str, tmp_path: Path
) -> Iterator[Cluster]:
    """Workers on a Redis of this test's own, which the test stops or starves of memory;
    the tasks' events and gates on the session's Redis, so recording them and opening a
    gate do not wait out the outage the test causes."""
    c = Cluster(private_redis.url, namespace, tmp_path, events_url=redis_url)
    yield c
    close_cluster(c)


@pytest.fixture
def private_client(private_redis: RedisServer, namespace: str) -> Client:
    return Client(Store(connect(private_redis.url), short_settings(private_redis.url, namespace)))
