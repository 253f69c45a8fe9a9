"""The read models: status, list, history, results and progress, and the leader's small reads."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from jobcenter.errors import (
    NoResult,
    NotFound,
)
from jobcenter.model import codec
from jobcenter.model.states import TERMINAL_TASK_STATES, JobState, TaskState
from jobcenter.model.tags import has_tag, read_tags

from ..keyspace import schema
from ..keyspace.packed import HISTORY_PAGE, STAMP_FIELDS, JobRecords
from ..keyspace.records import TaskRecord
from ..keyspace.schema import JobField, TaskField
from ..notifications import view as notifications_view
from ..server.replies import seconds, text
from .attempts import unpack_input
from .base import StoreBase

log = logging.getLogger(__name__)

STATUS_PAGE = 10_000  # task fields per read of `status`: a job of ~1,000 tasks in one read
LIST_PAGE_MIN = 100  # index entries per page when `list` checks several filters per job
LIST_SCAN_MAX = 10_000  # index entries one `list` reads per shard at most
UNFINISHED = (JobState.PENDING, JobState.RUNNING)  # the job states the active index holds


@dataclass(frozen=True)
class JobProgress:
    """A job's state and how many of its tasks have not ended yet."""

    state: JobState
    total: int
    left: int

    @property
    def finished(self) -> int:
        return self.total - self.left


class JobQuery(TypedDict, total=False):
    """The filters of Store.list_jobs, for the callers that hand them on."""

    owner: str | None
    state: str | None
    schedule_id: str | None
    tag: str | None
    since: float | None
    until: float | None
    name: str | None
    limit: int
    before: tuple[int, str] | None


