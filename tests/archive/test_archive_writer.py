"""The archive's engine and writer against real databases (SQLite, and a PostgreSQL server
the suite starts): migrations at connect, an upsert by job id that changes nothing when a
job is archived twice, child rows replaced with the job, retention pruned in bounded batches."""

from __future__ import annotations

from sqlalchemy import func, select, text

from jobcenter.model import codec
from jobcenter.storage.archive import engine as archive_engine
from jobcenter.storage.archive import writer
from jobcenter.storage.archive.rows import archived_job
from jobcenter.storage.archive.tables import archived_attempts, archived_jobs, archived_tasks
from jobcenter.storage.keyspace.packed import encode


def _job(job_id: str, finished_at: int, *, error: str = "", attempts: int = 1):  # type: ignore[no-untyped-def]
    fields = {
        "id": job_id.encode(),
        "name": b"nightly",
        "owner": b"alice",
        "state": b"failed" if error else b"succeeded",
        "priority": b"0",
        "n": b"2",
        "nfailed": b"1" if error else b"0",
        "created_at": b"1000",
        "finished_at": str(finished_at).encode(),
        "updated_at": str(finished_at).encode(),
    }
    tasks = {}
    history = []
    for i in range(2):
        tasks[f"id:{i}"] = f"t{i}".encode()
        tasks[f"s:{i}"] = b"failed" if error and i == 1 else b"succeeded"
        tasks[f"a:{i}"] = str(attempts).encode()
        tasks[f"p:{i}"] = codec.pack({"t": "tests.add", "a": [i]})
        tasks[f"r:{i}"] = codec.pack("x" * (10 if i == 0 else 5000))
        for a in range(1, attempts + 1):
            state = "failed" if error and i == 1 else "succeeded"
            history.append(f"{i}\t{a}\t{state}\tw1\t100\t200\t{error}".encode())
    record = encode(tasks, history, 2)
    return archived_job(job_id, fields, record, now_ms=5, result_max=1000)


def _count(engine, table) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as db:
        return int(db.execute(select(func.count()).select_from(table)).scalar_one())


def test_connect_migrates_to_head_once_and_again(archive_url: str) -> None:
    engine = archive_engine.connect(archive_url)
    archive_engine.connect(archive_url).dispose()  # a second process: nothing to do
    with engine.connect() as db:
        version = db.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    assert version == archive_engine.head_revision()
    assert _count(engine, archived_jobs) == 0


def test_archiving_twice_changes_nothing_and_a_retry_replaces_the_rows(archive_url: str) -> None:
    engine = archive_engine.connect(archive_url)
    first = _job("J1", 2000)
    assert writer.write(engine, [first, _job("J2", 2000)]) == 2
    with engine.connect() as db:
        before = db.execute(select(archived_jobs).order_by(archived_jobs.c.job_id)).all()
        task_rows = db.execute(select(archived_tasks).where(archived_tasks.c.job_id == "J1")).all()
    assert [(t.idx, t.name, t.state, t.result_size) for t in task_rows] == [
        (0, "tests.add", "succeeded", len(codec.pack("x" * 10))),
        (1, "tests.add", "succeeded", len(codec.pack("x" * 5000))),
    ]
    assert task_rows[0].result == codec.pack("x" * 10) and task_rows[1].result is None  # over 1000
    again = _job("J1", 2000)
    again.job["archived_at"] = 99  # archived later: still the same job, nothing written
    assert writer.write(engine, [again]) == 0
    with engine.connect() as db:
        assert db.execute(select(archived_jobs).order_by(archived_jobs.c.job_id)).all() == before
    # the job retried and failed this time: its rows are replaced, none left over
    assert writer.write(engine, [_job("J1", 3000, error="boom", attempts=2)]) == 1
    with engine.connect() as db:
        row = db.execute(select(archived_jobs).where(archived_jobs.c.job_id == "J1")).one()
        attempts = db.execute(
            select(archived_attempts.c.idx, archived_attempts.c.attempt, archived_attempts.c.state)
            .where(archived_attempts.c.job_id == "J1")
            .order_by(archived_attempts.c.idx, archived_attempts.c.attempt)
        ).all()
    assert (row.state, row.finished_at, row.failed) == ("failed", 3000, 1)
    assert [tuple(a) for a in attempts] == [
        (0, 1, "succeeded"),
        (0, 2, "succeeded"),
        (1, 1, "failed"),
        (1, 2, "failed"),
    ]
    assert _count(engine, archived_tasks) == 4


def test_prune_deletes_old_jobs_in_bounded_batches(archive_url: str) -> None:
    engine = archive_engine.connect(archive_url)
    writer.write(engine, [_job(f"J{k:02}", 1000 + k) for k in range(7)])
    assert writer.prune(engine, 1005, batch=2) == 2  # J00, J01: the oldest first
    assert writer.prune(engine, 1005, batch=2) == 2
    assert writer.prune(engine, 1005, batch=2) == 1
    assert writer.prune(engine, 1005, batch=2) == 0
    with engine.connect() as db:
        kept = db.execute(select(archived_jobs.c.job_id).order_by(archived_jobs.c.job_id)).all()
    assert [k[0] for k in kept] == ["J05", "J06"]
    assert _count(engine, archived_tasks) == 4


def test_the_recovery_pass_prunes_the_archive_past_its_retention(
    archive_url: str, redis_url: str, namespace: str
) -> None:
    from jobcenter import Client
    from jobcenter.runtime.recovery import Recovery

    engine = archive_engine.connect(archive_url)
    writer.write(engine, [_job(f"J{k:02}", 1000 + k) for k in range(3)])  # finished in 1970
    client = Client.from_url(redis_url, namespace, archive_url=archive_url)
    writer.write(engine, [_job("NEW", client.store.now_ms())])
    report = Recovery(client.store, "test-recovery").run()
    assert report.archive_pruned == 3, report
    with engine.connect() as db:
        assert [r[0] for r in db.execute(select(archived_jobs.c.job_id))] == ["NEW"]
