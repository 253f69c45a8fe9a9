"""Finished jobs reach the archive through real worker processes: each once, with its task and
attempt rows; its Redis keys start expiring only after the database committed; a worker
killed -9 between its commit and its word to Redis loses nothing and writes nothing twice
(recovery finishes the step); a stopped database leaves the jobs waiting in Redis, counted by
the gauges, until it is back."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import ArchiveWorkers, PostgresServer
from helpers import wait_until
from sqlalchemy import func, select

from jobcenter import Client
from jobcenter.storage.archive.engine import connect
from jobcenter.storage.archive.tables import archived_attempts, archived_jobs, archived_tasks
from jobcenter.web.metrics import exposition
from jobcenter.web.pages import archive_warning

JOB_SECONDS = 60
HOT = "600"  # seconds: the hot retention of these tests
FAST_RECOVERY = {  # a recovery pass every second, archiving what waited a second
    "JOBCENTER_RECOVERY_INTERVAL_SECONDS": "1",
    "JOBCENTER_ARCHIVE_STALE_SECONDS": "1",
}


def _env(url: str, **more: str) -> dict[str, str]:
    return {"JOBCENTER_ARCHIVE_URL": url, "JOBCENTER_ARCHIVE_HOT_SECONDS": HOT, **more}


def _jobs(client: Client, n: int) -> list[str]:
    """n jobs: each a chain of two tasks, every third one's second task failing once and
    retried (two attempts), every fourth one failing for good."""
    ids = []
    for k in range(n):
        second: dict[str, Any] = {"id": "b", "task": "retry_tasks.noop", "depends_on": ["a"]}
        if k % 3 == 0:
            second = {"id": "b", "task": "retry_tasks.flaky", "args": [1, f"c{k}"],
                      "retries": 1, "depends_on": ["a"]}  # fmt: skip
        if k % 4 == 1:
            second = {"id": "b", "task": "tasks_for_tests.fatal", "depends_on": ["a"]}
        tasks = [{"id": "a", "task": "retry_tasks.noop", "args": [k]}, second]
        ids.append(client.submit({"name": f"job{k}", "owner": "ann", "tasks": tasks}))
    return ids


def _rows(url: str) -> dict[str, Any]:
    engine = connect(url)
    with engine.connect() as db:
        jobs = {r.job_id: r for r in db.execute(select(archived_jobs))}
        tasks = db.execute(select(func.count()).select_from(archived_tasks)).scalar_one()
        attempts = db.execute(select(func.count()).select_from(archived_attempts)).scalar_one()
    engine.dispose()
    return {"jobs": jobs, "tasks": tasks, "attempts": attempts}


def _ttls(client: Client, job_ids: list[str]) -> list[int]:
    return [client.store.redis.pttl(client.store.keys.job(j).job) for j in job_ids]


def _backlog(client: Client) -> int:
    return client.store.archive_backlog()[0]


def test_every_finished_job_is_archived_once_with_its_tasks_and_attempts(
    archive_url: str, redis_url: str, namespace: str, workers: ArchiveWorkers
) -> None:
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    workers.start(env=_env(archive_url))
    job_ids = _jobs(client, 8)
    for job_id in job_ids:
        client.wait(job_id, JOB_SECONDS)
    wait_until(lambda: len(_rows(archive_url)["jobs"]) == 8 and _backlog(client) == 0,
               timeout=JOB_SECONDS, message="the finished jobs were not archived")  # fmt: skip
    rows = _rows(archive_url)
    assert set(rows["jobs"]) == set(job_ids)
    assert rows["tasks"] == 16  # two a job
    # a attempt each; b: once, twice when flaky (k % 3 == 0: 0, 3, 6), once when fatal
    assert rows["attempts"] == 16 + 3
    for k, job_id in enumerate(job_ids):
        row = rows["jobs"][job_id]
        status = client.status(job_id)
        assert (row.name, row.owner, row.state) == (f"job{k}", "ann", status["state"])
        assert row.finished_at is not None and row.tasks == 2
    # every job's keys got the hot retention once archived, not the Redis retention (7 days)
    assert all(0 < ttl <= int(HOT) * 1000 for ttl in _ttls(client, job_ids)), _ttls(client, job_ids)
    assert "jobcenter_jobs_archived_total 8.0" in exposition(client.store).decode()


def test_keys_expire_only_after_the_commit_and_a_worker_killed_there_loses_and_doubles_nothing(
    archive_url: str, redis_url: str, namespace: str, workers: ArchiveWorkers, tmp_path: Path
) -> None:
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    paused = tmp_path / "committed"
    first = workers.start(env=_env(archive_url, JOBCENTER_TEST_ARCHIVE_PAUSE=str(paused),
                                   JOBCENTER_RECOVERY_INTERVAL_SECONDS="86400"))  # fmt: skip
    # its rq child's pass at start is over: killing the worker cuts no pass short (that would
    # hold the recovery lease for the worker timeout)
    workers.wait_recovery_round_done(86400)
    job_ids = _jobs(client, 3)
    wait_until(paused.exists, timeout=JOB_SECONDS, message="the archiver never committed")
    committed = _rows(archive_url)["jobs"]
    assert committed, "the archive holds the batch it committed"
    # committed, but Redis not told yet: nothing of those jobs expires
    assert _ttls(client, list(committed)) == [-1] * len(committed)
    for job_id in job_ids:  # its task threads run on: only its archiver waits
        client.wait(job_id, JOB_SECONDS)
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait()

    workers.start(env=_env(archive_url, **FAST_RECOVERY))
    wait_until(lambda: _backlog(client) == 0 and len(_rows(archive_url)["jobs"]) == 3,
               timeout=JOB_SECONDS, message="recovery did not finish the archive step")  # fmt: skip
    rows = _rows(archive_url)["jobs"]
    # the rows committed before the kill were not written again (same archived_at)
    assert {j: rows[j].archived_at for j in committed} == {
        j: r.archived_at for j, r in committed.items()
    }
    assert all(0 < ttl <= int(HOT) * 1000 for ttl in _ttls(client, job_ids))


def test_a_stopped_database_leaves_jobs_waiting_in_redis_until_it_is_back(
    postgres_server: PostgresServer, postgres_url: str, redis_url: str, namespace: str,
    workers: ArchiveWorkers
) -> None:  # fmt: skip
    client = Client.from_url(redis_url, namespace, archive_url=postgres_url)
    workers.start(env=_env(postgres_url, **FAST_RECOVERY))
    postgres_server.stop()
    try:
        job_ids = _jobs(client, 4)
        for job_id in job_ids:
            client.wait(job_id, JOB_SECONDS)
        wait_until(lambda: _backlog(client) == 4 and client.store.archive_status() is not None,
                   timeout=JOB_SECONDS, message="no backlog, or no failure recorded")  # fmt: skip
        assert _ttls(client, job_ids) == [-1] * 4  # nothing expires while it waits
        text = exposition(client.store).decode()
        assert "jobcenter_archive_backlog 4.0" in text
        assert "jobcenter_archive_write_failures_total" in text
        warning = archive_warning(client.store)  # what every dashboard page shows
        assert warning is not None and "the archive is unreachable" in warning
    finally:
        postgres_server.start()
    wait_until(lambda: _backlog(client) == 0, timeout=JOB_SECONDS * 2,
               message="the backlog did not drain once the database was back")  # fmt: skip
    assert client.store.archive_status() is None  # the next write that worked cleared it
    assert set(_rows(postgres_url)["jobs"]) == set(job_ids)
    assert all(0 < ttl <= int(HOT) * 1000 for ttl in _ttls(client, job_ids))


@pytest.mark.parametrize("url", ["mysql://db/jobs", "sqlite:///"])
def test_an_archive_url_of_no_usable_database_is_refused_naming_it(url: str) -> None:
    from jobcenter.storage.archive.engine import ArchiveUrlError

    with pytest.raises(ArchiveUrlError, match="archive URL"):
        connect(url)


def test_a_worker_refuses_an_sqlite_archive_a_worker_on_another_host_writes_too(
    sqlite_url: str, redis_url: str, namespace: str, workers: ArchiveWorkers
) -> None:
    client = Client.from_url(redis_url, namespace)
    # a live worker on another host, writing an archive of its own
    client.store.register_worker("far-away", {"host": "far-host", "archive": "sqlite:///x"}, None)
    refused = workers.start(env=_env(sqlite_url), wait_ready=False)
    assert refused.proc.wait(JOB_SECONDS) != 0
    log = refused.log()
    assert "far-host" in log and "SQLite archive is a file on one machine" in log, log
    # a PostgreSQL archive on the other host is no excuse: this one's SQLite file is still
    client.store.register_worker(
        "far-away", {"host": "far-host", "archive": "postgresql://db/jobs"}, None
    )
    again = workers.start(env=_env(sqlite_url), wait_ready=False)
    assert again.proc.wait(JOB_SECONDS) != 0
    # on this host, sharing the file is fine
    client.store.deregister_worker("far-away")
    workers.start(env=_env(sqlite_url))
