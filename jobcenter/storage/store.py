"""Typed methods over the Lua transitions, and the reads that status, list and history need.

The only module that talks to Redis for jobs and tasks. Every transition is one script call;
batches of calls for different jobs go in one pipeline (one round trip).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypedDict

import msgpack
import redis
from redis import Redis

from jobcenter.config import ACKED, REPLICATED, Settings
from jobcenter.errors import (
    IdempotencyConflict,
    NoResult,
    NotFound,
    SettingsMismatch,
    raise_for_code,
)
from jobcenter.model import codec
from jobcenter.model.ordering import learned_fields, task_ranks
from jobcenter.model.spec import JobSpec, spec_digest, spec_from_any
from jobcenter.model.states import TERMINAL_TASK_STATES, JobState, TaskState

from . import schema
from .connection import connect, is_cluster, time_ms
from .durability import GroupCommit
from .eviction import config_value
from .keys import Keys
from .layout import Layout, job_queues
from .lua import Batch, Scripts
from .notifications import view as notifications_view
from .notifications import webhook_rules
from .packed import HISTORY_PAGE, STAMP_FIELDS, JobRecords, Stamp
from .packed import encode as packed_encode
from .replies import seconds, text
from .schema import JobField, TaskField
from .shard_leases import ShardLeases, pop_wake, push_wake
from .upgrade import ensure_schema

log = logging.getLogger(__name__)

SWEEP_MAX = 100  # expired leases reported per claim: bounded work on the fast path
STATUS_PAGE = 10_000  # task fields per read of `status`: a job of ~1,000 tasks in one read
RECORD_PART = 256 * 1024  # bytes of a packed record written per compact call
COMPACT_TRIES = 3  # reads of a job that keeps changing under its compaction (a retry)
# A finished job of at most this many tasks is compacted with the others of its batch: its
# tasks hash and history read whole in one pipeline for all of them, their records written
# in another (a one-task job's compaction was six round trips of its own).
COMPACT_BATCH_TASKS_MAX = 64
LIST_PAGE_MIN = 100  # index entries per page when `list` checks several filters per job
LIST_SCAN_MAX = 10_000  # index entries one `list` reads per shard at most
META_CACHE_MAX = 10_000  # jobs whose queues and idempotency key a store remembers
INLINE_SPLIT_MAX = 500  # a job this small is split by its submit script (one short call)
# One submit call stores jobs of one shard while it writes at most this many tasks (one job
# of INLINE_SPLIT_MAX at most, or many small ones) and at most SUBMIT_CALL_JOBS jobs: the
# job context's cost is paid once a call, and a call stays as short as one inline split.
SUBMIT_CALL_TASKS = INLINE_SPLIT_MAX
SUBMIT_CALL_JOBS = 100
# Learned run times a submit reuses before reading them again: moving averages of many runs
# drift slowly, and a read of its own would cost a one-job submit a second round trip.
LEARNED_CACHE_SECONDS = 10.0
LEARNED_CACHE_MAX = 100_000  # fields kept; past this the cache starts afresh
RESTORE_CHUNK = 5_000  # task fields + history entries written back per restore call
# A submit waits at most this for its fsync: two of `everysec`'s fsyncs. Kept under half the
# client's socket timeout (redis-py 8 defaults to 5 s), so the wait never reads as a dead link.
WAITAOF_TIMEOUT_MS = 2_000
# A timed_out attempt's worker may still report within a third of a lease (a late heartbeat
# or result after a pause) before the attempt is run again or failed.
LEASE_GRACE_DIVISOR = 3
LEADER_TIMEOUT_FACTOR = 1.0  # a leader step not renewed within one lease is taken over
UNFINISHED = (JobState.PENDING, JobState.RUNNING)  # the job states the active index holds
# Random bytes of a claim's nonce (hex in the fencing token): unique per claim without any
# counter of Redis's, which a restart from an older snapshot or a failover can roll back.
NONCE_BYTES = 8
IDEMPOTENCY_CONFLICT = schema.code("IDEMPOTENCY_CONFLICT")  # submit.lua
HEARTBEAT_CANCELLED = schema.code("ITEM_JOB_STOPPED")  # heartbeat.lua, per attempt
JOB_GONE = schema.code("JOB_GONE")
CURSOR_MOVED = schema.code("CURSOR_MOVED")
WRONG_STATE = schema.code("WRONG_STATE")


def served_member(queue: str, task_name: str) -> str:
    """How the served-tasks zset names a task name served on a queue (queue names hold no
    '|')."""
    return f"{queue}|{task_name}"


# What complete.lua gets for a task that returned None: nothing is stored (a succeeded task
# without a result field returned None), so tasks without results cost no memory.
NO_RESULT = b""
# One input as the start script returns it: a parent's result (msgpack), None when the parent
# has none, or a mapped parent's list of its instances' results.
InputValue = bytes | list[bytes | None] | None


@dataclass(frozen=True)
class StartedTask:
    """An attempt this worker now runs. Its fencing token, `<attempt>:<handler>:<nonce>`
    (the nonce drawn at random for the claim that started it), goes with every report of the
    attempt. `inputs` are (kwarg, value) pairs: the parents' results it receives (read by
    start.lua)."""

    job_id: str
    index: int
    attempt: int
    payload: bytes
    inputs: tuple[tuple[str, InputValue], ...] = ()
    # where it stood in its queue's order (priority, then queue member; b"": first): the
    # order a worker runs the tasks it holds in
    run_order: bytes = field(default=b"", compare=False)
    has_children: bool = field(default=True, compare=False)  # it releases others as it ends
    # the run order of its first child (None: it has none; b"": too many to order): what
    # the worker holding it may prefetch sorts before it (complete.lua, NEXT.may_take)
    first_child: bytes | None = field(default=b"", compare=False)
    token: str = ""

    def input_kwargs(self) -> dict[str, Any]:
        """The inputs decoded: kwarg -> the parent's return value (a mapped parent's: the
        list of its instances' return values, in element order)."""
        return {name: _unpack_input(value) for name, value in self.inputs}


def _unpack_input(value: InputValue) -> Any:
    if isinstance(value, list):
        return [None if item is None else codec.unpack(item) for item in value]
    return None if value is None else codec.unpack(value)


def _record(fields: dict[str, bytes], history: list[bytes], tasks: int, state: bytes) -> bytes:
    """A finished job's packed record; a succeeded one's without its working fields."""
    working = state != JobState.SUCCEEDED.value.encode()
    return packed_encode(fields, history, tasks, working)


def new_nonce() -> str:
    """A claim's nonce: what makes its attempts' fencing tokens unique (start.lua)."""
    return secrets.token_hex(NONCE_BYTES)


def fencing_token(attempt: int | str, handler: str, nonce: str) -> str:
    """The fencing token of an attempt, as _job.lua's token_of forms it."""
    return f"{attempt}:{handler}:{nonce}"


def started_tasks(job_id: str, reply: Any, handler: str, nonce: str) -> list[StartedTask]:
    """The StartedTasks of a script's list of {index, attempt, payload, inputs, run order,
    has children} items, started by `handler` under the call's `nonce`: one msgpack string
    (MSGPACK.tasks in _data.lua: Lua's false comes as False), or the list itself from a
    server whose Lua has no cmsgpack (false as None)."""
    items = msgpack.unpackb(reply, raw=True) if isinstance(reply, bytes) else reply
    return [_started_task(job_id, item, handler, nonce) for item in items]


