"""The archive's tables (SQLAlchemy Core), one schema for SQLite and PostgreSQL.

A job is one row of `archived_jobs`: the columns its lists filter and sort on, and the job
exactly as Redis last held it, `fields` (its hash, msgpack) and `packed` (its tasks and
history in the packed record's format, keyspace/packed.py), so a read of an archived job goes
through the same decoding as a compacted job in Redis and shows the same thing. Its tasks and
attempts are rows too (`archived_tasks`, `archived_attempts`), for whoever queries the
database with SQL. Every list reads one index a page at a time: the filter's column, then
creation time and id (the keyset a cursor resumes from).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

ID = String(32)  # a job id is a 26-character ULID
NAME = String(200)

archived_jobs = Table(
    "archived_jobs",
    metadata,
    Column("job_id", ID, primary_key=True),
    Column("name", NAME, nullable=False),
    Column("owner", NAME, nullable=False),
    Column("state", String(20), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("queue", NAME),
    Column("schedule_id", ID),
    Column("fire_time", BigInteger),  # ms
    Column("created_at", BigInteger, nullable=False),  # ms, Redis TIME (every time here)
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("error", Text),
    Column("tasks", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("cancelled", Integer, nullable=False),
    Column("tags", Text),  # JSON object of the job's tags, when it has any
    Column("events", Text),  # JSON: the job's events summary (counts by kind)
    Column("archived_at", BigInteger, nullable=False),
    Column("fields", LargeBinary, nullable=False),  # the job hash, msgpack {field: value}
    Column("packed", LargeBinary, nullable=False),  # tasks + history, keyspace/packed.py format
    Index("archived_jobs_created", "created_at", "job_id"),
    Index("archived_jobs_owner", "owner", "created_at", "job_id"),
    Index("archived_jobs_state", "state", "created_at", "job_id"),
    Index("archived_jobs_schedule", "schedule_id", "created_at", "job_id"),
    Index("archived_jobs_name", "name", "created_at", "job_id"),
    Index("archived_jobs_finished", "finished_at"),  # retention prunes by it
)

archived_tasks = Table(
    "archived_tasks",
    metadata,
    Column("job_id", ID, primary_key=True),
    Column("idx", Integer, primary_key=True),  # the task's index in its job
    Column("task_id", NAME, nullable=False),
    Column("name", NAME, nullable=False),  # the registered task name
    Column("state", String(20), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("worker", String(100)),  # the handler of its last attempt
    Column("error", Text),
    Column("result", LargeBinary),  # msgpack; absent when over the archive's result limit
    Column("result_size", Integer),  # bytes of the result, kept or not
    Column("progress", Text),  # JSON, the last progress it reported
)

archived_attempts = Table(
    "archived_attempts",
    metadata,
    Column("job_id", ID, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("state", String(20), nullable=False),  # how the attempt ended
    Column("worker", String(100)),
    Column("started_at", BigInteger),
    Column("finished_at", BigInteger),
    Column("error", Text),
)