class Reads(StoreBase):
    """The reads: status, list, history, results, progress, and the leader's small reads."""

    # -- reads ----------------------------------------------------------------------------

    def job_state(self, job_id: str) -> JobState | None:
        """The job's state; None when there is no such job (never submitted, or expired)."""
        raw = self.redis.hget(self.keys.job(job_id).job, JobField.STATE)
        return None if raw is None else JobState(raw.decode())

    def job_owner(self, job_id: str) -> str | None:
        """The job's owner (None: it has none); NotFound when there is no such job."""
        state, owner = self.job_values(job_id, [JobField.STATE, JobField.OWNER])
        if state is None:
            raise NotFound.job(job_id, self.settings.namespace)
        return text(owner) or None

    def active_job_ids(self, shard: int) -> list[str]:
        """The jobs not finished yet in `shard` (what recovery walks): the active index, and
        when the pending and running indexes count other jobs than it (Redis lost a key of
        one of them), theirs too, so a job left in either is still found."""
        keys = self.keys
        indexes = [keys.active(shard), *(keys.state_jobs(shard, s) for s in UNFINISHED)]
        pipe = self.redis.pipeline(transaction=False)
        for index in indexes:
            pipe.zcard(index)
        active, *others = pipe.execute()
        read = indexes[:1] if active == sum(others) else indexes
        ids = [raw.decode() for index in read for raw in self.redis.zrange(index, 0, -1)]
        return list(dict.fromkeys(ids))  # in order, each once

    def expired_leases(self, shard: int, limit: int) -> list[tuple[str, int]]:
        """Up to `limit` (job id, task index) attempts whose lease ended by Redis TIME now."""
        key = self.keys.leases(shard)
        members = self.redis.zrangebyscore(key, "-inf", self.now_ms(), 0, limit)
        return [(j, int(i)) for j, i in (m.decode().split("|") for m in members)]

    def keep_hashtables(self, shard: int) -> None:
        """Make the shard's metrics and learned-estimates hashes hash tables, not listpacks
        whose every field read scans them whole (hashtables.lua; recovery rule 10)."""
        keys = [self.keys.metrics(shard), self.keys.estimates(shard)]
        self.scripts.run("hashtables", keys, [])

    def has_frontier(self, job_id: str) -> bool:
        """Whether the job has tasks released but not yet published (a `continue` is due)."""
        return bool(self.redis.exists(self.keys.job(job_id).frontier))

    def queued_since(self, job_id: str, indexes: Sequence[str]) -> list[int | None]:
        """When each task was queued (ms), None where never."""
        raw = self.redis.hmget(
            self.keys.job(job_id).tasks, [TaskField.QUEUED_AT.of(i) for i in indexes]
        )
        return [None if v is None else int(v) for v in raw]

    def node_heartbeats(self) -> dict[str, float]:
        """Each node's last sign of life (ms): a heartbeat of any of its workers, or the
        presence their rq children keep (mark_node_present)."""
        pairs = self.redis.zrange(self.keys.nodes(), 0, -1, withscores=True)
        return {name.decode(): score for name, score in pairs}

    def job_fields(self, job_id: str) -> dict[str, bytes]:
        raw = self.redis.hgetall(self.keys.job(job_id).job)
        return {k.decode(): v for k, v in raw.items()}

    def job_fields_and_first_task(self, job_id: str) -> tuple[dict[str, bytes], bool]:
        """The job's fields, and whether its tasks hash holds task 0 (the first one written:
        without it, once written, Redis lost the tasks; lost.lua), in one round trip."""
        jk = self.keys.job(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(jk.job)
        pipe.hexists(jk.tasks, TaskField.STATE.of(0))
        raw, first = pipe.execute()
        return {k.decode(): v for k, v in raw.items()}, bool(first)

    def settle_lost(self, job_id: str) -> str | None:
        """Settle a job whose keys Redis lost (lost.lua): the job's state now, or None when
        nothing of it was lost."""
        reply = self._job_call("lost", job_id, [])
        return text(reply[1]) if int(reply[0]) == 0 else None

    def status(self, job_id: str) -> dict[str, Any]:
        """The job and each task, in the shape `status --json` prints (docs: the CLI reference)."""
        job = self.job_hash(job_id)  # Redis's, or the archive's once Redis let the job go
        if not job:
            raise NotFound.job(job_id, self.settings.namespace)
        stamp = (job.get(JobField.PACKED), job.get(JobField.SWAPS))
        tasks_raw = self.records(job_id, stamp).every_field(STATUS_PAGE)
        records = TaskRecord.of_every_task(tasks_raw)
        tasks: dict[str, Any] = {}
        if JobField.SPEC in job:  # not fully split: tasks never written show the job's outcome
            state = {b"cancelled": b"cancelled", b"failed": b"failed"}.get(
                job[JobField.STATE], b"waiting"
            )
            unwritten = TaskRecord.from_fields(
                {
                    TaskField.STATE: state,
                    TaskField.ERROR: job.get(JobField.ERROR),
                    TaskField.FINISHED_AT: job.get(JobField.FINISHED_AT),
                }
            )
            spec = codec.unpack(job[JobField.SPEC])
            for i, t in enumerate(spec["tasks"]):  # type: ignore[index]
                tasks[t["id"]] = _task_view(records.get(str(i), unwritten))
        else:
            parked = self.parked_limits(job_id, records)
            for index in sorted(records, key=int):
                record = records[index]
                tasks[record.id or index] = _task_view(record, parked.get(index))
        return {
            "id": job_id,
            "name": text(job.get(JobField.NAME)),
            "owner": text(job.get(JobField.OWNER)),
            "state": text(job.get(JobField.STATE)),
            "created_at": seconds(job.get(JobField.CREATED_AT)),
            "finished_at": seconds(job.get(JobField.FINISHED_AT)),
            "error": text(
                job.get(JobField.ERROR)
            ),  # why the job itself ended (a cancel, lost keys)
            "schedule_id": text(job.get(JobField.SCHEDULE_ID)) or None,
            "fire_time": float(fire) if (fire := job.get(JobField.FIRE_TIME)) else None,
            "tags": read_tags(text(job.get(JobField.TAGS))),
            "paused_at": seconds(job.get(JobField.PAUSED)),
            "late_at": seconds(job.get(JobField.LATE)),
            "tasks": tasks,
            "notifications": notifications_view(self.redis, self.keys, job_id, job),
        }

    def parked_limits(self, job_id: str, tasks: dict[str, TaskRecord]) -> dict[str, str]:
        """Of a job's queued tasks with limits, those parked waiting for a full one: index ->
        the limit in words ("pool gpu", "max_running", "concurrency key acme")."""
        queued = [i for i, t in tasks.items() if t.limited and t.state == TaskState.QUEUED]
        if not queued:
            return {}
        wanted = [f"{schema.LimitField.PARKED_AT}{job_id}|{i}" for i in queued]
        entries = self.redis.hmget(self.keys.job(job_id).limits, wanted)
        return {
            i: _limit_in_words(entry.decode().split("|")[1])
            for i, entry in zip(queued, entries, strict=True)
            if entry is not None
        }

    def task_index(self, job_id: str, task_id: str) -> int:
        """The index of the task called `task_id` (a map instance: `<task>[<i>]`), read
        by scanning the job's task ids; NotFound if the job or the task is not there."""
        ids = self.task_field(job_id, TaskField.ID)
        for index, tid in ids.items():
            if tid == task_id:
                return int(index)
        if self.job_values(job_id, [JobField.STATE])[0] is None:
            raise NotFound.job(job_id, self.settings.namespace)
        raise NotFound(f"job {job_id} has no task {task_id!r}")

    def result(self, job_id: str, task_id: str) -> Any:
        """What the task returned (a mapped task: the list of its instances' results, in
        element order). NotFound for an unknown job or task, NoResult for a task that has
        not succeeded (yet)."""
        index = self.task_index(job_id, task_id)
        records = self.records(job_id)  # the tasks hash, or the finished job's packed record
        state, raw, instances = records.values(
            [
                TaskField.STATE.of(index),
                TaskField.RESULT.of(index),
                TaskField.MAP_INSTANCES.of(index),
            ]
        )
        if text(state) != TaskState.SUCCEEDED:
            ended = text(state) in TERMINAL_TASK_STATES  # it will never have one
            raise NoResult(
                f"task {task_id!r} of job {job_id} has no result"
                + (f": it ended {text(state)}" if ended else f" yet: it is {text(state)}")
            )
        if instances is not None:
            first, count = map(int, instances.split(b"|")[:2])
            fields = [TaskField.RESULT.of(k) for k in range(first, first + count)]
            return unpack_input(records.values(fields) if fields else [])
        return unpack_input(raw)

    def results(self, job_id: str) -> dict[str, Any]:
        """Every stored result by task id (a mapped task: its instances' results, in element
        order), read with HSCAN: what a whole job returned, in a few reads."""
        records = self.records(job_id)  # the tasks hash, or the finished job's packed record
        raw = records.field_bytes(TaskField.RESULT)
        fields = self.task_fields(job_id, TaskField.ID, TaskField.MAP_INSTANCES)
        ids = fields[TaskField.ID]
        out = {ids[index]: unpack_input(value) for index, value in raw.items() if index in ids}
        for index, instances in fields[TaskField.MAP_INSTANCES].items():
            first, count = map(int, instances.split("|")[:2])
            out[ids[index]] = [unpack_input(raw.get(str(k))) for k in range(first, first + count)]
        return out

    def progress(self, job_id: str) -> JobProgress:
        """The job's state and task counters: three fields of the job hash, whatever the
        job's size (what `wait` and `submit --wait` poll)."""
        state, total, left = self.job_values(
            job_id, [JobField.STATE, JobField.TASKS, JobField.LEFT]
        )
        if state is None:
            raise NotFound.job(job_id, self.settings.namespace)
        return JobProgress(JobState(state.decode()), int(total or 0), int(left or 0))

    def list_jobs(
        self,
        *,
        owner: str | None = None,
        state: str | None = None,
        schedule_id: str | None = None,
        tag: str | None = None,
        since: float | None = None,
        until: float | None = None,
        name: str | None = None,
        limit: int = 100,
        before: tuple[int, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Newest first: job summaries, filtered by owner, state, schedule, tag (`key=value`),
        name and creation time (epoch seconds, since inclusive, until not). Each filter but
        the name has an index the transitions keep, so one filter reads about `limit`
        entries per shard; several read the smallest of their indexes in pages, at most
        LIST_SCAN_MAX entries per shard (a warning says when that cut the list short).
        `before` (created ms, id) of the last job of a page: the next page. With an archive,
        its page of the same filters is merged in: a job in both shows once, as Redis holds
        it. (The archive keeps no tag index: a list by tag reads Redis alone.)"""
        if limit <= 0:
            return []
        low = "-inf" if since is None else int(since * 1000)
        if until is not None:  # the window's end is a cursor no job is at
            before = min(before or (int(until * 1000), ""), (int(until * 1000), ""))
        rows: list[dict[str, Any]] = []
        for shard in range(self.keys.shards):
            rows += self._list_shard(
                shard, owner, state, schedule_id, tag, low, limit, before, name
            )
        if self.archive_url() and not tag:
            held = {row["id"] for row in rows}
            rows += [
                summary_row(job_id, [fields.get(f) for f in SUMMARY_FIELDS])
                for job_id, fields in self.archive_reader().page(
                    owner=owner,
                    state=state,
                    schedule_id=schedule_id,
                    name=name,
                    since_ms=None if since is None else int(since * 1000),
                    before=before,
                    limit=limit,
                )
                if job_id not in held
            ]
        rows.sort(key=lambda row: (row["created_at"], row["id"]), reverse=True)
        return rows[:limit]

    def _list_shard(
        self,
        shard: int,
        owner: str | None,
        state: str | None,
        schedule_id: str | None,
        tag: str | None,
        low: int | str,
        limit: int,
        before: tuple[int, str] | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        index = self.job_index(shard, owner, state, schedule_id, low, tag)
        high: int | str = "+inf" if before is None else before[0]
        page = limit
        if name or sum(1 for value in (owner, state, schedule_id, tag) if value) > 1:
            page = max(limit, LIST_PAGE_MIN)  # the other filters are checked per job
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()  # a job added while we page shifts the pages
        read = 0
        while len(rows) < limit and read < LIST_SCAN_MAX:
            count = min(page, LIST_SCAN_MAX - read)
            ids = self.redis.zrevrangebyscore(index, high, low, start=read, num=count)
            read += len(ids)
            fresh = [job_id for job_id in (i.decode() for i in ids) if job_id not in seen]
            seen.update(fresh)
            for row in self._summaries(fresh):
                if (
                    (not owner or row["owner"] == owner)
                    and (not state or row["state"] == state)
                    and (not schedule_id or row["schedule_id"] == schedule_id)
                    and (not tag or has_tag(row["tags"], tag))
                    and (not name or row["name"] == name)
                    and (before is None or (round(row["created_at"] * 1000), row["id"]) < before)
                ):
                    rows.append(row)
            if len(ids) < count:
                return rows[:limit]
        if len(rows) < limit and read >= LIST_SCAN_MAX:
            log.warning(
                "list: read the newest %d jobs of the smallest matching index and %d of them "
                "match every filter; narrow the search with --since",
                read,
                len(rows),
            )
        return rows[:limit]

    def job_index(
        self,
        shard: int,
        owner: str | None,
        state: str | None,
        schedule_id: str | None,
        low: int | str = "-inf",
        tag: str | None = None,
    ) -> str:
        """The shard's job index to walk for these filters: the smallest (in jobs created
        since `low` ms) of those the transitions keep for them, all jobs when none is set.
        A job read from it may still fail the other filters."""
        keys = self.keys
        candidates = [
            index
            for value, index in (
                (owner, keys.owner_jobs(shard, owner or "")),
                (state, keys.state_jobs(shard, state or "")),
                (schedule_id, keys.schedule_jobs(shard, schedule_id or "")),
                (tag, keys.tag_jobs(shard, tag or "")),
            )
            if value
        ]
        if len(candidates) < 2:
            return candidates[0] if candidates else keys.jobs(shard)
        pipe = self.redis.pipeline(transaction=False)
        for index in candidates:
            pipe.zcount(index, low, "+inf")
        return min(zip(pipe.execute(), candidates, strict=True))[1]

    def _summaries(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The list view of each job still there (one expired since the index read is left
        out), in the order given."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(self.keys.job(job_id).job, SUMMARY_FIELDS)
        return [
            summary_row(job_id, values)
            for job_id, values in zip(job_ids, pipe.execute(), strict=True)
            if values[2] is not None  # its state: gone when the job expired
        ]

    def task_fields(self, job_id: str, *fields: TaskField) -> dict[TaskField, dict[str, str]]:
        """field -> (task index -> value) for one job's tasks."""
        records = self.records(job_id)
        return {field: records.field_of_every_task(field) for field in fields}

    def task_field(self, job_id: str, field: TaskField) -> dict[str, str]:
        """task index -> value of one field, for one job's tasks."""
        return self.task_fields(job_id, field)[field]

    def history(
        self, job_id: str, start: int = 0, count: int | None = None
    ) -> list[dict[str, Any]]:
        """Finished attempts of every task, oldest first, from the `start`th on: `count` of
        them at most, or all that are left. Read HISTORY_PAGE entries per command."""
        state, packed, swaps = self.job_values(job_id, [JobField.STATE, *STAMP_FIELDS])
        if state is None:
            raise NotFound.job(job_id, self.settings.namespace)
        records = self.records(job_id, (packed, swaps))
        out: list[dict[str, Any]] = []
        while count is None or len(out) < count:
            want = HISTORY_PAGE if count is None else min(HISTORY_PAGE, count - len(out))
            first = start + len(out)
            page = self._history_page(records, first, first + want - 1)
            out += page
            if len(page) < want:
                break
        return out

    def _history_page(self, records: JobRecords, first: int, last: int) -> list[dict[str, Any]]:
        rows = [raw.decode().split("\t", 6) for raw in records.history(first, last)]
        indexes = sorted({row[0] for row in rows})
        names = records.values([TaskField.ID.of(i) for i in indexes]) if indexes else []
        ids = {i: text(name) or i for i, name in zip(indexes, names, strict=True)}
        out = []
        for index, attempt, state, handler, started, finished, error in rows:
            out.append(
                {
                    "task": ids[index],
                    "attempt": int(attempt),
                    "state": state,
                    "handler": handler or None,
                    "started_at": seconds(started or None),
                    "finished_at": seconds(finished or None),
                    "error": error or None,
                }
            )
        return out


SUMMARY_FIELDS = (
    JobField.NAME, JobField.OWNER, JobField.STATE, JobField.CREATED_AT, JobField.FINISHED_AT,
    JobField.SCHEDULE_ID, JobField.FIRE_TIME, JobField.TAGS, JobField.PAUSED, JobField.LATE,
)  # fmt: skip


def summary_row(job_id: str, values: Sequence[bytes | None]) -> dict[str, Any]:
    """A job as `list` shows it, from its SUMMARY_FIELDS (Redis's hash, or the archive's)."""
    name, owner, state, created, finished, schedule_id, fire, tags, paused, late = values
    return {
        "id": job_id,
        "name": text(name),
        "owner": text(owner),
        "state": text(state),
        "created_at": seconds(created),
        "finished_at": seconds(finished),
        "schedule_id": text(schedule_id),
        "fire_time": float(fire) if fire is not None else None,
        "tags": read_tags(text(tags)),
        "paused_at": seconds(paused),
        "late_at": seconds(late),
    }


def _limit_in_words(limit_id: str) -> str:
    """A limit id ("p:gpu", "j:<job>", "k:<key>") as `status` shows it."""
    kind, name = limit_id[:2], limit_id[2:]
    if kind == schema.LimitKind.PAUSED:
        return "its job to be resumed"
    if kind == schema.LimitKind.POOL:
        return f"pool {name}"
    if kind == schema.LimitKind.JOB:
        return "max_running"
    return f"concurrency key {name}"


def _task_view(task: TaskRecord, waiting_for_limit: str | None = None) -> dict[str, Any]:
    """One task of `status`: the current attempt's fields (a new attempt clears the last
    one's error and finish time; `history` keeps them), when it was created, last changed
    and completed, and what a queued task waits for (a worker with its code, a slot of a
    full limit)."""
    return {
        "state": task.state,
        "attempts": task.attempts,
        "handler": task.handler,
        "queued_at": seconds(task.queued_at),
        "started_at": seconds(task.started_at),
        "finished_at": seconds(task.finished_at),
        "error": task.error,
        "progress": task.progress,
        "created_at": seconds(task.created_at),  # written to Redis by the split
        "updated_at": seconds(task.updated_at or task.created_at),  # last change of its fields
        "completed_at": (seconds(task.finished_at) if task.state in TERMINAL_TASK_STATES else None),
        "waiting_for": waiting_for(task),
        "waiting_for_limit": waiting_for_limit,
        "waiting_for_gate": waiting_for_gate(task),
        "awaiting": awaiting(task),
    }


# what an awaiting task's `aw:` kind letter says it waits for (_await.lua)
_AWAIT_KINDS = {"s": "signal", "j": "job", "c": "schedule", "k": "child"}


def awaiting(task: TaskRecord) -> dict[str, Any] | None:
    """An awaiting task (`wait_for:`, or a spawned child job): what it waits for (`kind`
    signal, job, schedule or child; `name`; `job`: the job it waits for, once known) and
    since when."""
    if task.awaits is None or task.state != TaskState.AWAITING:
        return None
    letter, _, name = task.awaits.split("|", 2)
    kind = _AWAIT_KINDS.get(letter, letter)
    job = name if kind in ("job", "child") else task.await_job if kind == "schedule" else None
    return {"kind": kind, "name": name, "job": job, "since": seconds(task.queued_at)}


def waiting_for_gate(task: TaskRecord) -> dict[str, Any] | None:
    """A queued task whose gate said no (gate_wait.lua): the gate, and since when."""
    return _queued_wait(task, task.gate_wait, "gate")


def waiting_for(task: TaskRecord) -> dict[str, Any] | None:
    """A queued task that workers gave back for want of its code (give_back.lua): the task
    name it waits for a worker with, and since when."""
    return _queued_wait(task, task.waiting_for, "task")


def _queued_wait(task: TaskRecord, raw: str | None, what: str) -> dict[str, Any] | None:
    """A queued task's "<since ms>|<name>" field as {what: name, "since": seconds}; None
    when the task is not queued or has none."""
    if raw is None or task.state not in (TaskState.QUEUED, TaskState.RETRY_WAIT):
        return None
    since, _, name = raw.partition("|")
    return {what: name, "since": int(since) / 1000}
