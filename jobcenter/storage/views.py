"""Read models for the dashboard: the reads the Store lacks, each typed and bounded.

Workers with their heartbeats, busy slots and owned segments (every shard's lease owners),
queue depths by priority, a job's graph, its live task states and its notifications, one
task's detail, a page of jobs, what the last recovery passes repaired. Every read is limited
by a page size, a named cap or the size of the one job it is about; nothing walks the keyspace.
"""

from __future__ import annotations

import contextlib
import heapq
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jobcenter.errors import NotFound
from jobcenter.model import codec
from jobcenter.model.reports import RecoveryReport
from jobcenter.model.spec import DEFAULT_QUEUE
from jobcenter.model.tags import has_tag, read_tags

from .keyspace.keys import LEADER_SEGMENT, NODE_QUEUE_PREFIX
from .keyspace.layout import Layout
from .keyspace.packed import STAMP_FIELDS, JobRecords
from .keyspace.records import TaskRecord
from .keyspace.schema import JobField, PayloadKey, TaskField
from .notifications import view as notifications_view
from .server.replies import seconds, text
from .server.system_queue import current_round, fetch_recovery_job
from .shard_leases import owners_of
from .store import Store, awaiting, waiting_for, waiting_for_gate

WORKERS_MAX = 500  # workers listed: more than a fleet we expect; the rest are only counted
LEASES_MAX = 10_000  # running attempts read to count each worker's busy slots
SEGMENTS_MAX = 50  # segments (queues, and the leader messages) whose shards' leases are read
PRIORITY_BANDS_MAX = 20  # distinct priorities listed per queue; more are summed as "other"
TASK_HISTORY_MAX = 5_000  # newest history entries searched for one task's attempts
JOBS_CHUNK = 200  # jobs read per round while filling a filtered page
JOBS_EXAMINED_MAX = 2_000  # a filtered page stops after this many jobs and offers "older"
PAGE_SIZE = 50  # jobs per page unless asked otherwise
PAGE_SIZE_MAX = 200
ARGS_PREVIEW_MAX = 2_000  # characters of a task's arguments (and of its result) shown
RESULT_PREVIEW_ITEMS = 100  # instance results read for a mapped task's preview
RECOVERY_ROUNDS = 4  # rq keeps a round's report for three intervals: the last few passes
RECOVERY = "recovery"  # the singleton's name (recovery.SINGLETON)

JOB_FIELDS = (
    JobField.NAME, JobField.OWNER, JobField.STATE, JobField.TASKS, JobField.LEFT,
    JobField.PRIORITY, JobField.QUEUE, JobField.CREATED_AT, JobField.STARTED_AT,
    JobField.FINISHED_AT, JobField.UPDATED_AT, JobField.SCHEDULE_ID, JobField.FIRE_TIME,
    JobField.ERROR, JobField.FAILED, JobField.CANCELLED, JobField.TAGS, JobField.PAUSED,
    JobField.LATE,
)  # fmt: skip


def _now(store: Store) -> float:
    return store.now_ms() / 1000


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


# -- jobs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSummary:
    id: str
    name: str | None
    owner: str | None
    state: str
    tasks: int
    left: int | None  # tasks not finished yet
    priority: int | None
    queue: str | None
    created_at: float | None
    started_at: float | None
    finished_at: float | None
    updated_at: float | None
    schedule_id: str | None
    error: str | None
    failed: int  # tasks failed for good
    cancelled: int
    fire_time: float | None = None  # when it was due (epoch seconds), if it has a fire time
    tags: dict[str, str] = field(default_factory=dict)
    paused_at: float | None = None
    late_at: float | None = None  # found past its sla (it may have finished since)


def job_summary(store: Store, job_id: str) -> JobSummary:
    """The job's own fields (not its spec, which may be large)."""
    values = store.job_values(job_id, JOB_FIELDS)
    return _summary(job_id, dict(zip(JOB_FIELDS, values, strict=True)))


