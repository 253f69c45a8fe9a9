"""Write finished jobs to the archive, a batch per transaction, idempotently: an upsert by
job id, the job's task and attempt rows replaced in the same transaction. A job whose row
already holds the same hash is left as it is, so archiving it twice (a worker killed between
the commit and telling Redis) changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, Table, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from .rows import ArchivedJob
from .tables import archived_attempts, archived_jobs, archived_tasks

ROWS_PER_INSERT = 500  # child rows per INSERT statement
PRUNE_BATCH = 500  # jobs deleted per prune transaction: short locks, bounded work


def _upsert(engine: Engine, table: Table, rows: list[dict[str, Any]], keys: list[str]) -> Any:
    module: Any = postgresql if engine.dialect.name == "postgresql" else sqlite
    stmt = module.insert(table).values(rows)
    changed = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys}
    return stmt.on_conflict_do_update(index_elements=keys, set_=changed)


def write(engine: Engine, jobs: Sequence[ArchivedJob]) -> int:
    """Archive `jobs` in one transaction; returns how many rows of archived_jobs changed."""
    if not jobs:
        return 0
    by_id = {job.job_id: job for job in sorted(jobs, key=lambda j: j.job_id)}  # lock order
    with engine.begin() as db:
        held = db.execute(
            select(archived_jobs.c.job_id, archived_jobs.c.fields).where(
                archived_jobs.c.job_id.in_(list(by_id))
            )
        )
        for job_id, fields in held:
            if bytes(fields) == by_id[job_id].job["fields"]:
                del by_id[job_id]  # archived already, as it is
        if not by_id:
            return 0
        changed = list(by_id.values())
        # the job row first: in PostgreSQL its lock makes a second writer of the same job
        # wait here until this one committed, before it replaces the child rows in turn
        db.execute(_upsert(engine, archived_jobs, [j.job for j in changed], ["job_id"]))
        ids = list(by_id)
        db.execute(delete(archived_tasks).where(archived_tasks.c.job_id.in_(ids)))
        db.execute(delete(archived_attempts).where(archived_attempts.c.job_id.in_(ids)))
        for table, rows in (
            (archived_tasks, [row for j in changed for row in j.tasks]),
            (archived_attempts, [row for j in changed for row in j.attempts]),
        ):
            for k in range(0, len(rows), ROWS_PER_INSERT):
                db.execute(table.insert(), rows[k : k + ROWS_PER_INSERT])
    return len(changed)


def prune(engine: Engine, finished_before_ms: int, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` jobs finished before `finished_before_ms`, with their rows."""
    with engine.begin() as db:
        ids = [
            row[0]
            for row in db.execute(
                select(archived_jobs.c.job_id)
                .where(archived_jobs.c.finished_at < finished_before_ms)
                .order_by(archived_jobs.c.finished_at)
                .limit(batch)
            )
        ]
        if not ids:
            return 0
        for table in (archived_attempts, archived_tasks, archived_jobs):
            db.execute(delete(table).where(table.c.job_id.in_(ids)))
    return len(ids)
