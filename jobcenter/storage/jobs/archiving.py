"""A finished job's way to the archive (JOBCENTER_ARCHIVE_URL), on the Redis side: the jobs
waiting for it (each shard's archive-pending zset), what the archiver reads of them, and its
confirmation after the database committed (archived.lua), which starts their hot retention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobcenter.model.states import JobState

from ..keyspace import schema
from ..keyspace.schema import ArchiveStatusField, JobField
from .base import StoreBase

CURSOR_MOVED = schema.code("CURSOR_MOVED")


@dataclass(frozen=True)
class PendingJob:
    """What the archiver read of a finished, packed job waiting for the archive."""

    job_id: str
    fields: dict[str, bytes]  # the job hash
    record: bytes  # its packed record (keyspace/packed.py)

    @property
    def updated_at(self) -> bytes:
        return self.fields.get(JobField.UPDATED_AT, b"")


class Archiving(StoreBase):
    """The archive-pending jobs of a namespace and their confirmation."""

    def archive_backlog(self) -> tuple[int, int | None]:
        """Jobs waiting for the archive, and when the oldest of them finished (ms)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.zcard(self.keys.archive_pending(shard))
            pipe.zrange(self.keys.archive_pending(shard), 0, 0, withscores=True)
        replies = pipe.execute()
        count = sum(int(n) for n in replies[0::2])
        oldest = [int(first[0][1]) for first in replies[1::2] if first]
        return count, min(oldest) if oldest else None

    def archive_due(self, shard: int, finished_before_ms: int, limit: int) -> list[str]:
        """Up to `limit` jobs of `shard` pending since before `finished_before_ms`, oldest first."""
        raw = self.redis.zrangebyscore(
            self.keys.archive_pending(shard), "-inf", finished_before_ms, start=0, num=limit
        )
        return [r.decode() for r in raw]

    def archive_read(self, job_ids: Sequence[str]) -> tuple[list[PendingJob], list[str]]:
        """The jobs of `job_ids` ready for the archive (finished and packed), in one round
        trip; and those pending but finished without their packed record yet (their
        compaction is still to come). A finished job not pending is archived all the same:
        a process without the archive's URL finalized it (a cancel), with a TTL."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            jk = self.keys.job(job_id)
            pipe.zscore(self.keys.archive_pending(self.keys.job_shard(job_id)), job_id)
            pipe.hgetall(jk.job)
            pipe.get(jk.packed)
        replies = pipe.execute()
        ready: list[PendingJob] = []
        unpacked: list[str] = []
        for k, job_id in enumerate(job_ids):
            pending, raw, record = replies[3 * k : 3 * k + 3]
            fields = {name.decode(): value for name, value in raw.items()}
            state = fields.get(JobField.STATE)
            if state is None or not JobState(state.decode()).terminal:
                continue
            if record is None or JobField.PACKED not in fields:
                if pending is not None:
                    unpacked.append(job_id)
            else:
                ready.append(PendingJob(job_id, fields, record))
        return ready, unpacked

    def archive_confirm(self, jobs: Sequence[PendingJob]) -> dict[str, int]:
        """Tell Redis the archive committed `jobs` (archived.lua, one round trip): each gets
        its hot retention unless it changed since it was read. Code by job id."""
        hot_ms = int(self.settings.archive_hot_seconds * 1000)
        batch = self.scripts.batch()
        for job in jobs:
            extra = [self.keys.notifications(job.job_id), self.keys.deliveries(job.job_id)]
            args = [job.updated_at, hot_ms]
            self._job_call("archived", job.job_id, args, extra_keys=extra, batch=batch)
        replies = batch.execute()
        return {job.job_id: int(r[0]) for job, r in zip(jobs, replies, strict=True)}

    def archive_outcome(self, seen_ms: int, error: str | None = None) -> bool:
        """Record how an archive write went, seen at `seen_ms` (Redis time, read once it
        returned or failed): its error, the dashboard's warning, or None when it worked,
        which clears the warning. Processes archive side by side and their reports arrive
        in any order: one seen before the last one recorded changes nothing (False)."""
        args = [seen_ms, "" if error is None else error[:500] or "failed"]
        reply = self.scripts.run("archive_status", [self.keys.archive_status()], args)
        return int(reply[0]) == schema.code("OK")

    def archive_status(self) -> tuple[str, int] | None:
        """The archive's last failure (error, when in ms), or None when its last write worked."""
        raw = self.redis.hmget(
            self.keys.archive_status(), ArchiveStatusField.ERROR, ArchiveStatusField.AT
        )
        if raw[0] is None:
            return None
        return raw[0].decode(errors="replace"), int(raw[1] or 0)