def _summary(job_id: str, f: dict[str, bytes | None]) -> JobSummary:
    if f[JobField.STATE] is None:
        raise NotFound.job(job_id)
    return JobSummary(
        id=job_id,
        name=text(f[JobField.NAME]),
        owner=text(f[JobField.OWNER]),
        state=text(f[JobField.STATE]) or "",
        tasks=_int(f[JobField.TASKS]) or 0,
        left=_int(f[JobField.LEFT]),
        priority=_int(f[JobField.PRIORITY]),
        queue=text(f[JobField.QUEUE]),
        created_at=seconds(f[JobField.CREATED_AT]),
        started_at=seconds(f[JobField.STARTED_AT]),
        finished_at=seconds(f[JobField.FINISHED_AT]),
        updated_at=seconds(f[JobField.UPDATED_AT]),
        schedule_id=text(f[JobField.SCHEDULE_ID]),
        error=text(f[JobField.ERROR]),
        failed=_int(f[JobField.FAILED]) or 0,
        cancelled=_int(f[JobField.CANCELLED]) or 0,
        fire_time=float(fire) if (fire := f[JobField.FIRE_TIME]) is not None else None,
        tags=read_tags(text(f.get(JobField.TAGS))),
        paused_at=seconds(f.get(JobField.PAUSED)),
        late_at=seconds(f.get(JobField.LATE)),
    )


_NOTIFY_FIELDS = (JobField.STATE, JobField.NOTIFY_TO, JobField.NOTIFY_ON, JobField.WEBHOOK)


def job_notifications(store: Store, job_id: str) -> dict[str, Any] | None:
    """The job's `notifications`, as `status` shows them (each channel's delivery and the
    latest attempts), but the webhook's origin alone: its path may be a credential, as a
    chat service's incoming-webhook URL is. None when its spec has no `notify:`."""
    values = store.job_values(job_id, _NOTIFY_FIELDS)
    if values[0] is None:
        raise NotFound.job(job_id)
    job = {str(name): value for name, value in zip(_NOTIFY_FIELDS, values, strict=True) if value}
    found = notifications_view(store.redis, store.keys, job_id, job)
    if found and found["webhook"]:
        url = urlsplit(found["webhook"])
        found["webhook"] = f"{url.scheme}://{url.netloc.rpartition('@')[2]}"  # no user:password
    return found


@dataclass(frozen=True)
class JobFilter:
    owner: str | None = None
    state: str | None = None
    schedule_id: str | None = None
    name: str | None = None  # a part of the name, any case
    tag: str | None = None  # key=value

    @property
    def narrows(self) -> bool:
        """Whether some job read from the index may not match: the name has no index, and
        of several indexed filters only one index is walked."""
        indexed = [f for f in (self.owner, self.state, self.schedule_id, self.tag) if f]
        return bool(self.name) or len(indexed) > 1

    def admits(self, job: JobSummary) -> bool:
        return (
            (not self.owner or job.owner == self.owner)
            and (not self.state or job.state == self.state)
            and (not self.schedule_id or job.schedule_id == self.schedule_id)
            and (not self.name or self.name.lower() in (job.name or "").lower())
            and (not self.tag or has_tag(job.tags, self.tag))
        )


@dataclass(frozen=True)
class JobsPage:
    jobs: list[JobSummary]
    older: str | None  # cursor of the next page (older jobs); None: no more
    examined: int  # index entries looked at for this page
    stopped_early: bool  # a filtered page hit JOBS_EXAMINED_MAX before it filled


def _cursor(score: float, job_id: str) -> str:
    return f"{int(score)}:{job_id}"


def _parse_cursor(cursor: str | None) -> tuple[float, str] | None:
    if not cursor:
        return None
    score, _, job_id = cursor.partition(":")
    try:
        return float(score), job_id
    except ValueError:
        raise ValueError(f"bad page cursor {cursor!r}") from None


def jobs_page(
    store: Store, filters: JobFilter, before: str | None = None, size: int = PAGE_SIZE
) -> JobsPage:
    """Jobs newest first, `size` at most, older than the cursor `before`. The smallest index
    of the owner, state and schedule filters is walked; a filter it cannot apply is checked
    on at most JOBS_EXAMINED_MAX jobs per page."""
    if not 1 <= size <= PAGE_SIZE_MAX:
        raise ValueError(f"page size must be 1-{PAGE_SIZE_MAX}, got {size}")
    after = _parse_cursor(before)
    page = _redis_jobs_page(store, filters, after, size)
    return _with_archive(store, filters, after, size, page) if store.archive_url() else page