def _started_task(job_id: str, item: Sequence[Any], handler: str, nonce: str) -> StartedTask:
    index, attempt, payload, raw, run_order, children = item
    pairs = tuple((text(raw[k]) or "", _input_value(raw[k + 1])) for k in range(0, len(raw), 2))
    # children (OBS.children_after): 0 none, 1 too many to order, else the first one's order
    first_child = None if children == 0 else children if isinstance(children, bytes) else b""
    token = fencing_token(attempt, handler, nonce)
    return StartedTask(
        job_id, int(index), int(attempt), payload, pairs, run_order, children != 0, first_child,
        token,
    )  # fmt: skip


def _input_value(value: Any) -> InputValue:
    """A parent's result as a script gives it: bytes, none (false), or a mapped parent's list."""
    if isinstance(value, list):
        return [item or None for item in value]
    return value or None


class RefusedInPart(redis.ResponseError):
    """Redis ran some calls of a pipelined batch and answered others with an error (out of
    memory, read-only, busy): what the calls that ran did is kept here, so none of it is
    lost when the caller tries the rest again. Its message is the first error's."""

    def __init__(
        self,
        cause: Exception,
        codes: dict[tuple[str, int], int],
        taken: list[StartedTask] | None = None,
    ) -> None:
        super().__init__(str(cause))
        self.codes = codes  # (job, index) -> code, for the tasks whose call ran
        self.taken = taken or []  # children the calls that ran started for the caller


@dataclass(frozen=True)
class ClaimResult:
    leader: list[tuple[str, str]]  # (kind, job id) leader messages now owned by this worker
    expired: list[tuple[str, int]]  # (job id, index) leases past their deadline
    tasks: list[StartedTask]
    next_retry_ms: int = -1  # until the next retry in these queues is due; -1: none
    # queue -> the newest protocol of the entries a newer release wrote there, which this
    # release left in place: work waiting for a worker of that release
    newer: dict[str, int] = field(default_factory=dict)


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
    since: float | None
    limit: int
    before: tuple[int, str] | None


@dataclass(frozen=True)
class JobMeta:
    """What every script call of a job needs to know, fixed at submit: its queues and its
    idempotency key."""

    queues: tuple[str, ...]
    idem: str | None

    @classmethod
    def stored(cls, queues: bytes | str | None, idem: bytes | str | None) -> JobMeta:
        """From the job hash's fields: the queues joined by ',', the key (or none)."""
        joined = text(queues)
        return cls(tuple(joined.split(",")) if joined else (), text(idem) or None)


@dataclass
class SubmitJob:
    """One job's part of a submit.lua call: its keys and arguments after the job context."""

    job_id: str
    shard: int
    meta: JobMeta
    tasks: int  # tasks its submit writes (0: a leader splits it)
    keys: list[str]
    args: list[Any]

    @property
    def cost(self) -> int:
        """Its share of a call's bound: the tasks it writes; a job a leader splits stores
        its whole spec instead, and goes alone."""
        return self.tasks or SUBMIT_CALL_TASKS


@dataclass
class SubmitCall:
    """Jobs of one shard stored by one submit.lua call, in order."""

    shard: int
    indexes: list[int] = field(default_factory=list)  # the jobs' places among the specs
    jobs: list[SubmitJob] = field(default_factory=list)
    tasks: int = 0

    def has_room(self, job: SubmitJob) -> bool:
        """Whether `job` may join (the first job of a call always may)."""
        return not self.jobs or (
            self.tasks + job.cost <= SUBMIT_CALL_TASKS and len(self.jobs) < SUBMIT_CALL_JOBS
        )

    def add(self, index: int, job: SubmitJob) -> None:
        self.indexes.append(index)
        self.jobs.append(job)
        self.tasks += job.cost


@dataclass
class PreparedSubmit:
    """A batch of submit calls (Store._prepare_submit) and what reads their replies."""

    specs: Sequence[JobSpec]
    job_ids: list[str]
    calls: list[SubmitCall]
    batch: Batch

    def results(self, replies: list[Any]) -> list[tuple[str, bool]]:
        """(job id, created) per spec; raises for the first refused one."""
        outcomes: dict[int, tuple[int, Any]] = {}
        for call, reply in zip(self.calls, replies, strict=True):
            for n, index in enumerate(call.indexes):
                outcomes[index] = (int(reply[2 * n]), reply[2 * n + 1])
        results = []
        for index, (spec, job_id) in enumerate(zip(self.specs, self.job_ids, strict=True)):
            code, returned = outcomes[index]
            if code == IDEMPOTENCY_CONFLICT:
                raise IdempotencyConflict(
                    f"idempotency key {spec.idempotency_key!r} names job {text(returned)}, "
                    "submitted with a different spec: submit that spec again to get the "
                    "job back, or use a new key for this one"
                )
            raise_for_code(code, f"job id {job_id} exists already")
            results.append((text(returned) or job_id, code == 0))
        return results


