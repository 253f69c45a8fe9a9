"""`make bench BENCH_ARGS=--only=archive`: the SQL archive, in SQLite and in PostgreSQL.

  list     `list --owner alice` over --archive-rows archived jobs (10 million; --quick
           100,000): rows bulk-inserted with SQL (1,000 owners, jobs a second apart over
           months), then the first page (100 jobs) of the reader's owner list, timed (the
           first call, then the median and worst of 20), and a page 50 pages deep; the
           database's plan of the query (EXPLAIN), which must read the owner index
  write    archive throughput through the writer (storage/archive/writer.py): seed-000
           jobs (9 tasks, 100 a transaction) and 1,000-task jobs (one a transaction), their
           rows built as the archiver builds them (rows.archived_job); tasks a second
           against the 1,667 a second of 50 million tasks a day; the database's bytes a task
  memory   Redis at 50 million tasks a day with an hour of hot retention: the tasks an hour
           holds times the bytes a finished task keeps (docs/operations/capacity.md,
           `--only=memory`)

SQLite is a file in a temporary directory (WAL, synchronous=FULL, as the archive runs it);
PostgreSQL a throwaway server of its own (storage/archive/postgres_server.py, fsync on for
`write`). Not part of the test suite.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from jobcenter.model import codec
from jobcenter.storage.archive import engine as archive_engine
from jobcenter.storage.archive import writer
from jobcenter.storage.archive.postgres_server import PostgresServer, pg_bindir
from jobcenter.storage.archive.reader import ArchiveReader
from jobcenter.storage.archive.rows import ArchivedJob, archived_job
from jobcenter.storage.archive.tables import archived_jobs
from jobcenter.storage.keyspace.packed import encode

Say = Callable[[str], None]
PEAK = 1_667  # tasks a second at the peak of 50 million a day (the day's tasks in 8.3 hours)
TASKS_A_DAY = 50_000_000
HOT_SECONDS = 3600
OWNERS = 1_000
PAGE = 100
TIMED_PAGES = 20
DEEP_PAGES = 50
INSERT_CHUNK = 1_000_000  # rows per INSERT ... SELECT
# Redis bytes a finished task keeps once compacted (docs/operations/capacity.md, measured by
# `--only=memory`): the example DAG succeeded, one of its tasks failed, 1,000 tasks.
BYTES_PER_FINISHED_TASK = {"seed-000 succeeded": 175, "seed-000 failed": 395, "1,000 tasks": 51}
INDEXES = [i for i in archived_jobs.indexes]


def _job_fields(job_id: str, owner: str, created: int, tasks: int) -> dict[str, bytes]:
    return {
        "id": job_id.encode(),
        "name": b"nightly-etl",
        "owner": owner.encode(),
        "state": b"succeeded",
        "priority": b"0",
        "queue": b"default",
        "n": str(tasks).encode(),
        "left": b"0",
        "nfailed": b"0",
        "ncancelled": b"0",
        "created_at": str(created).encode(),
        "started_at": str(created + 5).encode(),
        "finished_at": str(created + 900).encode(),
        "updated_at": str(created + 900).encode(),
        "packed": b"1",
    }


def _record(tasks: int, created: int) -> bytes:
    fields: dict[str, bytes] = {}
    history = []
    for i in range(tasks):
        fields[f"id:{i}"] = f"t{i + 1}".encode()
        fields[f"s:{i}"] = b"succeeded"
        fields[f"a:{i}"] = b"1"
        fields[f"p:{i}"] = codec.pack({"t": "jobcenter.demo.step", "a": [i]})
        fields[f"ts:{i}"] = str(created + 10 + i).encode()
        fields[f"tf:{i}"] = str(created + 20 + i).encode()
        fields[f"r:{i}"] = codec.pack(i)
        history.append(
            f"{i}\t1\tsucceeded\tnode-1:4242:w\t{created + 10 + i}\t{created + 20 + i}\t".encode()
        )
    return encode(fields, history, tasks)


def _archived(job_id: str, tasks: int, created: int) -> ArchivedJob:
    fields = _job_fields(job_id, "alice", created, tasks)
    return archived_job(job_id, fields, _record(tasks, created), created + 1000, 64 * 1024)


@contextlib.contextmanager
def databases(fsync: bool) -> Iterator[list[tuple[str, Callable[[], str]]]]:
    """(kind, a maker of a fresh database's URL) of SQLite files and, where its binaries
    are, of databases of a PostgreSQL server."""
    root = Path(tempfile.mkdtemp(prefix="jobcenter-bench-archive-"))
    # its own directory: the server may run as user postgres, who cannot enter ours
    pg_root = Path(tempfile.mkdtemp(prefix="jobcenter-bench-postgres-"))
    server = None
    try:
        files = itertools.count()
        found: list[tuple[str, Callable[[], str]]] = [
            ("sqlite", lambda: f"sqlite:///{root}/archive-{next(files)}.db")
        ]
        bindir = pg_bindir()
        if bindir is not None:
            server = PostgresServer(bindir, pg_root, fsync=fsync)
            server.start()
            found.append(("postgresql", server.create_database))
        yield found
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(pg_root, ignore_errors=True)


def _bulk_insert(engine: Engine, rows: int, say: Say) -> None:
    """`rows` archived jobs straight in SQL, the indexes dropped meanwhile and built after:
    owner k of 1,000 (alice is owner 0), one job a second back from now."""
    fields_blob = codec.pack(_job_fields("0" * 26, "alice", 0, 9), what="job fields")
    packed_blob = _record(9, 0)
    now_ms = int(time.time() * 1000)
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as db:
        for index in INDEXES:
            db.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
    started = time.monotonic()
    for first in range(0, rows, INSERT_CHUNK):
        last = min(rows, first + INSERT_CHUNK)
        if postgres:
            series = "SELECT g::bigint AS n FROM generate_series(:first, :last - 1) AS g"
            owner = "CASE WHEN n % 1000 = 0 THEN 'alice' ELSE 'user' || (n % 1000) END"
            job_id = "lpad(n::text, 26, '0')"
        else:
            series = (
                "WITH RECURSIVE s(n) AS (SELECT :first UNION ALL SELECT n + 1 FROM s "
                "WHERE n < :last - 1) SELECT n FROM s"
            )
            owner = "CASE WHEN n % 1000 = 0 THEN 'alice' ELSE 'user' || (n % 1000) END"
            job_id = "substr('00000000000000000000000000' || n, -26, 26)"
        insert = text(
            "INSERT INTO archived_jobs (job_id, name, owner, state, priority, queue, "
            "created_at, started_at, finished_at, tasks, failed, cancelled, archived_at, "
            f"fields, packed) SELECT {job_id}, 'nightly-etl', {owner}, "
            "CASE WHEN n % 50 = 0 THEN 'failed' ELSE 'succeeded' END, 0, 'default', "
            ":now - n * 1000, :now - n * 1000 + 5, :now - n * 1000 + 900, 9, 0, 0, :now, "
            f":fields, :packed FROM ({series}) AS t"
        )
        with engine.begin() as db:
            db.execute(
                insert,
                {
                    "first": first,
                    "last": last,
                    "now": now_ms,
                    "fields": fields_blob,
                    "packed": packed_blob,
                },
            )
        say(f"  {last:,} rows ({time.monotonic() - started:.0f} s)")
    with engine.begin() as db:
        for index in INDEXES:
            columns = ", ".join(c.name for c in index.columns)
            db.execute(text(f"CREATE INDEX {index.name} ON archived_jobs ({columns})"))
        db.execute(text("ANALYZE"))
    say(f"  indexes built ({time.monotonic() - started:.0f} s in all)")


def _plan(engine: Engine, reader: ArchiveReader) -> list[str]:
    """The database's plan of the owner list's first page."""
    query = reader.page_query(owner="alice", limit=PAGE)
    compiled = query.compile(engine, compile_kwargs={"literal_binds": True})
    explain = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as db:
        rows = db.execute(text(explain + str(compiled))).all()
    return [str(row[-1]) for row in rows]


def list_bench(kind: str, url: str, rows: int, say: Say) -> dict[str, Any]:
    engine = archive_engine.connect(url)
    say(f"{kind}: {rows:,} archived jobs, bulk insert")
    _bulk_insert(engine, rows, say)
    reader = ArchiveReader(archive_engine.connect(url, migrate=False))
    started = time.perf_counter()
    page = reader.page(owner="alice", limit=PAGE)
    first_call = time.perf_counter() - started
    assert len(page) == PAGE, len(page)
    times = []
    for _ in range(TIMED_PAGES):
        started = time.perf_counter()
        reader.page(owner="alice", limit=PAGE)
        times.append(time.perf_counter() - started)
    before = None
    deep_pages = 0
    for _ in range(DEEP_PAGES):  # as deep as alice's jobs go (100 pages at 10 million)
        page = reader.page(owner="alice", limit=PAGE, before=before)
        if len(page) < PAGE:
            break
        deep_pages += 1
        # the bulk rows share one hash: the cursor's time is the row's column
        created = text("SELECT created_at FROM archived_jobs WHERE job_id = :id")
        with engine.connect() as db:
            at = db.execute(created, {"id": page[-1][0]}).scalar_one()
        before = (int(at), page[-1][0])
    started = time.perf_counter()
    reader.page(owner="alice", limit=PAGE, before=before)
    deep = time.perf_counter() - started
    plan = _plan(engine, reader)
    say(f"  plan: {' | '.join(plan)}")
    say(
        f"  first page: {first_call * 1000:.1f} ms the first call, median of {TIMED_PAGES} "
        f"{statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms; "
        f"{deep_pages} pages deep {deep * 1000:.1f} ms"
    )
    return {
        "db": kind,
        "rows": rows,
        "first_call_ms": first_call * 1000,
        "median_ms": statistics.median(times) * 1000,
        "worst_ms": max(times) * 1000,
        "deep_ms": deep * 1000,
        "deep_pages": deep_pages,
        "plan": plan,
    }


def _size(engine: Engine, url: str) -> int:
    if engine.dialect.name == "postgresql":
        with engine.connect() as db:
            return int(db.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    path = archive_engine.sqlite_path(url)
    assert path is not None
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def write_bench(
    kind: str, fresh: Callable[[], str], total_tasks: int, say: Say
) -> list[dict[str, Any]]:
    """Each shape into a fresh database (`fresh` makes one): its growth is the shape's."""
    out = []
    for shape, tasks, per_batch in (("seed-000", 9, 100), ("1,000 tasks", 1000, 1)):
        url = fresh()
        engine = archive_engine.connect(url)
        size_before = _size(engine, url)
        jobs = max(per_batch, total_tasks // tasks)
        created = int(time.time() * 1000)
        batches = [
            [_archived(f"{shape[:4]}{b:010}{j:012}", tasks, created + b) for j in range(per_batch)]
            for b in range(jobs // per_batch)
        ]
        started = time.perf_counter()
        for batch in batches:
            writer.write(engine, batch)
        seconds = time.perf_counter() - started
        written = len(batches) * per_batch * tasks
        size = _size(engine, url) - size_before
        row: dict[str, Any] = {
            "db": kind,
            "shape": shape,
            "tasks": written,
            "tasks_per_s": written / seconds,
            "bytes_per_task": size / written,
        }
        say(
            f"{kind} {shape}: {written:,} tasks in {seconds:.1f} s, "
            f"{row['tasks_per_s']:,.0f} tasks/s ({row['tasks_per_s'] / PEAK:.1f}x the peak), "
            f"{row['bytes_per_task']:,.0f} B a task"
        )
        out.append(row)
        engine.dispose()
    return out


def render(lists: list[dict[str, Any]], writes: list[dict[str, Any]]) -> str:
    lines = [
        "| archive | jobs | first page: first call | median of 20 | worst | pages deep: time |",
        "|---|---|---|---|---|---|",
    ]
    for r in lists:
        lines.append(
            f"| {r['db']} | {r['rows']:,} | {r['first_call_ms']:.1f} ms | "
            f"{r['median_ms']:.1f} ms | {r['worst_ms']:.1f} ms | "
            f"{r['deep_pages']}: {r['deep_ms']:.1f} ms |"
        )
    lines += [
        "",
        "| archive | jobs of | tasks/s | x the 1,667/s peak | bytes a task | a day at 50M |",
        "|---|---|---|---|---|---|",
    ]
    for r in writes:
        day = r["bytes_per_task"] * TASKS_A_DAY / 2**30
        lines.append(
            f"| {r['db']} | {r['shape']} | {r['tasks_per_s']:,.0f} | "
            f"{r['tasks_per_s'] / PEAK:.1f} | {r['bytes_per_task']:,.0f} B | {day:,.1f} GiB |"
        )
    hot = PEAK * HOT_SECONDS  # an hour at the peak rate: what Redis holds at most
    lines += [
        "",
        f"| finished jobs | Redis: an hour hot at {PEAK:,} tasks/s ({hot / 1e6:.1f}M tasks) |",
        "|---|---|",
    ]
    for shape, per_task in BYTES_PER_FINISHED_TASK.items():
        lines.append(f"| {shape} ({per_task} B a task) | {hot * per_task / 2**30:.2f} GiB |")
    return "\n".join(lines)


def main(quick: bool, rows: int | None, say: Say) -> int:
    rows = rows or (100_000 if quick else 10_000_000)
    total_tasks = 20_000 if quick else 200_000
    lists: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    with databases(fsync=True) as found:
        if len(found) < 2:
            say("no PostgreSQL server binaries: SQLite alone")
        for kind, fresh in found:
            writes += write_bench(kind, fresh, total_tasks, say)
        for kind, fresh in found:
            lists.append(list_bench(kind, fresh(), rows, say))
    say("")
    say(render(lists, writes))
    return 0