def _with_archive(
    store: Store, filters: JobFilter, after: tuple[float, str] | None, size: int, page: JobsPage
) -> JobsPage:
    """Redis's page merged with the archive's of the same filters, newest first, each job
    once (as Redis holds it). The next page starts after the newest point where either
    source may have more: the page's last job, where Redis stopped looking, the archive's
    last row read."""
    archived = store.archive_reader().page(
        owner=filters.owner,
        state=filters.state,
        schedule_id=filters.schedule_id,
        before=None if after is None else (int(after[0]), after[1]),
        limit=size,
    )
    held = {job.id for job in page.jobs}
    rows = page.jobs + [
        job
        for job_id, f in archived
        if job_id not in held
        and filters.admits(job := _summary(job_id, {n: f.get(n) for n in JOB_FIELDS}))
    ]
    key = {job.id: (round((job.created_at or 0) * 1000), job.id) for job in rows}
    rows.sort(key=lambda job: key[job.id], reverse=True)
    points: list[tuple[float, str]] = [key[rows[size - 1].id]] if len(rows) >= size else []
    if page.stopped_early and page.older:
        points.append(_parse_cursor(page.older) or (0, ""))
    if len(archived) == size:
        last_id, last = archived[-1]
        points.append((int(last[JobField.CREATED_AT]), last_id))
    cut = max(points, default=None)
    rows = [job for job in rows if cut is None or key[job.id] >= cut]
    older = None if cut is None else _cursor(*cut)
    return JobsPage(rows, older, page.examined, page.stopped_early and len(rows) < size)


def _redis_jobs_page(
    store: Store, filters: JobFilter, after: tuple[float, str] | None, size: int
) -> JobsPage:
    indexes = [
        store.job_index(shard, filters.owner, filters.state, filters.schedule_id, tag=filters.tag)
        for shard in range(store.keys.shards)
    ]
    chunk = JOBS_CHUNK if filters.narrows else size
    rows: list[JobSummary] = []
    examined = 0
    last: tuple[float, str] | None = after
    while len(rows) < size and examined < JOBS_EXAMINED_MAX:
        ids = _index_chunk(store, indexes, last, chunk)
        if not ids:
            return JobsPage(rows, None, examined, False)
        pipe = store.redis.pipeline(transaction=False)
        for _, job_id in ids:
            pipe.hmget(store.keys.job(job_id).job, JOB_FIELDS)
        for (score, job_id), values in zip(ids, pipe.execute(), strict=True):
            examined += 1
            last = (score, job_id)
            if values[2] is None:
                continue  # expired since the index was read
            job = _summary(job_id, dict(zip(JOB_FIELDS, values, strict=True)))
            if filters.admits(job):
                rows.append(job)
                if len(rows) == size:
                    break
        if len(ids) < chunk and last == ids[-1]:
            return JobsPage(rows, None, examined, False)  # the index has no older job
    assert last is not None
    return JobsPage(rows, _cursor(*last), examined, len(rows) < size)


def _index_chunk(
    store: Store, indexes: list[str], after: tuple[float, str] | None, count: int
) -> list[tuple[float, str]]:
    """The next `count` (score, job id) of the job indexes (one per shard), newest first,
    after the cursor."""
    merged: list[tuple[float, str]] = []
    for index in indexes:
        if after is None:
            batch = store.redis.zrevrange(index, 0, count - 1, withscores=True)
        else:  # jobs submitted in one batch share a millisecond: skip those already shown
            siblings = store.redis.zcount(index, after[0], after[0])
            batch = store.redis.zrevrangebyscore(
                index, after[0], "-inf", start=0, num=count + siblings, withscores=True
            )
        merged += [
            (score, member.decode())
            for member, score in batch
            if after is None or (score, member.decode()) < after
        ]
    return heapq.nlargest(count, merged)


# -- a job's graph, live states and one task ------------------------------------------------


