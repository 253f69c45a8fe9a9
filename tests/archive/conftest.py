"""The archive's fixtures: a PostgreSQL server the suite starts itself (one per session, on a
free loopback port, a fresh database per test) and an SQLite file per test. `archive_url`
is parametrized over both; the PostgreSQL tests skip, saying what is missing, where no
PostgreSQL server binaries are installed."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import WorkerPool

from jobcenter.storage.archive.postgres_server import PostgresServer, pg_bindir


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH or in "
            "/usr/lib/postgresql/*/bin: install the postgresql package"
        )
    # not under pytest's temp root: that is private to root, and the server runs as postgres
    root = Path(tempfile.mkdtemp(prefix="jobcenter-postgres-"))
    try:
        server = PostgresServer(bindir, root)
        server.start()
        yield server
        with contextlib.suppress(subprocess.CalledProcessError):  # a test stopped it already
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh database of the session's server."""
    return postgres_server.create_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/archive.db"


@pytest.fixture(params=["sqlite", "postgres"])
def archive_url(request: pytest.FixtureRequest) -> str:
    """The archive of this test, once in SQLite and once in PostgreSQL."""
    return str(request.getfixturevalue(f"{request.param}_url"))


class ArchiveWorkers(WorkerPool):
    """Worker processes of an archive test; whatever is still running at its end is killed."""

    modules = ("retry_tasks", "tasks_for_tests")

    def close(self) -> None:
        for worker in self.started:
            if worker.alive:
                worker.proc.kill()
            worker.proc.wait()
        self.redis.close()


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[ArchiveWorkers]:
    pool = ArchiveWorkers(redis_url, namespace, tmp_path)
    yield pool
    pool.close()
