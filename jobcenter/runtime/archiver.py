"""Archiving finished jobs (JOBCENTER_ARCHIVE_URL): the leader that compacted a batch of jobs
writes them to the archive in one transaction, then tells Redis (archived.lua), which starts
their hot retention; only then may their keys expire. A database that is down or slow leaves
them pending in Redis: this process backs off, and the recovery pass archives whatever waited
longer than archive_stale_seconds (an archiver killed between its commit and its word to
Redis: the upsert by job id makes the second write change nothing)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from jobcenter.errors import Refused
from jobcenter.storage.keyspace.schema import MetricField
from jobcenter.storage.metrics import count
from jobcenter.storage.store import PendingJob, Store

log = logging.getLogger(__name__)

BATCH = 100  # jobs per transaction
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0  # after a failed write, the next try waits
PRUNE_BATCHES_MAX = 20  # prune transactions per recovery pass (of writer.PRUNE_BATCH jobs)
# A test's hook: after the database committed a batch, create this file and wait to be
# killed (the crash tests kill -9 an archiver there; the worker's rq child, which runs the
# recovery passes, does not get it). Never set outside the suite.
PAUSE_AFTER_COMMIT = "JOBCENTER_TEST_ARCHIVE_PAUSE"


class ArchiveExtraMissing(Refused):
    """JOBCENTER_ARCHIVE_URL is set but the `archive` extra is not installed."""


class Archiver:
    """Writes a namespace's finished jobs to its archive; one per process and archive."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Any = None
        self._lock = threading.Lock()  # one connect at a time
        self._retry_at = 0.0  # monotonic: no write before, after a failure
        self._backoff = BACKOFF_FIRST_S

    @property
    def engine(self) -> Any:
        """The archive's engine, connected (and its schema migrated) on first use."""
        with self._lock:
            if self._engine is None:
                from jobcenter.storage.archive.engine import connect

                self._engine = connect(self.url)
            return self._engine

    def archive(self, store: Store, job_ids: Sequence[str]) -> int:
        """Archive those of `job_ids` that wait for it; how many were confirmed. A failure
        is logged and counted, and the jobs stay pending (nothing expires)."""
        done = 0
        for k in range(0, len(job_ids), BATCH):
            if time.monotonic() < self._retry_at:
                return done  # backing off: recovery or a later batch tries again
            done += self._batch(store, job_ids[k : k + BATCH])
        return done

    def _batch(self, store: Store, job_ids: Sequence[str]) -> int:
        from jobcenter.storage.archive import writer
        from jobcenter.storage.archive.rows import archived_job

        jobs, _ = store.archive_read(job_ids)
        if not jobs:
            return 0
        now = store.now_ms()
        limit = store.settings.archive_result_max_bytes
        rows = [archived_job(j.job_id, j.fields, j.record, now, limit) for j in jobs]
        try:
            writer.write(self.engine, rows)
        except Exception as exc:  # the database down, refusing, or slower than its timeout
            self._failed(store, exc, store.now_ms())  # seen now, before the log and the count
            return 0
        # seen now: whichever process recorded a failure seen before, the warning goes
        store.archive_outcome(store.now_ms())
        self._hook()
        codes = store.archive_confirm(jobs)
        self._backoff = BACKOFF_FIRST_S
        confirmed = sum(1 for code in codes.values() if code == 0)
        count(store, {(0, MetricField.ARCHIVED.value): confirmed})
        return confirmed

    def _failed(self, store: Store, exc: Exception, seen_ms: int) -> None:
        self._retry_at = time.monotonic() + self._backoff
        log.warning(
            "archive write failed (retrying in %.0f s; the jobs wait in Redis): %s",
            self._backoff,
            exc,
        )
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        count(store, {(0, MetricField.ARCHIVE_FAILURES.value): 1})
        store.archive_outcome(seen_ms, f"{type(exc).__name__}: {exc}")

    def _hook(self) -> None:
        path = os.environ.get(PAUSE_AFTER_COMMIT)
        if path:
            open(path, "a").close()
            while True:
                time.sleep(3600)

    def prune(self, store: Store) -> int:
        """Delete the jobs past the archive's retention, in bounded batches; how many."""
        from jobcenter.storage.archive import writer

        before = store.now_ms() - int(store.settings.archive_retention_seconds * 1000)
        pruned = 0
        for _ in range(PRUNE_BATCHES_MAX):
            n = writer.prune(self.engine, before)
            pruned += n
            if n < writer.PRUNE_BATCH:
                break
        return pruned

    def archive_stale(self, store: Store, limit: int) -> int:
        """Recovery's part: the jobs pending for longer than archive_stale_seconds (their
        archiver died, or the database was down), oldest first, at most `limit` a shard.
        A job still without its packed record is compacted first."""
        stale_ms = int(store.settings.archive_stale_seconds * 1000)
        before = store.now_ms() - stale_ms
        done = 0
        for shard in range(store.keys.shards):
            job_ids = store.archive_due(shard, before, limit)
            if not job_ids:
                continue
            _, unpacked = store.archive_read(job_ids)
            for job_id in unpacked:
                store.compact(job_id)
            done += self.archive(store, job_ids)
        return done


_ARCHIVERS: dict[str, Archiver] = {}
_ARCHIVERS_LOCK = threading.Lock()


def archiver_for(store: Store) -> Archiver | None:
    """The process's archiver for the store's archive, or None without one."""
    url = store.settings.archive_url
    if not url:
        return None
    with _ARCHIVERS_LOCK:
        archiver = _ARCHIVERS.get(url)
        if archiver is None:
            try:
                import sqlalchemy  # noqa: F401
            except ImportError:
                raise ArchiveExtraMissing(
                    "JOBCENTER_ARCHIVE_URL is set, but the archive's libraries are not "
                    "installed: pip install 'jobcenter[archive]'"
                ) from None
            archiver = _ARCHIVERS[url] = Archiver(url)
        return archiver


__all__ = ["Archiver", "ArchiveExtraMissing", "PendingJob", "archiver_for"]