@dataclass(frozen=True)
class JobGraph:
    job: JobSummary
    ids: list[str]  # task ids by index
    states: list[str]  # by index
    edges: list[tuple[int, int]]  # (parent, child) indexes
    edges_known: bool  # False for a succeeded job whose record was packed without its edges


def _unwritten_state(job_state: str) -> str:
    """The state `status` shows for a task its leader has not written yet."""
    return job_state if job_state in ("cancelled", "failed") else "waiting"


def job_graph(store: Store, job_id: str) -> JobGraph:
    """Every task's id and state and the DAG's edges: from the tasks hash (or the packed
    record) once the job is split, from its stored spec before. A map's instances are drawn
    as children of its source, and parents of the mapped task."""
    job = job_summary(store, job_id)
    n = job.tasks
    raw_spec = store.job_values(job_id, [JobField.SPEC])[0]
    if raw_spec is not None:  # not fully split yet
        spec: Any = codec.unpack(raw_spec)
        layout = Layout(spec)
        ids = [t["id"] for t in layout.tasks]
        written = store.records(job_id).values([TaskField.STATE.of(i) for i in range(len(ids))])
        default = _unwritten_state(job.state)
        states = [text(s) or default for s in written]
        edges = [(p, c) for p, kids in enumerate(layout.children) for c in kids]
        return JobGraph(job, ids, states, edges, True)
    per_task = (TaskField.ID, TaskField.STATE, TaskField.CHILDREN, TaskField.MAP_INSTANCES)
    fields = [f.of(i) for i in range(n) for f in per_task]
    records = store.records(job_id)
    # every split task has a payload; a succeeded job packed by jobcenter before its record
    # kept the edges has none: its edges are not known
    *values, first_payload = records.values([*fields, TaskField.PAYLOAD.of(0)])
    ids, states, edges = [], [], []
    maps: dict[int, range] = {}  # a mapped task -> its instances
    for i in range(n):
        task_id, state, children, expanded = values[4 * i : 4 * i + 4]
        ids.append(text(task_id) or str(i))
        states.append(text(state) or _unwritten_state(job.state))
        if children:
            edges += [(i, int(c)) for c in children.decode().split(",")]
        if expanded:  # "<first index>|<count>|..."
            first, count = map(int, expanded.decode().split("|")[:2])
            maps[i] = range(first, min(first + count, n))
    sources = records.values([TaskField.MAP_ARG.of(i) for i in maps])  # "<kwarg>=<source>"
    for instances, source in zip(maps.values(), sources, strict=True):
        if source:
            edges += [(int(source.decode().rpartition("=")[2]), k) for k in instances]
    return JobGraph(job, ids, states, edges, n == 0 or first_payload is not None)


@dataclass(frozen=True)
class LiveStates:
    state: str  # the job's
    finished_at: float | None
    states: list[str]  # every task's, by index


def live_states(store: Store, job_id: str) -> LiveStates:
    """What the job page polls: the job's state and each task's, in two short reads."""
    state, n, finished, packed, swaps = store.job_values(
        job_id, [JobField.STATE, JobField.TASKS, JobField.FINISHED_AT, *STAMP_FIELDS]
    )
    if state is None:
        raise NotFound.job(job_id)
    job_state = state.decode()
    default = _unwritten_state(job_state)
    records = store.records(job_id, (packed, swaps))
    written = records.values([TaskField.STATE.of(i) for i in range(int(n or 0))])
    return LiveStates(job_state, seconds(finished), [text(s) or default for s in written])


def job_state_now(store: Store, job_id: str) -> tuple[str, float | None]:
    """The job's state and finish time: what a live view reads besides the events."""
    state, finished = store.job_values(job_id, [JobField.STATE, JobField.FINISHED_AT])
    if state is None:
        raise NotFound.job(job_id)
    return state.decode(), seconds(finished)


@dataclass(frozen=True)
class Attempt:
    attempt: int
    state: str
    handler: str | None
    started_at: float | None
    finished_at: float | None
    error: str | None


