"""A throwaway PostgreSQL server on a free loopback port, for the archive's tests and its
bench (`make bench BENCH_ARGS=--only=archive`): initdb into a directory, pg_ctl start and
stop, a fresh database per caller. The binaries come from PATH or Debian's versioned
directory; as root the server runs as user postgres (postgres refuses to run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

PG_BINARIES = ("initdb", "pg_ctl", "postgres")
START_TIMEOUT_S = 60


def pg_bindir() -> str | None:
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
    """A throwaway PostgreSQL cluster in `root`, run as user postgres when we are root.
    `fsync` off: for tests and the bench (the bench says so beside its figures)."""

    def __init__(self, bindir: str, root: Path, *, fsync: bool = False) -> None:
        self.bindir, self.data, self.port = bindir, root / "data", _free_port()
        self.log = root / "postgres.log"
        self.fsync = fsync
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
            f"-c fsync={'on' if self.fsync else 'off'}"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
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


__all__ = ["PostgresServer", "pg_bindir"]
