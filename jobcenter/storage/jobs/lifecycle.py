"""A job's life after submit, as the leader steps it: publish, continue, compact, finalize,
cancel, revive, restore, delete and repair."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from jobcenter.errors import (
    raise_for_code,
)
from jobcenter.model.states import JobState

from ..keyspace import schema
from ..keyspace.packed import HISTORY_PAGE, STAMP_FIELDS, JobRecords
from ..keyspace.packed import encode as packed_encode
from ..keyspace.schema import JobField
from ..server.replies import text
from .base import StoreBase

RECORD_PART = 256 * 1024  # bytes of a packed record written per compact call
COMPACT_TRIES = 3  # reads of a job that keeps changing under its compaction (a retry)
# A finished job of at most this many tasks is compacted with the others of its batch: its
# tasks hash and history read whole in one pipeline for all of them, their records written
# in another (a one-task job's compaction was six round trips of its own).
COMPACT_BATCH_TASKS_MAX = 64
RESTORE_CHUNK = 5_000  # task fields + history entries written back per restore call
RESUME_CHUNK = 1_000  # parked tasks of a resumed job put back in their queues per call
JOB_GONE = schema.code("JOB_GONE")
CURSOR_MOVED = schema.code("CURSOR_MOVED")
WRONG_STATE = schema.code("WRONG_STATE")


class Lifecycle(StoreBase):
    """The leader's steps over a job's life: publish, continue, compact, finalize, cancel,
    revive, restore, delete, repair."""

    # -- the leader's steps ---------------------------------------------------------------

    def publish_tasks(
        self, job_id: str, handler: str, before: int, after: int, pairs: Sequence[Any]
    ) -> int:
        timeout = self.settings.lease_ms
        reply = self._job_call("publish_tasks", job_id, [handler, timeout, before, after, *pairs])
        return int(reply[0])

    def queue_roots(
        self, job_id: str, handler: str, before: int, after: int, last: bool, roots: Sequence[int]
    ) -> int:
        args = [handler, self.settings.lease_ms, before, after, int(last), *roots]
        return int(self._job_call("queue_roots", job_id, args)[0])

    def continue_frontier(self, job_id: str) -> int:
        """One bounded step of a job's pending releases/cascades; returns entries left."""
        reply = self._job_call("continue", job_id, [])
        return int(reply[1]) if reply[0] == 0 else 0

    def compact(self, job_id: str) -> bool:
        """Pack a finished job's tasks hash and history into its packed record and swap it
        in (compact.lua, the record in parts of RECORD_PART bytes). The job is read in
        bounded pages; each write checks it did not change since (else it is read again,
        COMPACT_TRIES times at most). True once packed; False when there is nothing to do
        (not finished, a cascade under way, packed already, gone)."""
        jk = self.keys.job(job_id)
        for _ in range(COMPACT_TRIES):
            state, updated_at, n, packed, swaps = self.redis.hmget(
                jk.job, JobField.STATE, JobField.UPDATED_AT, JobField.TASKS, *STAMP_FIELDS
            )
            if state is None or packed or not JobState(state.decode()).terminal:
                self.drop_leader_message("compact", job_id)
                return False
            records = JobRecords.read(self.redis, jk, (packed, swaps))
            history: list[bytes] = []
            while True:
                page = records.history(len(history), len(history) + HISTORY_PAGE - 1)
                history += page
                if len(page) < HISTORY_PAGE:
                    break
            record = packed_encode(records.every_field(), history, int(n or 0))
            code = self._write_record(job_id, updated_at, record)
            if code != CURSOR_MOVED:
                return code == 0
        return False

    def compact_many(self, job_ids: Sequence[str]) -> None:
        """compact() for many jobs in three round trips: the finished jobs of at most
        COMPACT_BATCH_TASKS_MAX tasks are read in one pipeline and their records written in
        another. A job that is bigger (a longer history, a record of several parts), not
        ready or changed between the read and the write (compact.lua checks, as for one
        job) goes through compact() alone."""
        jks = {job_id: self.keys.job(job_id) for job_id in job_ids}
        pipe = self.redis.pipeline(transaction=False)
        for jk in jks.values():
            pipe.hmget(jk.job, JobField.STATE, JobField.UPDATED_AT, JobField.TASKS, *STAMP_FIELDS)
        alone: list[str] = []  # compact() also drops the message of a job with nothing to do
        small: list[tuple[str, bytes, int]] = []
        for job_id, (state, updated_at, n, packed, _) in zip(job_ids, pipe.execute(), strict=True):
            tasks = int(n or 0)
            finished = state is not None and JobState(state.decode()).terminal
            if finished and not packed and tasks <= COMPACT_BATCH_TASKS_MAX:
                small.append((job_id, updated_at, tasks))
            else:
                alone.append(job_id)
        pipe = self.redis.pipeline(transaction=False)
        for job_id, *_ in small:
            pipe.hgetall(jks[job_id].tasks)
            pipe.lrange(jks[job_id].history, 0, HISTORY_PAGE - 1)
        read = pipe.execute()
        batch = self.scripts.batch()
        writing: list[str] = []
        for k, (job_id, updated_at, tasks) in enumerate(small):
            fields, history = read[2 * k], read[2 * k + 1]
            record = packed_encode({f.decode(): v for f, v in fields.items()}, history, tasks)
            if len(history) >= HISTORY_PAGE or len(record) > RECORD_PART:
                alone.append(job_id)  # read in pages, written in parts
                continue
            args = [updated_at, 0, 1, record, schema.PACKED_FORMAT]
            self._job_call("compact", job_id, args, with_meta=False, batch=batch)
            writing.append(job_id)
        for job_id, reply in zip(writing, batch.execute(), strict=True):
            if int(reply[0]) == CURSOR_MOVED:  # changed since the read (a retry): read again
                alone.append(job_id)
        for job_id in alone:
            self.compact(job_id)

    def _write_record(self, job_id: str, updated_at: bytes, record: bytes) -> int:
        parts = [record[k : k + RECORD_PART] for k in range(0, len(record), RECORD_PART)]
        written = 0
        parts = parts or [b""]
        for k, part in enumerate(parts):
            args = [updated_at, written, int(k == len(parts) - 1), part, schema.PACKED_FORMAT]
            code = int(self._job_call("compact", job_id, args, with_meta=False)[0])
            if code != 0:
                return code
            written += len(part)
        return 0

    def finalize(self, job_id: str) -> tuple[int, str | None]:
        """Close a job whose tasks all ended (normally done inline by the last transition)."""
        reply = self._job_call("finalize", job_id, [])
        return int(reply[0]), text(reply[1]) if len(reply) > 1 else None

    def cancel_step(
        self, job_id: str, from_client: bool = False, *, mode: str = "cancel", error: str = ""
    ) -> tuple[int, int]:
        """One bounded step of stopping a job: a new request (`from_client`, in `mode`
        'cancel' or 'abandon') or going on with the one under way. Returns (code, tasks
        still to visit)."""
        reply = self._job_call("cancel", job_id, [mode if from_client else "", error])
        code = int(reply[0])
        if code == JOB_GONE:
            raise_for_code(code, f"no job {job_id}")
        return code, int(reply[1]) if code == 0 else 0

    def stop_job(
        self, job_id: str, mode: str | None, *, error: str = "", steps: int | None = None
    ) -> None:
        """Stop a job in bounded cancel steps: a new request in `mode` ('cancel' or
        'abandon'), or with None the one under way; until every task was visited, a step
        refuses (the job ended), or `steps` calls were made (a leader's share per message).
        UnknownJob when there is no such job."""
        code, left = self.cancel_step(job_id, mode is not None, mode=mode or "", error=error)
        made = 1
        while code == 0 and left and (steps is None or made < steps):
            code, left = self.cancel_step(job_id)
            made += 1

    def pause_job(self, job_id: str) -> bool:
        """Pause a job (pause_job.lua): none of its tasks starts until it is resumed, its
        running attempts finish. False when it was paused already; WrongState once it has
        finished, UnknownJob when there is no such job."""
        code = int(self._job_call("pause_job", job_id, [])[0])
        finished = f"job {job_id} has finished: there is nothing to pause"
        raise_for_code(code, finished if code == WRONG_STATE else f"no job {job_id}")
        return code == 0

    def resume_job(self, job_id: str) -> bool:
        """Resume a paused job: its parked tasks go back into their queues, in their places
        (resume_job.lua, RESUME_CHUNK a call). False when it was not paused."""
        while True:
            reply = self._job_call("resume_job", job_id, [RESUME_CHUNK])
            raise_for_code(int(reply[0]), f"no job {job_id}")
            if int(reply[0]) != 0 or not int(reply[1]):
                return int(reply[0]) == 0

    def mark_late(self, job_id: str) -> bool:
        """Say once that the job is past its sla (mark_late.lua); False when it was said
        already or the job has finished."""
        code = int(self._job_call("mark_late", job_id, [], with_meta=False)[0])
        raise_for_code(code, f"no job {job_id}")
        return code == 0

    def release(self, handler: str, running: Sequence[tuple[str, int, str]]) -> int:
        """Give running attempts, (job, index, fencing token), back to their queues (a
        worker's forced shutdown)."""
        by_job: dict[str, list[int | str]] = defaultdict(list)
        for job_id, index, token in running:
            by_job[job_id] += [index, token]
        released = 0
        for job_id, pairs in by_job.items():
            reply = self._job_call("release", job_id, [handler, *pairs])
            released += int(reply[1]) if reply[0] == 0 else 0
        return released

    def repair(self, job_id: str, action: str, items: Sequence[Any], error: str = "") -> int:
        """Recovery's checked fixes (repair.lua); returns how many tasks were repaired."""
        return self.repair_counts(job_id, action, items, error)[0]

    def repair_counts(
        self, job_id: str, action: str, items: Sequence[Any], error: str = ""
    ) -> tuple[int, int]:
        """repair(), and of the tasks repaired how many failed for good."""
        reply = self._job_call("repair", job_id, [action, error, *items])
        return (int(reply[1]), int(reply[2])) if reply[0] == 0 else (0, 0)

    def resubmit(self, job_id: str, kind: str) -> bool:
        """Hand the job back to a leader for `kind` unless a message is pending already."""
        return int(self._job_call("resubmit", job_id, [kind])[0]) == 0

    def singleton(self, name: str, mode: str, holder: str, ms: int, round_no: int = 0) -> int:
        """Acquire/renew/release the singleton lease `name` (recovery, scheduler)."""
        keys = [self.keys.singleton(name), self.keys.singleton_round(name)]
        return int(self.scripts.run("singleton", keys, [mode, holder, ms, round_no])[0])

    def revive(
        self, job_id: str, roots: Sequence[int], resets: Sequence[tuple[int, Sequence[int]]]
    ) -> int | None:
        """Run failed `roots` again and put `resets` (ended tasks, each with its parents,
        parents first) back to waiting; returns how many tasks were revived, or None while
        a failure cascade is under way (finish it, then call again). Raises WrongState
        naming what is off. A compacted job is unpacked first (restore)."""
        args: list[int] = [len(roots), *roots]
        for index, parents in resets:
            args += [index, len(parents), *parents]
        return self._unpacked_call("revive", job_id, args)

    def clear(
        self,
        job_id: str,
        by: tuple[str, str],
        named: Sequence[int],
        tasks: Sequence[tuple[int, Sequence[int]]],
    ) -> int | None:
        """Put ended `tasks` (each with its parents, parents first) back to run again, by
        hand: `by` is (who, why), `named` the tasks the person named (refused when they
        cannot run again); clear.lua. Returns how many were cleared, or None while a
        cascade is under way (finish it, then call again). WrongState naming what is off."""
        args: list[Any] = [*by, len(named), *named]
        for index, parents in tasks:
            args += [index, len(parents), *parents]
        return self._unpacked_call("clear", job_id, args)

    def mark(
        self,
        job_id: str,
        index: int,
        outcome: str,
        result: bytes,
        by: tuple[str, str],
        resets: Sequence[tuple[int, Sequence[int]]],
    ) -> int | None:
        """Settle task `index` by hand as `outcome` (mark.lua); `resets`: for a task that
        had ended, the first ended tasks below it to decide again. Returns how many were
        reset, or None while a cascade is under way. WrongState naming what is off."""
        args: list[Any] = [index, outcome, result, *by]
        for task, parents in resets:
            args += [task, len(parents), *parents]
        return self._unpacked_call("mark", job_id, args)

    def _unpacked_call(self, name: str, job_id: str, args: Sequence[Any]) -> int | None:
        """A job script that needs the job's tasks hash (revive, clear, mark): a compacted
        job is unpacked first (restore), and once more if a leader compacted it again
        meanwhile (restore posts no compact message, so this ends)."""
        while True:
            self.restore(job_id)
            reply = self._job_call(name, job_id, args)
            if int(reply[0]) != WRONG_STATE or not self.records(job_id).packed:
                break
        raise_for_code(
            int(reply[0]), text(reply[1]) or "" if len(reply) > 1 else f"no job {job_id}"
        )
        return int(reply[1]) if reply[0] == 0 else None

    def delete(self, job_id: str, failed: Sequence[int]) -> None:
        """Remove a finished job and its index entries; WrongState if it is not finished."""
        jk = self.keys.job(job_id)
        shard = self.keys.job_shard(job_id)
        owner, schedule_id, tags = (
            text(v)
            for v in self.redis.hmget(jk.job, JobField.OWNER, JobField.SCHEDULE_ID, JobField.TAGS)
        )
        extra = [
            self.keys.jobs(shard),
            self.keys.owner_jobs(shard, owner) if owner else jk.job,
            self.keys.schedule_jobs(shard, schedule_id) if schedule_id else jk.job,
            self.keys.notifications(job_id),
            self.keys.deliveries(job_id),
            self.keys.task_logs(job_id),
            *(self.keys.tag_jobs(shard, tag) for tag in (tags or "").split(",") if tag),
        ]
        code = int(self._job_call("delete", job_id, list(failed), extra_keys=extra)[0])
        raise_for_code(code, f"job {job_id} is not finished: cancel it first")

    def restore(self, job_id: str) -> bool:
        """Unpack a compacted job back into its tasks hash and history (a retry needs
        them), in calls of at most RESTORE_CHUNK items; False when it was not packed."""
        records = self.records(job_id)
        if records.packed is None:
            return False
        pairs = list(records.packed.fields.items())
        entries = records.packed.history
        done = 0
        while True:
            chunk_pairs = pairs[done : done + RESTORE_CHUNK]
            room = RESTORE_CHUNK - len(chunk_pairs)
            first_entry = max(0, done - len(pairs))
            chunk_entries = entries[first_entry : first_entry + room] if room else []
            done_after = done + len(chunk_pairs) + len(chunk_entries)
            last = done_after >= len(pairs) + len(entries)
            flat = [x for pair in chunk_pairs for x in pair]
            args = [done, int(last), len(chunk_pairs), *flat, *chunk_entries]
            code = int(self._job_call("restore", job_id, args, with_meta=False)[0])
            if code != 0 or last:
                return code == 0
            done = done_after

    def drop_leader_message(self, kind: str, job_id: str) -> None:
        self.redis.zrem(self.keys.job(job_id).leader, f"{kind}|{job_id}")