@dataclass(frozen=True)
class TaskDetail:
    job_id: str
    index: int
    id: str
    state: str
    task: str | None  # the registered task name (None once a succeeded job was compacted)
    args: str | None  # its arguments, shortened
    attempts: int
    max_attempts: int | None
    handler: str | None
    queue: str | None
    queued_at: float | None
    started_at: float | None
    finished_at: float | None
    error: str | None  # with the traceback
    progress: str | None
    result: str | None = None  # what it returned (JSON, shortened); a mapped task's: a list
    history: list[Attempt] = field(default_factory=list)  # finished attempts, oldest first
    history_complete: bool = True  # False: only the newest TASK_HISTORY_MAX entries searched
    # what a queued task waits for, as `status --json` has it (None: nothing)
    waiting_for: dict[str, Any] | None = None  # a worker with its code
    waiting_for_limit: str | None = None  # a slot of a full pool or limit
    waiting_for_gate: dict[str, Any] | None = None  # a gate it requires to say yes
    awaiting: dict[str, Any] | None = None  # an awaiting task: a signal, a job, a child job


def task_detail(store: Store, job_id: str, index: int) -> TaskDetail:
    """One task: its fields, payload and every finished attempt of it."""
    job_state, n, job_queue, packed, swaps = store.job_values(
        job_id, [JobField.STATE, JobField.TASKS, JobField.QUEUE, *STAMP_FIELDS]
    )
    if job_state is None:
        raise NotFound.job(job_id)
    records = store.records(job_id, (packed, swaps))
    values = records.values([field.of(index) for field in TaskRecord.FIELDS])
    history_len = records.history_length()
    entries = records.history(-TASK_HISTORY_MAX, -1)
    if not 0 <= index < int(n or 0):
        raise NotFound(f"job {job_id} has no task #{index}")
    task = TaskRecord.from_fields(dict(zip(TaskRecord.FIELDS, values, strict=True)))
    task_id = task.id
    payload: Any = codec.unpack(task.payload) if task.payload is not None else None
    if task_id is None:  # not written by its leader yet: read it from the job's spec
        raw_spec = store.job_values(job_id, [JobField.SPEC])[0]
        if raw_spec is not None:
            t: Any = codec.unpack(raw_spec)["tasks"][index]  # type: ignore[index]
            task_id = t["id"]
            payload = {
                PayloadKey.TASK: t["task"],
                PayloadKey.ARGS: t.get("args", []),
                PayloadKey.KWARGS: t.get("kwargs", {}),
            }
    name, args = None, None
    if payload is not None:
        name = payload.get(PayloadKey.TASK)
        shown = {
            "args": payload.get(PayloadKey.ARGS, []),
            "kwargs": payload.get(PayloadKey.KWARGS, {}),
        }
        args = json.dumps(shown, default=repr)[:ARGS_PREVIEW_MAX]
    history = []
    result = _result_preview(records, task.result, task.map_instances)
    for raw in entries:
        i, attempt, state, handler, started, finished, error = raw.decode().split("\t", 6)
        if i == str(index):
            history.append(
                Attempt(
                    int(attempt),
                    state,
                    handler or None,
                    seconds(started or None),
                    seconds(finished or None),
                    error or None,
                )
            )
    parked = store.parked_limits(job_id, {str(index): task}).get(str(index))
    return TaskDetail(
        job_id=job_id,
        index=index,
        id=task_id or str(index),
        state=task.state or _unwritten_state(job_state.decode()),
        task=name,
        args=args,
        attempts=task.attempts,
        max_attempts=task.max_attempts or (1 if payload is not None else None),
        handler=task.handler,
        queue=task.queue or text(job_queue),
        queued_at=seconds(task.queued_at),
        started_at=seconds(task.started_at),
        finished_at=seconds(task.finished_at),
        error=task.error,
        progress=task.progress,
        result=result,
        history=history,
        history_complete=history_len <= TASK_HISTORY_MAX,
        waiting_for=waiting_for(task),
        waiting_for_limit=parked,
        waiting_for_gate=waiting_for_gate(task),
        awaiting=awaiting(task),
    )


