"""Connect to the archive from its URL (JOBCENTER_ARCHIVE_URL) and bring its schema to the
newest migration. `sqlite:///PATH` is a file on this machine (WAL, so readers never wait for
the writer; a busy timeout, so two writers take turns); `postgresql://...` goes through
psycopg 3."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event

from jobcenter.errors import JobcenterError

MIGRATIONS = Path(__file__).with_name("migrations")  # in the package: an install carries them
BUSY_TIMEOUT_MS = 30_000  # an SQLite writer waits this long for another's transaction
POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")
# Two processes that connect at once must not both create the tables: one migrates at a time.
MIGRATION_LOCK_ID = 0x6A6F6263  # "jobc", PostgreSQL's advisory lock for it


class ArchiveUrlError(JobcenterError):
    """JOBCENTER_ARCHIVE_URL names no database the archive can use."""


def sqlite_path(url: str) -> str | None:
    """The file of an `sqlite:///PATH` URL; None for another database."""
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else None


def driver_url(url: str) -> str:
    """The SQLAlchemy URL of an archive URL; ArchiveUrlError for anything else."""
    path = sqlite_path(url)
    if path is not None:
        if not path:
            raise ArchiveUrlError(f"archive URL {url!r}: no file; use sqlite:///PATH")
        return url
    for scheme in POSTGRES_SCHEMES:
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    raise ArchiveUrlError(
        f"archive URL {url!r}: use sqlite:///PATH or postgresql://USER@HOST/DATABASE"
    )


def connect(url: str, *, migrate: bool = True) -> Engine:
    """An engine for the archive at `url`, its schema migrated to the newest revision."""
    path = sqlite_path(url)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(driver_url(url), connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(driver_url(url), pool_pre_ping=True)
    if migrate:
        upgrade(engine)
    return engine


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # FULL: a commit the archive confirmed survives a power loss (Redis then lets the job go)
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def upgrade(engine: Engine) -> None:
    """Run the package's Alembic migrations up to head, one process at a time."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is not None:
        with open(f"{path}.migrate-lock", "a") as lock:  # one host: a file lock is enough
            fcntl.flock(lock, fcntl.LOCK_EX)
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        return
    with engine.begin() as connection:
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_revision() -> str:
    """The newest migration this release knows."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


__all__ = ["ArchiveUrlError", "connect", "driver_url", "head_revision", "sqlite_path", "upgrade"]
