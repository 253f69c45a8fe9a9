"""Read the archive: one job as Redis last held it (its hash and packed record, decoded by
the same code as a compacted job in Redis), and lists of jobs newest first, a page at a time.
A page is read by keyset on (created_at, job_id) from the index of its filter's column
(tables.py), so the first page of a list over months costs what the last one does."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Select, and_, or_, select

from jobcenter.model import codec

from .tables import archived_jobs

PAGE_MAX = 10_000  # rows one list query reads at most
EXPORT_PAGE = 500  # rows per query of an export's walk, oldest first

Cursor = tuple[int, str]  # (created ms, job id) of the last job of a page


@dataclass(frozen=True)
class ArchivedRecord:
    """One archived job: its hash (field -> bytes) and its packed record."""

    job_id: str
    fields: dict[str, bytes]
    packed: bytes


def _fields(raw: bytes) -> dict[str, bytes]:
    unpacked = codec.unpack(bytes(raw))
    assert isinstance(unpacked, dict)
    return {str(k): bytes(v) for k, v in unpacked.items()}


class ArchiveReader:
    """The reads of the archive at one engine (storage/archive/engine.connect)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def job(self, job_id: str) -> ArchivedRecord | None:
        """The archived job `job_id`; None when the archive has no such job."""
        query = select(archived_jobs.c.fields, archived_jobs.c.packed).where(
            archived_jobs.c.job_id == job_id
        )
        with self.engine.connect() as db:
            row = db.execute(query).first()
        if row is None:
            return None
        return ArchivedRecord(job_id, _fields(row.fields), bytes(row.packed))

    def page(self, **filters: Any) -> list[tuple[str, dict[str, bytes]]]:
        """Up to `limit` archived jobs matching every filter given, newest first (by creation
        time, then id), older than `before`: (job id, its hash) each (page_query's filters)."""
        with self.engine.connect() as db:
            return [(r.job_id, _fields(r.fields)) for r in db.execute(self.page_query(**filters))]

    def page_query(
        self,
        *,
        owner: str | None = None,
        state: str | None = None,
        schedule_id: str | None = None,
        name: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        before: Cursor | None = None,
        limit: int = 100,
    ) -> Select[Any]:
        """The query of a page: the filters given, newest first, older than `before`. Each
        filter's column leads an index that goes on with (created_at, job_id), so the
        database reads the page's rows from it in order and stops after `limit`."""
        c = archived_jobs.c
        where: list[Any] = [
            column == value
            for column, value in (
                (c.owner, owner),
                (c.state, state),
                (c.schedule_id, schedule_id),
                (c.name, name),
            )
            if value
        ]
        if since_ms is not None:
            where.append(c.created_at >= since_ms)
        if until_ms is not None:
            where.append(c.created_at < until_ms)
        if before is not None:
            where.append(
                or_(c.created_at < before[0], and_(c.created_at == before[0], c.job_id < before[1]))
            )
        return (
            select(c.job_id, c.fields)
            .where(*where)
            .order_by(c.created_at.desc(), c.job_id.desc())
            .limit(min(max(limit, 0), PAGE_MAX))
        )

    def created_between(
        self, since_ms: int, until_ms: int, states: Sequence[str]
    ) -> Iterator[Cursor]:
        """(created ms, job id) of the archived jobs in `states` created in [since, until],
        oldest first, read a page at a time (what `export` walks)."""
        c = archived_jobs.c
        after: Cursor | None = None
        while True:
            where = [c.created_at >= since_ms, c.created_at <= until_ms, c.state.in_(states)]
            if after is not None:
                where.append(
                    or_(
                        c.created_at > after[0], and_(c.created_at == after[0], c.job_id > after[1])
                    )
                )
            query = (
                select(c.created_at, c.job_id)
                .where(*where)
                .order_by(c.created_at, c.job_id)
                .limit(EXPORT_PAGE)
            )
            with self.engine.connect() as db:
                rows = [(int(r.created_at), str(r.job_id)) for r in db.execute(query)]
            yield from rows
            if len(rows) < EXPORT_PAGE:
                return
            after = rows[-1]


__all__ = ["ArchiveReader", "ArchivedRecord", "Cursor"]