def _result_preview(records: JobRecords, raw: bytes | None, instances: str | None) -> str | None:
    """A task's result as shortened JSON; a mapped task's: its first instances' results."""
    if instances is not None:
        first, count = map(int, instances.split("|")[:2])
        shown = range(first, first + min(count, RESULT_PREVIEW_ITEMS))
        values = records.values([TaskField.RESULT.of(k) for k in shown])
        value: Any = [codec.unpack(v) if v is not None else None for v in values]
    elif raw is not None:
        value = codec.unpack(raw)
    else:
        return None
    return json.dumps(value, default=repr)[:ARGS_PREVIEW_MAX]


# -- workers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerView:
    handler: str
    host: str | None
    pid: int | None
    node: str | None
    queues: list[str]
    slots: int | None  # its --concurrency
    busy: int  # attempts it holds a lease for
    last_seen: float  # last heartbeat (Redis TIME)
    alive: bool  # heartbeat within the worker timeout
    owns: dict[str, list[int]]  # segment -> the shards it holds a live lease on


@dataclass(frozen=True)
class SegmentLease:
    handler: str
    expires_in: float  # seconds until the lease runs out (Redis TIME); <= 0: ran out


@dataclass(frozen=True)
class SegmentView:
    """One segment of one shard: a queue's tasks there, or its leader messages (@leader)."""

    segment: str
    shard: int
    owners: list[SegmentLease]  # live leases: empty when no worker polls it (unowned)
    lapsed: list[SegmentLease]  # leases that ran out and were not taken over since


@dataclass(frozen=True)
class WorkersView:
    workers: list[WorkerView]  # newest heartbeat first, WORKERS_MAX at most
    registered: int  # handlers in the registry, listed or not
    running: int  # attempts holding a lease, cluster-wide
    busy_exact: bool  # False when more than LEASES_MAX attempts run (busy undercounted)
    now: float
    segments: list[SegmentView]  # by segment (@leader first), then shard
    segments_left: int  # segments past SEGMENTS_MAX, not read

    @property
    def unowned(self) -> list[SegmentView]:
        return [s for s in self.segments if not s.owners]


def workers(store: Store) -> WorkersView:
    """Registered workers with their heartbeat, queues, busy slots and owned segments; and
    the leases on every shard of the segments they serve."""
    keys = store.keys
    now = _now(store)
    pipe = store.redis.pipeline(transaction=False)
    pipe.zrevrange(keys.workers(), 0, WORKERS_MAX - 1, withscores=True)
    pipe.zcard(keys.workers())
    listed, registered = pipe.execute()
    pipe = store.redis.pipeline(transaction=False)
    for handler, _ in listed:
        pipe.hgetall(keys.worker_info(handler.decode()))
    infos = [{k.decode(): v.decode() for k, v in raw.items()} for raw in pipe.execute()]
    busy, running, exact = _busy_by_handler(store)
    served = sorted({q for info in infos for q in info.get("queues", "").split(",") if q})
    names = [LEADER_SEGMENT, *served] if listed else []
    segments = _segments(store, names[:SEGMENTS_MAX], now)
    owns: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for seg in segments:
        for lease in seg.owners:
            owns[lease.handler].setdefault(seg.segment, []).append(seg.shard)
    timeout = store.settings.worker_timeout_seconds
    rows = []
    for (raw_handler, seen_ms), info in zip(listed, infos, strict=True):
        handler = raw_handler.decode()
        seen = seen_ms / 1000
        rows.append(
            WorkerView(
                handler=handler,
                host=info.get("host"),
                pid=int(info["pid"]) if "pid" in info else None,
                node=info.get("node") or None,
                queues=[q for q in info.get("queues", "").split(",") if q],
                slots=int(info["concurrency"]) if "concurrency" in info else None,
                busy=busy.get(handler, 0),
                last_seen=seen,
                alive=now - seen <= timeout,
                owns=owns.get(handler, {}),
            )
        )
    left = max(0, len(names) - SEGMENTS_MAX)
    return WorkersView(rows, registered, running, exact, now, segments, left)


