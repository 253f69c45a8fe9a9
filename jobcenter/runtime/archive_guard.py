"""An SQLite archive is a file on one machine: workers on two hosts would each write their own
file, and each host's readers would see half the history. Each worker says in its worker
info which archive it writes (ARCHIVE_INFO); a worker refuses to start when it or a live
worker on another host writes an SQLite archive while the other writes one too."""

from __future__ import annotations

import socket

from jobcenter.config import redacted_url
from jobcenter.errors import Refused
from jobcenter.storage.store import Store

from .archiver import archiver_for

ARCHIVE_INFO = "archive"  # the worker-info field: the archive's URL, passwords hidden


def archive_info(store: Store) -> str:
    url = store.settings.archive_url
    return redacted_url(url) if url else ""


def check_not_shared(store: Store, host: str | None = None) -> None:
    """Refused naming the other host when an SQLite archive would be written from two hosts."""
    mine = archive_info(store)
    if not mine or archiver_for(store) is None:  # archiver_for: refused without the extra
        return
    host = host or socket.gethostname()
    for other_host, other in store.live_worker_fields("host", ARCHIVE_INFO):
        if not other or other_host == host:
            continue
        if mine.startswith("sqlite:") or other.startswith("sqlite:"):
            raise Refused(
                f"worker refuses to start: a live worker on host {other_host!r} writes the "
                f"archive {other}, this one on {host!r} writes {mine}; an SQLite archive is "
                "a file on one machine: give workers on several hosts a PostgreSQL archive "
                "(JOBCENTER_ARCHIVE_URL=postgresql://...)"
            )