class Store:
    """Jobs and tasks in Redis for one namespace."""

    def __init__(self, client: Redis, settings: Settings) -> None:
        # Any: redis-py types each reply as a union of raw, decoded and awaitable forms; this
        # client always returns raw bytes (decode_responses off), which the code relies on.
        self.redis: Any = client
        self.settings = settings
        self.keys = Keys(settings.namespace, settings.shards)
        self.scripts = Scripts(client)
        self.cluster = is_cluster(client)  # a Redis Cluster: one call, one hash slot
        self.webhook_rules = webhook_rules(settings, client)  # where a `notify:` may post
        self._meta: OrderedDict[str, JobMeta] = OrderedDict()
        self._contexts: OrderedDict[tuple[str, bool], tuple[list[str], list[Any]]] = OrderedDict()
        # the keys a job script gets from its shard and queues, formed once (hot paths)
        self._shard_keys: dict[int, tuple[list[str], list[str], list[str]]] = {}
        self._queue_keys: dict[tuple[int, str], list[str]] = {}
        self._waitaof: bool | None = None  # learnt from the server on first submit
        # learned estimates read for submits: field -> ms (None: never learned), and when
        self._learned: dict[str, float | None] = {}
        self._learned_read_at = 0.0
        self._learned_lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._group_commit = GroupCommit(self._confirm_fsync)
        self._check_shard_count()
        ensure_schema(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls(connect(settings.redis_url), settings)

    def now_ms(self) -> int:
        """Redis TIME in ms: the one clock every lease, heartbeat and fire is measured by."""
        return time_ms(self.redis)

    @property
    def connection(self) -> Redis:
        """The Redis client itself, for rq (the recovery executor needs a connection)."""
        return self.redis

    def _check_shard_count(self) -> None:
        """The first process to use a namespace stores its shard count; any other count is
        refused, since a job's keys would then be looked for in the wrong shard."""
        key, mine = self.keys.shard_count(), self.settings.shards
        stored = self.redis.get(key)
        if stored is None:  # read first: a full or read-only Redis must still serve reads
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(key, mine, nx=True)
            pipe.get(key)
            _, stored = pipe.execute()
        if int(stored) != mine:
            raise SettingsMismatch(
                f"namespace {self.settings.namespace!r} has shard count {int(stored)} (fixed "
                f"at its first use), but this process has JOBCENTER_SHARDS={mine}: give every "
                f"client and worker of the namespace JOBCENTER_SHARDS={int(stored)}"
            )

    # -- helpers -------------------------------------------------------------------------

    def _remember(self, job_id: str, meta: JobMeta) -> JobMeta:
        self._meta[job_id] = meta
        if len(self._meta) > META_CACHE_MAX:
            self._meta.popitem(last=False)
        return meta

    def job_meta(self, job_id: str) -> JobMeta:
        """A job's queues and idempotency key: read once, then cached (they never change)."""
        meta = self._meta.get(job_id)
        if meta is None:
            queues, idem = self.redis.hmget(self.keys.job(job_id).job, "queues", "idem")
            meta = self._remember(job_id, JobMeta.stored(queues, idem))
        return meta

    def _cached_context(self, job_id: str, with_meta: bool) -> tuple[list[str], list[Any]]:
        """_context, built once per job (and with or without its meta): it never changes,
        and building its KEYS costs more than a small batch's own arguments."""
        context = self._contexts.get((job_id, with_meta))
        if context is None:
            context = self._context(job_id, self.job_meta(job_id) if with_meta else None)
            self._contexts[(job_id, with_meta)] = context
            if len(self._contexts) > META_CACHE_MAX:
                self._contexts.popitem(last=False)
        return context

    def _context(self, job_id: str, meta: JobMeta | None) -> tuple[list[str], list[Any]]:
        """KEYS and first ARGV of a job-scoped script (the layout in _job.lua)."""
        shard = self.keys.job_shard(job_id)
        job, tasks, history, frontier, packed = self.keys.job_own(job_id)
        idem = meta.idem if meta else None
        before_idem, before_packed, after_packed = self._shard_context(shard)
        keys = [
            job,
            tasks,
            history,
            frontier,
            *before_idem,
            self.keys.idempotency(shard, idem) if idem else job,
            *before_packed,
            packed,
            *after_packed,
        ]
        queues = meta.queues if meta else ()
        for queue in queues:
            keys += self._queue_context(shard, queue)
        settings = self.settings
        retention_ms = int(settings.retention_seconds * 1000)
        observe = [settings.events_maxlen, 1 if settings.metrics else 0]
        return keys, [job_id, retention_ms, *observe, len(queues), *queues]

    def _shard_context(self, shard: int) -> tuple[list[str], list[str], list[str]]:
        """A job script's shard keys around its idempotency key and packed record
        (_job.lua's layout), formed once per shard."""
        parts = self._shard_keys.get(shard)
        if parts is None:
            keys = self.keys
            parts = (
                [
                    keys.leases(shard),
                    keys.claims(shard),
                    keys.leader(shard),
                    keys.leader_wake(shard),
                    keys.dlq(shard),
                    keys.active(shard),
                    keys.expiring(shard),
                ],
                [keys.notify_due(shard), *(keys.state_jobs(shard, state) for state in JobState)],
                [*keys.limit_keys(shard), keys.events(shard), keys.metrics(shard)],
            )
            self._shard_keys[shard] = parts
        return parts

    def _queue_context(self, shard: int, queue: str) -> list[str]:
        keys = self._queue_keys.get((shard, queue))
        if keys is None:
            keys = self._queue_keys[(shard, queue)] = self.keys.queue_keys(shard, queue)
        return keys

    def _job_call(
        self,
        name: str,
        job_id: str,
        args: Sequence[Any],
        *,
        with_meta: bool = True,
        extra_keys: Sequence[str] = (),
        batch: Batch | None = None,
    ) -> Any:
        """Call a job-scoped script now, or add the call to `batch`. Without meta the script
        sees no queues and no idempotency key (start, heartbeat: they need neither)."""
        keys, argv = self._cached_context(job_id, with_meta)
        if batch is not None:
            batch.add(name, keys + list(extra_keys), argv + list(args))
            return None
        return self.scripts.run(name, keys + list(extra_keys), argv + list(args))

    # -- submit ---------------------------------------------------------------------------

    def submit(
        self,
        spec: JobSpec,
        *,
        schedule_id: str | None = None,
        fire_time: float | None = None,
    ) -> tuple[str, bool]:
        """Store `spec` as a job; returns (job id, created). A repeated idempotency key
        returns the first job's id with created=False."""
        fired = [(schedule_id, fire_time)] if schedule_id else None
        return self.submit_many([spec], fired=fired)[0]

    def submit_many(
        self,
        specs: Sequence[JobSpec],
        *,
        fired: Sequence[tuple[str, float | None]] | None = None,
        durable: bool = True,
    ) -> list[tuple[str, bool]]:
        """Submit many jobs in one round trip; (job id, created) for each, in order. `fired`
        gives each spec the (schedule id, fire time) that fired it. With `durable` off the
        caller waits for durability itself (wait_durable: once after many batches)."""
        prepared = self._prepare_submit(specs, fired)
        results = prepared.results(prepared.batch.execute())
        if durable and any(created for _, created in results):
            self.wait_durable()
        return results

    def submit_batches(self, batches: Iterable[Sequence[JobSpec]]) -> list[tuple[str, bool]]:
        """submit_many for batch after batch, without waiting for durability (wait_durable,
        once after all). One batch is in Redis while the next is encoded here, but only sent
        once the one before it was taken whole: a refused batch stops the ones after it."""
        results: list[tuple[str, bool]] = []
        with ThreadPoolExecutor(1, thread_name_prefix="jobcenter-submit") as sender:
            in_flight: tuple[PreparedSubmit, Future[list[Any]]] | None = None
            for specs in batches:
                prepared = self._prepare_submit(specs, None)
                if in_flight is not None:
                    results += in_flight[0].results(in_flight[1].result())
                in_flight = (prepared, sender.submit(prepared.batch.execute))
            if in_flight is not None:
                results += in_flight[0].results(in_flight[1].result())
        return results

    def _prepare_submit(
        self,
        specs: Sequence[JobSpec],
        fired: Sequence[tuple[str, float | None]] | None,
    ) -> PreparedSubmit:
        """The submit calls of `specs` in one batch, not sent yet."""
        specs = [spec_from_any(spec) for spec in specs]  # a hand-built JobSpec is checked too
        for spec in specs:
            self.webhook_rules.check_notify(spec.notify)
        origins = fired if fired is not None else [(None, None)] * len(specs)
        learned = self._recent_estimates(specs)
        calls: list[SubmitCall] = []
        open_calls: dict[int, SubmitCall] = {}  # by shard: the call its next job may join
        job_ids = []
        for index, (spec, (schedule_id, fire_time)) in enumerate(zip(specs, origins, strict=True)):
            job = self._submit_job(spec, schedule_id, fire_time, learned)
            call = open_calls.get(job.shard)
            if call is None or not call.has_room(job):
                call = open_calls[job.shard] = SubmitCall(job.shard)
                calls.append(call)
            call.add(index, job)
            job_ids.append(job.job_id)
        batch = self.scripts.batch()
        for call in calls:
            first = call.jobs[0]
            queues = sorted({queue for job in call.jobs for queue in job.meta.queues})
            script_keys, argv = self._context(first.job_id, JobMeta(tuple(queues), first.meta.idem))
            script_keys += [self.keys.seq(call.shard), self.keys.jobs(call.shard)]
            argv += [len(call.jobs)]
            for job in call.jobs:
                script_keys += job.keys
                argv += job.args
            batch.add("submit", script_keys, argv)
        return PreparedSubmit(specs, job_ids, calls, batch)

    def _recent_estimates(self, specs: Sequence[JobSpec]) -> dict[str, float]:
        """learned_estimates, as read at most LEARNED_CACHE_SECONDS ago: repeated submits
        of the same jobs read them once."""
        fields = {field for spec in specs for field in learned_fields(spec)}
        with self._learned_lock:
            now = time.monotonic()
            if now - self._learned_read_at > LEARNED_CACHE_SECONDS:
                self._learned.clear()
                self._learned_read_at = now
            known = {name: self._learned[name] for name in fields if name in self._learned}
        missing = sorted(fields.difference(known))
        if missing:
            found = self._read_estimates(missing)
            known.update({name: found.get(name) for name in missing})
            with self._learned_lock:
                if len(self._learned) + len(missing) > LEARNED_CACHE_MAX:
                    self._learned.clear()
                self._learned.update({name: known[name] for name in missing})
        return {name: value for name, value in known.items() if value is not None}

    def learned_estimates(self, specs: Sequence[JobSpec]) -> dict[str, float]:
        """The learned run times (ms) the specs' ranks need, read now: one HMGET per shard,
        in one round trip, none when no spec needs one; a field learned on several shards
        (jobs land on any) takes the mean."""
        return self._read_estimates(sorted({f for spec in specs for f in learned_fields(spec)}))

    def _read_estimates(self, fields: list[str]) -> dict[str, float]:
        if not fields:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.hmget(self.keys.estimates(shard), fields)
        found: dict[str, list[float]] = defaultdict(list)
        for values in pipe.execute():
            for name, value in zip(fields, values, strict=True):
                if value is not None:
                    found[name].append(float(value))
        return {name: sum(v) / len(v) for name, v in found.items()}

    def _submit_job(
        self,
        spec: JobSpec,
        schedule_id: str | None,
        fire_time: float | None,
        learned: Mapping[str, float] | None = None,
    ) -> SubmitJob:
        """A new job's id, and its keys and arguments in a submit.lua call."""
        keys = self.keys
        shard = keys.shard_of(spec.idempotency_key) if spec.idempotency_key else None
        job_id = keys.new_job_id(shard)
        shard = keys.job_shard(job_id)
        queues = job_queues(spec)
        spec_dict = spec.to_dict()
        inline = len(spec.tasks) <= INLINE_SPLIT_MAX
        layout = Layout(spec_dict)  # ranked once here: a leader's split reuses the ranks
        layout.ranks = task_ranks(spec, layout.children, learned or {})
        fields: dict[str, Any] = {
            "name": spec.name,
            "priority": spec.priority,
            "queue": spec.queue,
            "queues": ",".join(queues),
            "n": len(spec.tasks),
            "left": len(spec.tasks),
        }
        optional = {
            "spec": None if inline else codec.pack_valid(spec_dict),  # parse_spec checked it
            "ranks": None if inline or layout.ranks is None else codec.pack_valid(layout.ranks),
            "owner": spec.owner,
            "idem": spec.idempotency_key,
            "spec_digest": spec_digest(spec) if spec.idempotency_key else None,
            "retention": int(spec.retention * 1000) if spec.retention else None,
            "schedule_id": schedule_id,
            "fire_time": fire_time,
            JobField.TRIGGER_RULES: 1 if layout.has_trigger_rules() else None,
            **_notify_fields(spec),
        }
        fields.update({k: v for k, v in optional.items() if v is not None})
        job_args = [x for item in fields.items() for x in item]
        task_args: list[Any] = []
        roots: list[int] = []
        if inline:  # small: written and queued by the submit script itself
            task_args, roots = layout.pairs(0, len(layout)), layout.roots
        meta = self._remember(job_id, JobMeta(tuple(queues), spec.idempotency_key))
        job_key, tasks_key, history, frontier, _ = keys.job_own(job_id)
        idem = keys.idempotency(shard, spec.idempotency_key) if spec.idempotency_key else job_key
        owner_key = keys.owner_jobs(shard, spec.owner) if spec.owner else job_key
        schedule_key = keys.schedule_jobs(shard, schedule_id) if schedule_id else job_key
        own_keys = [job_key, tasks_key, history, frontier, idem, owner_key, schedule_key]
        args = [job_id, len(job_args), *job_args, len(task_args), *task_args, len(roots), *roots]
        return SubmitJob(job_id, shard, meta, len(spec.tasks) if inline else 0, own_keys, args)

    def wait_durable(self) -> bool:
        """With durability `fsynced`, where the server has WAITAOF (Redis >= 7.2) and AOF on
        with fsyncs: block until every write this process had acknowledged is fsynced to the
        local AOF; one WAITAOF serves all the threads waiting (group commit). With
        `replicated`, until one replica has them (WAIT 1, grouped the same way). True if that
        was confirmed. Elsewhere (`acked`) the writes are in Redis memory and its AOF
        buffer, which a Redis crash does not lose (README: Durability)."""
        if self.settings.durability == ACKED or not self._fsync_confirmable():
            return False
        return self._group_commit.wait()

    def _fsync_confirmable(self) -> bool:
        """Whether WAITAOF (or WAIT) can confirm the write here; learnt once, with a note
        when not."""
        with self._probe_lock:
            if self._waitaof is None:
                reason = self._unconfirmable_reason()
                self._waitaof = reason is None
                if reason is not None:
                    mode = self.settings.durability
                    log.info("durability %s: %s; submits return once Redis acked", mode, reason)
            return self._waitaof

    def _unconfirmable_reason(self) -> str | None:
        if self.cluster:  # WAITAOF, WAIT: one node's writes, on the connection that made them
            return "on a Redis Cluster each master fsyncs and replicates on its own"
        if self.settings.durability == REPLICATED:  # WAIT: every Redis has it
            if int(self.redis.info("replication").get("connected_slaves", 0)) < 1:
                return "no replica is connected to the primary, so WAIT would only time out"
            return None
        info = self.redis.info("server")
        version = str(info["redis_version"])
        major, minor = (int(x) for x in version.split(".")[:2])
        if (major, minor) < (7, 2):
            return f"Redis {version} has no WAITAOF (7.2 and later have)"
        if self.redis.info("persistence").get("aof_enabled") != 1:
            return "the server runs with appendonly off"
        try:
            config = {text(k): text(v) for k, v in self.redis.config_get("appendfsync").items()}
            fsync = config.get("appendfsync")
        except redis.ResponseError:
            fsync = None  # CONFIG disabled: assume the default, everysec
        if fsync == "no":
            return "the server runs with appendfsync no, so WAITAOF would only time out"
        return None

    def _confirm_fsync(self) -> bool:
        """One group commit round: a write on this connection, then WAITAOF for it. WAITAOF
        waits only for its own connection's writes; the AOF is one sequence, so this write
        being fsynced means every write acknowledged before it was too."""
        socket_timeout = self.redis.connection_pool.connection_kwargs.get("socket_timeout")
        timeout_ms = WAITAOF_TIMEOUT_MS
        if socket_timeout:
            timeout_ms = max(1, min(timeout_ms, int(socket_timeout * 1000 / 2)))
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.fsync_mark(), 1)
        if self.settings.durability == REPLICATED:  # WAIT: one replica has every write
            pipe.execute_command("WAIT", 1, timeout_ms)
            _, replicas = pipe.execute()
            if int(replicas) < 1:
                log.warning("WAIT: no replica acknowledged within %d ms; submits acked", timeout_ms)
            return int(replicas) >= 1
        pipe.execute_command("WAITAOF", 1, 0, timeout_ms)
        try:
            _, (local, _) = pipe.execute()
        except redis.ResponseError as exc:  # AOF turned off at run time
            log.warning("WAITAOF failed (%s); submits return once Redis acked from now on", exc)
            self._waitaof = False
            return False
        if int(local) < 1:
            log.warning("WAITAOF: no fsync within %d ms; the submits are acked", timeout_ms)
        return int(local) >= 1

    # -- the follower's fast path ---------------------------------------------------------

    def claim(
        self,
        handler: str,
        queues: Sequence[str],
        *,
        max_tasks: int,
        max_leader: int,
        shard: int = 0,
        sweep: int = SWEEP_MAX,
    ) -> ClaimResult:
        """Take due leader messages and up to `max_tasks` tasks (highest priority first,
        FIFO within a priority), and start them; also report expired leases."""
        leader, expired, reserved, next_due, newer = self.reserve(
            handler, queues, max_tasks=max_tasks, max_leader=max_leader, shard=shard, sweep=sweep
        )
        by_job: dict[str, list[int]] = defaultdict(list)
        for member in reserved:
            # "<seq>|<job>|<index>", then "|<limits>" for a task that took pool/limit slots
            _, job_id, index = member.decode().split("|", 3)[:3]
            by_job[job_id].append(int(index))
        tasks = self.start(handler, by_job) if by_job else []
        return ClaimResult(
            leader=[tuple(m.decode().split("|", 1)) for m in leader],
            expired=[(j, int(i)) for j, i in (m.decode().split("|") for m in expired)],
            tasks=tasks,
            next_retry_ms=int(next_due),
            newer={q: int(p) for p, q in (m.decode().split("|", 1) for m in newer)},
        )

    def reserve(
        self,
        handler: str,
        queues: Sequence[str],
        *,
        max_tasks: int,
        max_leader: int = 0,
        shard: int = 0,
        sweep: int = SWEEP_MAX,
    ) -> list[Any]:
        """claim.lua's raw reply (leader messages, expired leases, reserved queue members, ms
        to the next retry, queues holding entries of a newer protocol): the reservations are
        not started."""
        keys = self.keys
        script_keys = [
            keys.leader(shard),
            keys.leases(shard),
            keys.claims(shard),
            *keys.limit_keys(shard),
        ]
        for queue in queues:
            script_keys += keys.queue_keys(shard, queue)
        leader_timeout_ms = int(self.settings.lease_ms * LEADER_TIMEOUT_FACTOR)
        args = [handler, max_leader, max_tasks, self.settings.lease_ms, leader_timeout_ms, sweep]
        args += [shard, keys.shards, *queues]
        reply: list[Any] = self.scripts.run("claim", script_keys, args)
        return reply

    def start(self, handler: str, by_job: dict[str, list[int]]) -> list[StartedTask]:
        """Turn reservations into running attempts, one script call per job, pipelined, under
        a nonce of this claim's own. Each reply also carries the job's meta, so later calls
        need no read for it."""
        nonce = new_nonce()
        batch = self.scripts.batch()
        for job_id, indexes in by_job.items():
            args = [handler, nonce, *indexes]
            self._job_call("start", job_id, args, with_meta=False, batch=batch)
        started: list[StartedTask] = []
        for job_id, reply in zip(by_job, batch.execute(), strict=True):
            if reply[0] < 0:
                continue  # the job is gone; the script dropped its reservations
            if job_id not in self._meta:
                self._remember(job_id, JobMeta.stored(reply[2], reply[3]))
            started += started_tasks(job_id, reply[1], handler, nonce)
        return started

    def complete(
        self,
        handler: str,
        done: Sequence[tuple[str, int, str] | tuple[str, int, str, bytes]],
        *,
        take_queues: Sequence[str] = (),
        take_max: int = 0,
        prefetch: int = 0,
        prefetch_before: bytes | None = None,
    ) -> tuple[dict[tuple[str, int], int], list[StartedTask]]:
        """Complete (job, index, fencing token[, result]) attempts, each result (msgpack;
        default NO_RESULT) stored with its success; returns a code per task and the tasks this
        worker took to run at once, from `take_queues`: released children, then the next
        queued tasks of the same jobs (at most `take_max` for its free slots, and up to
        `prefetch` more, queued before the call and sorting before `prefetch_before` and
        before the first child of what it takes: complete.lua). The budget is shared between the
        jobs' calls. RefusedInPart when Redis refused some jobs' calls (their tasks have no
        code)."""
        by_job: dict[str, list[tuple[int, str, bytes]]] = defaultdict(list)
        for job_id, index, token, *result in done:
            by_job[job_id].append((index, token, result[0] if result else NO_RESULT))
        nonce = new_nonce()  # of the attempts the calls start
        batch = self.scripts.batch()
        calls = len(by_job)
        for n, (job_id, items) in enumerate(by_job.items()):
            triples = [x for item in items for x in item]
            share = _share(take_max, calls, n)
            extra = _share(prefetch, calls, n)
            take: int | str = share
            if extra:
                take = f"{share}+{extra}"
                if prefetch_before is not None:
                    take += "@" + prefetch_before.decode()
            args = [handler, nonce, self.settings.lease_ms, take, len(take_queues), *take_queues]
            estimates_key = self.keys.estimates(self.keys.job_shard(job_id))
            self._job_call(
                "complete", job_id, [*args, *triples], extra_keys=[estimates_key], batch=batch
            )
        codes: dict[tuple[str, int], int] = {}
        taken: list[StartedTask] = []
        answered, refused = _run_per_job(batch, by_job)
        for job_id, items, reply in answered:
            codes.update(_task_codes(job_id, [item[0] for item in items], reply))
            if reply[0] < 0:
                continue
            taken += started_tasks(job_id, reply[2], handler, nonce)
        if refused is not None:
            raise RefusedInPart(refused, codes, taken)
        return codes, taken

    def running_attempts(self, handler: str, job_id: str) -> list[StartedTask]:
        """The job's tasks now running as attempts of `handler`: what a complete call whose
        reply was lost may have started for that worker (complete.lua takes released
        children and next queued tasks). Read from the shard's leases, which hold only the
        tasks reserved or running now: a few per worker slot."""
        prefix = f"{job_id}|".encode()
        members = self.redis.zrange(self.keys.leases(self.keys.job_shard(job_id)), 0, -1)
        indexes = sorted(int(m[len(prefix) :]) for m in members if m.startswith(prefix))
        if not indexes:
            return []
        attrs = (
            TaskField.STATE, TaskField.HANDLER, TaskField.ATTEMPTS, TaskField.PAYLOAD,
            TaskField.NONCE,
        )  # fmt: skip
        tasks = self.keys.job(job_id).tasks
        values = self.redis.hmget(tasks, [attr.of(i) for i in indexes for attr in attrs])
        running = {TaskState.RUNNING.value, TaskState.TIMED_OUT.value}
        started = []
        for k, index in enumerate(indexes):
            state, owner, attempt, payload, nonce = values[k * len(attrs) : (k + 1) * len(attrs)]
            if text(state) in running and text(owner) == handler and attempt and payload:
                inputs = self._inputs(job_id, index)
                token = fencing_token(int(attempt), handler, text(nonce) or "")
                started.append(
                    StartedTask(job_id, index, int(attempt), payload, inputs, token=token)
                )
        return started

    def _inputs(self, job_id: str, index: int) -> tuple[tuple[str, InputValue], ...]:
        """What _data.lua's task_inputs gives a task that complete.lua took (never a map
        instance), read here for a completion whose reply was lost: results never change
        once written, so separate reads see what the script saw."""
        tasks = self.keys.job(job_id).tasks
        spec = text(self.redis.hget(tasks, TaskField.INPUTS.of(index))) or ""
        pairs: list[tuple[str, InputValue]] = []
        for item in filter(None, spec.split(",")):
            name, _, parent = item.partition("=")
            instances = text(self.redis.hget(tasks, TaskField.MAP_INSTANCES.of(parent)))
            if instances is None:
                pairs.append((name, self.redis.hget(tasks, TaskField.RESULT.of(parent))))
                continue
            first, count = map(int, instances.split("|"))
            fields = [TaskField.RESULT.of(k) for k in range(first, first + count)]
            pairs.append((name, self.redis.hmget(tasks, fields) if fields else []))
        return tuple(pairs)

    def give_back(
        self,
        handler: str,
        attempts: Sequence[tuple[str, int, str, str]],
        delay_min_ms: int,
        delay_max_ms: int,
        served: Collection[str] = (),
    ) -> dict[tuple[str, int], int]:
        """Hand back (job, index, token, task name) attempts this worker has no code for:
        unused, queued again after a delay (give_back.lua); a code per task. `served`: the
        served_member()s of live workers; a task one of them serves waits the shortest delay.
        RefusedInPart when Redis refused some jobs' calls (their tasks have no code)."""
        by_job: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        for job_id, index, token, name in attempts:
            by_job[job_id].append((index, token, name))
        names = {name for _, _, _, name in attempts}
        served_text = "".join(f"{m}\n" for m in sorted(served) if m.partition("|")[2] in names)
        batch = self.scripts.batch()
        for job_id, items in by_job.items():
            triples = [x for item in items for x in item]
            args = [handler, delay_min_ms, delay_max_ms, served_text, *triples]
            self._job_call("give_back", job_id, args, batch=batch)
        codes: dict[tuple[str, int], int] = {}
        answered, refused = _run_per_job(batch, by_job)
        for job_id, items, reply in answered:
            codes.update(_task_codes(job_id, [index for index, _, _ in items], reply))
        if refused is not None:
            raise RefusedInPart(refused, codes)
        return codes

    def gate_wait(
        self, handler: str, attempts: Sequence[tuple[str, int, str, str, int, int]]
    ) -> dict[tuple[str, int], int]:
        """Attempts whose gate said no, as (job, index, token, gate, backoff ms, give-up
        ms): each goes back unused to wait the backoff, or fails once its gate has said no
        for the give-up time (gate_wait.lua); a code per task."""
        by_job: dict[str, list[tuple[int, str, str, int, int]]] = defaultdict(list)
        for job_id, index, token, gate, backoff_ms, give_up_ms in attempts:
            by_job[job_id].append((index, token, gate, backoff_ms, give_up_ms))
        codes: dict[tuple[str, int], int] = {}
        for job_id, items in by_job.items():
            args = [handler, *(x for item in items for x in item)]
            reply = self._job_call("gate_wait", job_id, args)
            codes.update(_task_codes(job_id, [item[0] for item in items], reply))
        return codes

    def fail(
        self,
        handler: str,
        job_id: str,
        index: int,
        token: str,
        error: str,
        retry_delay_ms: int,
    ) -> tuple[int, str | None]:
        """Report a failed attempt (its fencing token); `retry_delay_ms` < 0 asks for no
        retry. Returns (code, new state); code < 0 means the report was rejected."""
        reply = self._job_call("fail", job_id, [handler, index, token, error, retry_delay_ms])
        return int(reply[0]), text(reply[1]) if len(reply) > 1 else None

    def heartbeat(
        self, handler: str, running: Iterable[tuple[str, int, str, str]]
    ) -> dict[tuple[str, int], int]:
        """Renew leases of (job, index, fencing token, progress); returns a code per task."""
        by_job: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        for job_id, index, token, progress in running:
            by_job[job_id].append((index, token, progress))
        if not by_job:
            return {}
        batch = self.scripts.batch()
        for job_id, items in by_job.items():
            triples = [x for item in items for x in item]
            args = [handler, self.settings.lease_ms, *triples]
            self._job_call("heartbeat", job_id, args, with_meta=False, batch=batch)
        codes: dict[tuple[str, int], int] = {}
        for (job_id, items), reply in zip(by_job.items(), batch.execute(), strict=True):
            codes.update(_task_codes(job_id, [index for index, _, _ in items], reply))
        return codes

    def expire(
        self, expired: Sequence[tuple[str, int]], grace_ms: int | None = None
    ) -> dict[str, int]:
        """Act on leases reported expired; returns how many tasks had each outcome. An attempt
        past its lease is timed_out first, and requeued or failed only once a grace has
        passed without a word from its worker: `grace_ms`, by default a third of a lease
        (LEASE_GRACE_DIVISOR)."""
        if grace_ms is None:
            grace_ms = max(1, self.settings.lease_ms // LEASE_GRACE_DIVISOR)
        by_job: dict[str, list[int]] = defaultdict(list)
        for job_id, index in expired:
            by_job[job_id].append(index)
        outcomes: dict[str, int] = defaultdict(int)
        for job_id, indexes in by_job.items():
            reply = self._job_call("expire", job_id, [grace_ms, *indexes])
            if reply[0] == 0:
                for outcome in reply[1]:
                    outcomes[outcome.decode()] += 1
        return dict(outcomes)

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
                jk.job, "state", "updated_at", "n", *STAMP_FIELDS
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
            record = _record(records.every_field(), history, int(n or 0), state)
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
            pipe.hmget(jk.job, "state", "updated_at", "n", *STAMP_FIELDS)
        alone: list[str] = []  # compact() also drops the message of a job with nothing to do
        small: list[tuple[str, bytes, bytes, int]] = []
        for job_id, (state, updated_at, n, packed, _) in zip(job_ids, pipe.execute(), strict=True):
            tasks = int(n or 0)
            finished = state is not None and JobState(state.decode()).terminal
            if finished and not packed and tasks <= COMPACT_BATCH_TASKS_MAX:
                small.append((job_id, state, updated_at, tasks))
            else:
                alone.append(job_id)
        pipe = self.redis.pipeline(transaction=False)
        for job_id, *_ in small:
            pipe.hgetall(jks[job_id].tasks)
            pipe.lrange(jks[job_id].history, 0, HISTORY_PAGE - 1)
        read = pipe.execute()
        batch = self.scripts.batch()
        writing: list[str] = []
        for k, (job_id, state, updated_at, tasks) in enumerate(small):
            fields, history = read[2 * k], read[2 * k + 1]
            record = _record({f.decode(): v for f, v in fields.items()}, history, tasks, state)
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
        while True:
            self.restore(job_id)
            reply = self._job_call("revive", job_id, args)
            # a leader compacted it between the two (a compact message posted earlier): once
            # more; restore posts none, so this ends
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
        owner, schedule_id = (text(v) for v in self.redis.hmget(jk.job, "owner", "schedule_id"))
        extra = [
            self.keys.jobs(shard),
            self.keys.owner_jobs(shard, owner) if owner else jk.job,
            self.keys.schedule_jobs(shard, schedule_id) if schedule_id else jk.job,
            self.keys.notifications(job_id),
            self.keys.deliveries(job_id),
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

    # -- workers --------------------------------------------------------------------------

    def poke(self, handler: str, shards: Sequence[int], tokens: int = 2) -> None:
        """End a stopping worker's blocking waits on `shards`: `tokens` on its own wake
        list of each (one per wait listening there: the claim loop's and the leader's)."""
        if not shards:
            return
        pipe = self.redis.pipeline(transaction=False)
        for shard in shards:
            key = self.keys.worker_wake(shard, handler)
            pipe.rpush(key, *["stop"] * tokens)
            pipe.expire(key, 60)
        pipe.execute()

    def shard_leases(self) -> ShardLeases:
        """The leases of owned segments (shards), at the settings' lease length."""
        return ShardLeases(self.redis, self.keys, self.settings.segment_lease_ms)

    def pop_wake(self, keys: Sequence[str], timeout: float) -> str | None:
        """Block up to `timeout` s on wake-up lists of one shard; the key that woke, if any."""
        return pop_wake(self.redis, keys, timeout)

    def push_wake(self, key: str) -> None:
        """Put back a wake-up a listener took for a loop that was not waiting."""
        push_wake(self.redis, key)

    def idle(self, queues: Sequence[str]) -> bool:
        """Nothing ready, waiting out a backoff, or waiting for a leader, in any shard."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.zcard(self.keys.leader(shard))
            for q in queues:
                pipe.zcard(self.keys.queue(shard, q))
                pipe.zcard(self.keys.delayed(shard, q))
        return not any(pipe.execute())

    def register_worker(self, handler: str, info: dict[str, Any], node: str | None) -> None:
        """Heartbeat the handler (and its node) with Redis TIME, so no worker clock counts."""
        now_ms = self.now_ms()
        ttl = int(self.settings.worker_timeout_seconds * 1000)
        pipe = self.redis.pipeline(transaction=False)
        # a worker killed without deregistering (kill -9, power loss) stops heartbeating:
        # drop it once silent past the timeout, so restarts do not grow the registry
        pipe.zremrangebyscore(self.keys.workers(), "-inf", now_ms - ttl)
        pipe.zadd(self.keys.workers(), {handler: now_ms})
        pipe.hset(self.keys.worker_info(handler), mapping={**info, "seen_at": now_ms})
        pipe.pexpire(self.keys.worker_info(handler), ttl)
        if node:
            pipe.zadd(self.keys.nodes(), {node: now_ms})
        pipe.execute()

    def mark_node_present(self, node: str) -> None:
        """Say (with Redis TIME) that a worker of `node` lives, whether or not it heartbeats:
        its rq child, a process of its own, calls this (runtime/presence.py)."""
        self.redis.zadd(self.keys.nodes(), {node: self.now_ms()})

    def publish_served(self, queues: Sequence[str], names: Sequence[str], keep_ms: int) -> None:
        """Say (with Redis TIME) that a live worker serves each of `queues` with each task name
        in `names`; entries nobody renewed for `keep_ms` are dropped (recovery reads them)."""
        now_ms = self.now_ms()
        key = self.keys.served_tasks()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now_ms - keep_ms)
        if names:
            pipe.zadd(key, {served_member(q, name): now_ms for q in queues for name in names})
        pipe.execute()

    def served_since(self, since_ms: int) -> set[str]:
        """The served_member()s some live worker published at or after `since_ms`."""
        members = self.redis.zrangebyscore(self.keys.served_tasks(), since_ms, "+inf")
        return {m.decode() for m in members}

    def deregister_worker(self, handler: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers(), handler)
        pipe.delete(self.keys.worker_info(handler))
        pipe.execute()

    def check_server(self) -> list[str]:
        """Warn about server settings that weaken the guarantees (ARCHITECTURE.md,
        Durability). An evicting maxmemory-policy is no warning: workers refuse it
        (storage/eviction.py)."""
        warnings = []
        try:
            aof = config_value(self.redis, "appendonly")
        except redis.ResponseError:
            warnings.append(
                "cannot read the server's config (CONFIG is disabled); make sure "
                "it runs with appendonly yes"
            )
        else:
            if aof != "yes":
                warnings.append("appendonly is off: a Redis restart loses what it held")
        if self.cluster and self.keys.shards < len(self.redis.get_primaries()):
            warnings.append(
                f"JOBCENTER_SHARDS={self.keys.shards} on a cluster of "
                f"{len(self.redis.get_primaries())} masters: jobs live on {self.keys.shards} of "
                "them at most; a new namespace with 8 or more shards per master spreads them"
            )
        for warning in warnings:
            log.warning(warning)
        return warnings

    # -- reads ----------------------------------------------------------------------------

    def job_state(self, job_id: str) -> JobState | None:
        """The job's state; None when there is no such job (never submitted, or expired)."""
        raw = self.redis.hget(self.keys.job(job_id).job, "state")
        return None if raw is None else JobState(raw.decode())

    def job_owner(self, job_id: str) -> str | None:
        """The job's owner (None: it has none); NotFound when there is no such job."""
        state, owner = self.redis.hmget(self.keys.job(job_id).job, "state", "owner")
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

    def records(self, job_id: str, stamp: Stamp | None = None) -> JobRecords:
        """The job's task fields and history, packed or not (storage/packed.py); `stamp`:
        its STAMP_FIELDS when the caller read them with other fields of the job."""
        return JobRecords.read(self.redis, self.keys.job(job_id), stamp)

    def status(self, job_id: str) -> dict[str, Any]:
        """The job and each task, in the shape the README gives for `status --json`."""
        job_raw = self.redis.hgetall(self.keys.job(job_id).job)
        if not job_raw:
            raise NotFound.job(job_id, self.settings.namespace)
        stamp = (job_raw.get(b"packed"), job_raw.get(b"swaps"))
        tasks_raw = self.records(job_id, stamp).every_field(STATUS_PAGE)
        job = {k.decode(): v for k, v in job_raw.items()}
        fields: dict[str, dict[str, bytes]] = defaultdict(dict)
        for k, v in tasks_raw.items():
            attr, _, index = k.partition(":")
            fields[index][attr] = v
        tasks: dict[str, Any] = {}
        if "spec" in job:  # not fully split: tasks never written show the job's outcome
            state = {b"cancelled": b"cancelled", b"failed": b"failed"}.get(job["state"], b"waiting")
            unwritten = {"s": state, **({"e": job["error"]} if "error" in job else {})}
            if "finished_at" in job:
                unwritten["tf"] = job["finished_at"]
            spec = codec.unpack(job["spec"])
            for i, t in enumerate(spec["tasks"]):  # type: ignore[index]
                tasks[t["id"]] = _task_view(fields.get(str(i), unwritten))
        else:
            parked = self.parked_limits(job_id, fields)
            for index in sorted(fields, key=int):
                f = fields[index]
                tasks[text(f.get("id")) or index] = _task_view(f, parked.get(index))
        return {
            "id": job_id,
            "name": text(job.get("name")),
            "owner": text(job.get("owner")),
            "state": text(job.get("state")),
            "created_at": seconds(job.get("created_at")),
            "finished_at": seconds(job.get("finished_at")),
            "error": text(job.get("error")),  # why the job itself ended (a cancel, lost keys)
            "tasks": tasks,
            "notifications": notifications_view(self.redis, self.keys, job_id, job),
        }

    def parked_limits(self, job_id: str, fields: dict[str, dict[str, bytes]]) -> dict[str, str]:
        """Of a job's queued tasks with limits, those parked waiting for a full one: index ->
        the limit in words ("pool gpu", "max_running", "concurrency key acme")."""
        queued = [
            i
            for i, f in fields.items()
            if TaskField.LIMITS.value[:-1] in f and text(f.get("s")) == TaskState.QUEUED
        ]
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
        if not self.redis.exists(self.keys.job(job_id).job):
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
            return _unpack_input(records.values(fields) if fields else [])
        return _unpack_input(raw)

    def results(self, job_id: str) -> dict[str, Any]:
        """Every stored result by task id (a mapped task: its instances' results, in element
        order), read with HSCAN: what a whole job returned, in a few reads."""
        records = self.records(job_id)  # the tasks hash, or the finished job's packed record
        raw = records.field_bytes(TaskField.RESULT)
        fields = self.task_fields(job_id, TaskField.ID, TaskField.MAP_INSTANCES)
        ids = fields[TaskField.ID]
        out = {ids[index]: _unpack_input(value) for index, value in raw.items() if index in ids}
        for index, instances in fields[TaskField.MAP_INSTANCES].items():
            first, count = map(int, instances.split("|")[:2])
            out[ids[index]] = [_unpack_input(raw.get(str(k))) for k in range(first, first + count)]
        return out

    def progress(self, job_id: str) -> JobProgress:
        """The job's state and task counters: three fields of the job hash, whatever the
        job's size (what `wait` and `submit --wait` poll)."""
        state, total, left = self.redis.hmget(self.keys.job(job_id).job, "state", "n", "left")
        if state is None:
            raise NotFound.job(job_id, self.settings.namespace)
        return JobProgress(JobState(state.decode()), int(total or 0), int(left or 0))

    def list_jobs(
        self,
        *,
        owner: str | None = None,
        state: str | None = None,
        schedule_id: str | None = None,
        since: float | None = None,
        limit: int = 100,
        before: tuple[int, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Newest first: job summaries, filtered by owner, state, schedule and creation
        time (epoch seconds). Each filter has an index the transitions keep, so one filter
        reads about `limit` entries per shard; several read the smallest of their indexes
        in pages, at most LIST_SCAN_MAX entries per shard (a warning says when that cut the
        list short). `before` (created ms, id) of the last job of a page: the next page."""
        if limit <= 0:
            return []
        low = "-inf" if since is None else int(since * 1000)
        rows: list[dict[str, Any]] = []
        for shard in range(self.keys.shards):
            rows += self._list_shard(shard, owner, state, schedule_id, low, limit, before)
        rows.sort(key=lambda row: (row["created_at"], row["id"]), reverse=True)
        return rows[:limit]

    def _list_shard(
        self,
        shard: int,
        owner: str | None,
        state: str | None,
        schedule_id: str | None,
        low: int | str,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[dict[str, Any]]:
        index = self.job_index(shard, owner, state, schedule_id, low)
        high: int | str = "+inf" if before is None else before[0]
        page = limit
        if sum(1 for value in (owner, state, schedule_id) if value) > 1:
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
        fields = ("name", "owner", "state", "created_at", "finished_at", "schedule_id", "fire_time")
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(self.keys.job(job_id).job, fields)
        rows = []
        for job_id, values in zip(job_ids, pipe.execute(), strict=True):
            name, owner, state, created, finished, schedule_id, fire = values
            if state is None:
                continue
            rows.append(
                {
                    "id": job_id,
                    "name": text(name),
                    "owner": text(owner),
                    "state": text(state),
                    "created_at": seconds(created),
                    "finished_at": seconds(finished),
                    "schedule_id": text(schedule_id),
                    "fire_time": float(fire) if fire is not None else None,
                }
            )
        return rows

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
        state, packed, swaps = self.redis.hmget(self.keys.job(job_id).job, "state", *STAMP_FIELDS)
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


def _notify_fields(spec: JobSpec) -> dict[str, str]:
    """The job-hash fields of the spec's `notify:` (what finalize_job in _job.lua reads)."""
    notify = spec.notify
    if notify is None:
        return {}
    fields = {"notify_on": ",".join(notify.on), "notify_to": ",".join(notify.channels)}
    if notify.webhook:
        fields["webhook"] = notify.webhook
    return fields


def _run_per_job(
    batch: Batch, calls: dict[str, list[Any]]
) -> tuple[list[tuple[str, list[Any], Any]], Exception | None]:
    """Run a batch of one call per job (in the order of `calls`: job id -> its items), going
    on past calls Redis refuses: (job id, items, reply) of each call that ran, and the first
    refusal (None when every call ran)."""
    answered: list[tuple[str, list[Any], Any]] = []
    refused: Exception | None = None
    replies = batch.execute(raise_on_error=False)
    for (job_id, items), reply in zip(calls.items(), replies, strict=True):
        if isinstance(reply, Exception):
            refused = refused or reply
        else:
            answered.append((job_id, items, reply))
    return answered, refused


def _share(total: int, parts: int, n: int) -> int:
    """Part n of `total` split over `parts` (the first ones get the remainder)."""
    return total // parts + (1 if n < total % parts else 0)


def _task_codes(job_id: str, indexes: Sequence[int], reply: Any) -> dict[tuple[str, int], int]:
    """A code per task from a per-job reply {0, {code per task}, ...}, or the job's own
    code for each of its tasks when the script refused the whole call."""
    per_task = reply[1] if reply[0] == 0 else [reply[0]] * len(indexes)
    return {(job_id, index): int(code) for index, code in zip(indexes, per_task, strict=True)}


def _limit_in_words(limit_id: str) -> str:
    """A limit id ("p:gpu", "j:<job>", "k:<key>") as `status` shows it."""
    kind, name = limit_id[:2], limit_id[2:]
    if kind == schema.LimitKind.POOL:
        return f"pool {name}"
    if kind == schema.LimitKind.JOB:
        return "max_running"
    return f"concurrency key {name}"


def _task_view(f: dict[str, bytes], waiting_for_limit: str | None = None) -> dict[str, Any]:
    """One task of `status`: the current attempt's fields (a new attempt clears the last
    one's error and finish time; `history` keeps them), seed 000's three times, and what a
    queued task waits for (a worker with its code, a slot of a full limit)."""
    state = text(f.get("s"))
    return {
        "state": state,
        "attempts": int(f.get("a", 0)),
        "handler": text(f.get("h")),
        "queued_at": seconds(f.get("tq")),
        "started_at": seconds(f.get("ts")),
        "finished_at": seconds(f.get("tf")),
        "error": text(f.get("e")),
        "progress": text(f.get("pg")),
        "created_at": seconds(f.get("tc")),  # written to Redis by the split
        "updated_at": seconds(f.get("tu") or f.get("tc")),  # last change of its fields
        "completed_at": seconds(f.get("tf")) if state in TERMINAL_TASK_STATES else None,
        "waiting_for": waiting_for(f),
        "waiting_for_limit": waiting_for_limit,
        "waiting_for_gate": waiting_for_gate(f),
    }


def waiting_for_gate(f: dict[str, bytes]) -> dict[str, Any] | None:
    """A queued task whose gate said no (gate_wait.lua): the gate, and since when."""
    raw = text(f.get(TaskField.GATE_WAIT.value[:-1]))
    if raw is None or text(f.get("s")) not in (TaskState.QUEUED, TaskState.RETRY_WAIT):
        return None
    since, _, gate = raw.partition("|")
    return {"gate": gate, "since": int(since) / 1000}


def waiting_for(f: dict[str, bytes]) -> dict[str, Any] | None:
    """A queued task that workers gave back for want of its code (give_back.lua): the task
    name it waits for a worker with, and since when."""
    raw = text(f.get("wf"))
    if raw is None or text(f.get("s")) not in (TaskState.QUEUED, TaskState.RETRY_WAIT):
        return None
    since, _, name = raw.partition("|")
    return {"task": name, "since": int(since) / 1000}