def _segments(store: Store, names: list[str], now: float) -> list[SegmentView]:
    """The leases on every shard of each segment in `names`: one pipeline, one read a key."""
    wanted = [(shard, name) for name in names for shard in range(store.keys.shards)]
    found = owners_of(store.redis, store.keys, wanted)
    out = []
    for shard, name in wanted:
        leases = [SegmentLease(x.handler, x.deadline_ms / 1000 - now) for x in found[shard, name]]
        owners = [x for x in leases if x.expires_in > 0]
        lapsed = [x for x in leases if x.expires_in <= 0]
        out.append(SegmentView(name, shard, owners, lapsed))
    return out


def _busy_by_handler(store: Store) -> tuple[dict[str, int], int, bool]:
    """Attempts holding a lease, counted by the handler that runs them (at most LEASES_MAX
    read); the total; and whether every one was read."""
    busy: dict[str, int] = defaultdict(int)
    total, exact = 0, True
    for shard in range(store.keys.shards):
        key = store.keys.leases(shard)
        count = store.redis.zcard(key)
        total += count
        exact = exact and count <= LEASES_MAX
        members = [m.decode() for m in store.redis.zrange(key, 0, LEASES_MAX - 1)]
        pipe = store.redis.pipeline(transaction=False)
        for member in members:
            job_id, index = member.split("|")
            pipe.hget(store.keys.job(job_id).tasks, TaskField.HANDLER.of(index))
        for handler in pipe.execute():
            if handler is not None:
                busy[handler.decode()] += 1
    return dict(busy), total, exact


# -- queues -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PriorityBand:
    priority: int
    ready: int
    head_wait: float | None  # seconds the task next in line has been ready


@dataclass(frozen=True)
class QueueView:
    name: str
    ready: int
    bands: list[PriorityBand]  # highest priority first, PRIORITY_BANDS_MAX at most
    retry_wait: int  # failed attempts waiting out their backoff
    next_retry_at: float | None
    head_wait: float | None  # the longest wait among the bands' next-in-line tasks


@dataclass(frozen=True)
class QueuesView:
    queues: list[QueueView]
    running: int
    dead_letters: int
    now: float


def known_queues(store: Store) -> list[str]:
    """Queues named by registered workers (live or not), node queues, and 'default': there
    is no registry of queue names, and finding them otherwise would mean a scan."""
    keys = store.keys
    names = {DEFAULT_QUEUE}
    pipe = store.redis.pipeline(transaction=False)
    for handler in store.redis.zrevrange(keys.workers(), 0, WORKERS_MAX - 1):
        pipe.hget(keys.worker_info(handler.decode()), "queues")
    for raw in pipe.execute():
        names.update(q for q in (text(raw) or "").split(",") if q)
    for node in store.redis.zrevrange(keys.nodes(), 0, WORKERS_MAX - 1):
        names.add(NODE_QUEUE_PREFIX + node.decode())
    return sorted(names)


def queues(store: Store, names: list[str] | None = None) -> QueuesView:
    """Depth by priority, retry waits and head-of-line wait of each queue."""
    now = _now(store)
    views = [_queue(store, name, now) for name in (names or known_queues(store))]
    pipe = store.redis.pipeline(transaction=False)
    for shard in range(store.keys.shards):
        pipe.zcard(store.keys.leases(shard))
        pipe.zcard(store.keys.dlq(shard))
    counts = pipe.execute()
    return QueuesView(views, sum(counts[0::2]), sum(counts[1::2]), now)


def _queue(store: Store, name: str, now: float) -> QueueView:
    keys = store.keys
    bands: dict[int, list[Any]] = {}  # priority -> [ready, head wait]
    retry_wait, next_retry = 0, None
    for shard in range(keys.shards):
        ready_key, delayed_key = keys.queue(shard, name), keys.delayed(shard, name)
        for priority, count, head in _bands(store, ready_key):
            band = bands.setdefault(priority, [0, None])
            band[0] += count
            waited = _head_wait(store, head, now)
            if waited is not None and (band[1] is None or waited > band[1]):
                band[1] = waited
        retry_wait += store.redis.zcard(delayed_key)
        first = store.redis.zrange(delayed_key, 0, 0, withscores=True)
        if first:
            due = first[0][1] / 1000
            next_retry = due if next_retry is None else min(next_retry, due)
    listed = [PriorityBand(p, b[0], b[1]) for p, b in sorted(bands.items(), reverse=True)]
    waits = [b.head_wait for b in listed if b.head_wait is not None]
    return QueueView(
        name=name,
        ready=sum(b.ready for b in listed),
        bands=listed[:PRIORITY_BANDS_MAX],
        retry_wait=retry_wait,
        next_retry_at=next_retry,
        head_wait=max(waits) if waits else None,
    )


