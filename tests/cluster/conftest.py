"""Fixtures of the cluster tier: the integration tier's workers, CLI and client, on a real
Redis Cluster (3 masters, one replica each) started from the suite's own redis-server.

Every test of this tier gets `redis_url` = the session cluster's redis+cluster:// URL; a test
that kills a master has a cluster of its own (`private_cluster`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import TESTS_DIR, Cli

sys.path.insert(0, str(TESTS_DIR / "integration"))  # the integration tier's harness, reused

from cluster_harness import CLUSTER_ENV, SHARDS, ClusterWorkers  # noqa: E402
from integration_harness import Scratch, Workers, worker_pool  # noqa: E402

from jobcenter import Client  # noqa: E402
from jobcenter.storage.server.connection import connect  # noqa: E402
from jobcenter.storage.server.embedded_cluster import LocalCluster  # noqa: E402


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_url(redis_cluster: LocalCluster) -> str:
    """This tier's Redis is the session's cluster."""
    return redis_cluster.url


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of this test's own, for a test that kills one of its masters."""
    with LocalCluster(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    client = connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    with worker_pool(redis_url, namespace, tmp_path, ClusterWorkers) as pool:
        yield pool


@pytest.fixture
def cli(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(redis_url, namespace, tmp_path, settings=CLUSTER_ENV)
    yield runner
    runner.close()


@pytest.fixture
def client(redis_url: str, namespace: str) -> Client:
    return Client.from_url(redis_url, namespace, shards=SHARDS)


@pytest.fixture
def scratch(redis_client: Any, namespace: str) -> Scratch:
    return Scratch(redis_client, namespace)
