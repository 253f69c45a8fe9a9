"""The archive's fixtures: a PostgreSQL server the suite starts itself (one per session, on a
free loopback port, a fresh database per test) and an SQLite file per test. `archive_url`
is parametrized over both; the PostgreSQL tests skip, saying what is missing, where no
PostgreSQL server binaries are installed."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import WorkerPool

PG_BINARIES = ("initdb", "pg_ctl", "postgres")
START_TIMEOUT_S = 60


def _pg_bindir() -> str | None:
    """Where initdb, pg_ctl and postgres are: on PATH, or Debian's versioned directory."""
    found = shutil.which("initdb")
    if found:
        return str(Path(found).resolve().parent)
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if all(os.access(f"{bindir}/{name}", os.X_OK) for name in PG_BINARIES):
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A throwaway PostgreSQL cluster in `root`, run as user postgres when we are root
    (postgres refuses to run as root)."""

    def __init__(self, bindir: str, root: Path) -> None:
        self.bindir, self.data, self.port = bindir, root / "data", _free_port()
        self.log = root / "postgres.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(root, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [f"{self.bindir}/{tool}", *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c fsync=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = "t" + uuid.uuid4().hex[:12]
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.url(), autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {name}")
                return self.url(name)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = _pg_bindir()
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