def _bands(store: Store, key: str) -> list[tuple[int, int, str]]:
    """(priority, ready count, member next in line) per priority in a ready zset (score is
    -priority), walking one band per step, PRIORITY_BANDS_MAX + 1 steps at most."""
    out: list[tuple[int, int, str]] = []
    low: Any = "-inf"
    for _ in range(PRIORITY_BANDS_MAX + 1):
        head = store.redis.zrangebyscore(key, low, "+inf", start=0, num=1, withscores=True)
        if not head:
            break
        member, score = head[0]
        if len(out) == PRIORITY_BANDS_MAX:  # the rest in one band, at its top priority
            out.append((int(-score), store.redis.zcount(key, score, "+inf"), member.decode()))
            break
        out.append((int(-score), store.redis.zcount(key, score, score), member.decode()))
        low = f"({score}"
    return out


def _head_wait(store: Store, member: str, now: float) -> float | None:
    _, job_id, index = member.split("|", 3)[:3]  # a task with limits has "|<limits>" last
    queued = store.redis.hget(store.keys.job(job_id).tasks, TaskField.QUEUED_AT.of(int(index)))
    return None if queued is None else max(0.0, now - int(queued) / 1000)


def dead_letter_count(store: Store) -> int:
    return sum(store.redis.zcard(store.keys.dlq(s)) for s in range(store.keys.shards))


# -- recovery ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryRound:
    round: int
    due_at: float  # when the round began (round * interval)
    status: str  # rq's status of the round's job; "gone" when rq no longer keeps it
    started_at: float | None
    ended_at: float | None
    report: dict[str, Any] | None  # RecoveryReport.to_dict() of the pass
    error: str | None  # the pass raised
    repairs: int | None = None  # what the report counts as repairs


@dataclass(frozen=True)
class RecoveryView:
    interval: float
    holder: str | None  # the handler running a pass now
    last_round: int | None  # the last round a pass started
    rounds: list[RecoveryRound]  # newest first


def recovery(store: Store) -> RecoveryView:
    """The last passes' reports, as rq keeps them (its result of each round's job), and who
    holds the recovery lease now. `jobcenter recover --once` passes are not recorded."""
    keys = store.keys
    holder, last = store.redis.mget(keys.singleton(RECOVERY), keys.singleton_round(RECOVERY))
    interval = store.settings.recovery_interval_seconds
    now_round = current_round(store)
    rounds = []
    if not store.cluster:  # on a cluster the passes run without rq, which kept the reports
        for round_no in range(now_round, now_round - RECOVERY_ROUNDS, -1):
            rounds.append(_round(store, round_no, interval))
    return RecoveryView(interval, text(holder), _int(last), rounds)


def _round(store: Store, round_no: int, interval: float) -> RecoveryRound:
    due = round_no * interval
    job = fetch_recovery_job(store, round_no)
    if job is None:
        return RecoveryRound(round_no, due, "gone", None, None, None, None)
    result = job.latest_result()
    report = result.return_value if result is not None else None
    repairs = None
    if isinstance(report, dict):
        with contextlib.suppress(TypeError):  # a report from another version of jobcenter
            repairs = RecoveryReport(**report).repairs
    status = job.get_status(refresh=False)
    error = result.exc_string if result is not None else None
    return RecoveryRound(
        round=round_no,
        due_at=due,
        status=status.value if status is not None else "unknown",
        started_at=job.started_at.timestamp() if job.started_at else None,
        ended_at=job.ended_at.timestamp() if job.ended_at else None,
        report=report if isinstance(report, dict) else None,
        error=error,
        repairs=repairs,
    )
