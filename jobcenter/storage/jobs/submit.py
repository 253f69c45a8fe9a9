"""Submitting jobs: one script call stores a job (or several small ones of one shard), and
the wait until Redis has them durably."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
from redis import Redis

from jobcenter.config import ACKED, REPLICATED, Settings
from jobcenter.errors import (
    IdempotencyConflict,
    raise_for_code,
)
from jobcenter.model import codec
from jobcenter.model.fire_times import fill_spec, fire_datetime, unfilled
from jobcenter.model.ordering import learned_fields, task_ranks
from jobcenter.model.placeholders import FireValues
from jobcenter.model.spec import JobSpec, spec_digest, spec_from_any
from jobcenter.model.tags import format_tags

from ..keyspace import schema
from ..keyspace.layout import Layout, job_queues
from ..keyspace.schema import JobField
from ..lua import Batch
from ..server.durability import GroupCommit
from ..server.replies import text
from .base import JobMeta, StoreBase

log = logging.getLogger(__name__)

INLINE_SPLIT_MAX = 500  # a job this small is split by its submit script (one short call)
# One submit call stores jobs of one shard while it writes at most this many tasks (one job
# of INLINE_SPLIT_MAX at most, or many small ones) and at most SUBMIT_CALL_JOBS jobs: the
# job context's cost is paid once a call, and a call stays as short as one inline split.
SUBMIT_CALL_TASKS = INLINE_SPLIT_MAX
SUBMIT_CALL_JOBS = 100
# Learned run times a submit reuses before reading them again: moving averages of many runs
# drift slowly, and a read of its own would cost a one-job submit a second round trip.
LEARNED_CACHE_SECONDS = 10.0
# A field nothing had learned yet is read again after this: the run after a job's first
# ranks by what that run taught, and a burst of submits of a new job reads once a second.
LEARNED_ABSENT_SECONDS = 1.0
LEARNED_CACHE_MAX = 100_000  # fields kept; past this the cache starts afresh
# A submit waits at most this for its fsync: two of `everysec`'s fsyncs. Kept under half the
# client's socket timeout (redis-py 8 defaults to 5 s), so the wait never reads as a dead link.
WAITAOF_TIMEOUT_MS = 2_000
IDEMPOTENCY_CONFLICT = schema.code("IDEMPOTENCY_CONFLICT")  # submit.lua


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


class Submits(StoreBase):
    """Submitting jobs, and waiting until Redis has them durably."""

    def __init__(self, client: Redis, settings: Settings) -> None:
        super().__init__(client, settings)
        self._waitaof: bool | None = None  # learnt from the server on first submit
        # learned estimates read for submits: field -> ms, fields found never learned, and when
        self._learned: dict[str, float] = {}
        self._learned_read_at = 0.0
        self._absent: set[str] = set()
        self._absent_read_at = 0.0
        self._learned_lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._group_commit = GroupCommit(self._confirm_fsync)

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
        fired = [(schedule_id, fire_time)] if schedule_id or fire_time is not None else None
        return self.submit_many([spec], fired=fired)[0]

    def submit_many(
        self,
        specs: Sequence[JobSpec],
        *,
        fired: Sequence[tuple[str | None, float | None]] | None = None,
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
        fired: Sequence[tuple[str | None, float | None]] | None,
    ) -> PreparedSubmit:
        """The submit calls of `specs` in one batch, not sent yet."""
        origins = fired if fired is not None else [(None, None)] * len(specs)
        # a hand-built JobSpec is checked too; placeholders are filled once, here
        specs = [
            _filled(spec_from_any(spec), *origin)
            for spec, origin in zip(specs, origins, strict=True)
        ]
        for spec in specs:
            self.webhook_rules.check_notify(spec.notify)
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
        """learned_estimates, as read at most LEARNED_CACHE_SECONDS ago (a field found
        never learned: LEARNED_ABSENT_SECONDS ago): repeated submits of the same jobs read
        them once."""
        fields = {field for spec in specs for field in learned_fields(spec)}
        with self._learned_lock:
            now = time.monotonic()
            if now - self._learned_read_at > LEARNED_CACHE_SECONDS:
                self._learned.clear()
                self._learned_read_at = now
            if now - self._absent_read_at > LEARNED_ABSENT_SECONDS:
                self._absent.clear()
                self._absent_read_at = now
            known = {name: self._learned[name] for name in fields if name in self._learned}
            missing = sorted(fields.difference(known, self._absent))
        if missing:
            found = self._read_estimates(missing)
            known.update(found)
            with self._learned_lock:
                if len(self._learned) + len(self._absent) + len(missing) > LEARNED_CACHE_MAX:
                    self._learned.clear()
                    self._absent.clear()
                self._learned.update(found)
                self._absent.update(name for name in missing if name not in found)
        return known

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
        # ranked once here: a leader's split reuses the ranks
        layout = Layout(spec_dict, fired=(schedule_id, fire_time))
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
            JobField.TAGS: format_tags(spec.tags) if spec.tags else None,
            JobField.TIMEOUT: None if spec.timeout is None else int(spec.timeout * 1000),
            JobField.SLA: None if spec.sla is None else int(spec.sla * 1000),
            JobField.AWAITS: layout.awaits(),
            **_notify_fields(spec),
        }
        fields.update({k: v for k, v in optional.items() if v is not None})
        job_args = [x for item in fields.items() for x in item]
        task_args: list[Any] = []
        roots: list[int] = []
        if inline:  # small: written and queued by the submit script itself
            task_args, roots = layout.pairs(0, len(layout)), layout.roots
        meta = self._remember(job_id, JobMeta(tuple(queues), spec.idempotency_key))
        own_keys = self._bound_keys(job_id, spec.idempotency_key)
        job_key = own_keys[0]
        own_keys.append(keys.owner_jobs(shard, spec.owner) if spec.owner else job_key)
        own_keys.append(keys.schedule_jobs(shard, schedule_id) if schedule_id else job_key)
        own_keys += [keys.tag_jobs(shard, f"{k}={v}") for k, v in spec.tags]
        args = [job_id, len(job_args), *job_args, len(task_args), *task_args, len(roots), *roots]
        args.append(len(spec.tags))
        return SubmitJob(job_id, shard, meta, len(spec.tasks) if inline else 0, own_keys, args)

    def wait_durable(self) -> bool:
        """With durability `fsynced`, where the server has WAITAOF (Redis >= 7.2) and AOF on
        with fsyncs: block until every write this process had acknowledged is fsynced to the
        local AOF; one WAITAOF serves all the threads waiting (group commit). With
        `replicated`, until one replica has them (WAIT 1, grouped the same way). True if that
        was confirmed. Elsewhere (`acked`) the writes are in Redis memory and its AOF
        buffer, which a Redis crash does not lose (docs: Durability)."""
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


def _filled(spec: JobSpec, schedule_id: str | None, fire_time: float | None) -> JobSpec:
    """`spec` with its placeholders filled (in UTC: a schedule fills them in its own zone
    before, and a spec filled already has none left); SpecError when it has some but no
    fire time."""
    at = fire_datetime(fire_time)
    if at is None:
        error = unfilled(spec)
        if error is not None:
            raise error
        return spec
    return fill_spec(spec, FireValues(at, schedule_id))


def _notify_fields(spec: JobSpec) -> dict[str, str]:
    """The job-hash fields of the spec's `notify:` (what finalize_job in _job.lua reads)."""
    notify = spec.notify
    if notify is None:
        return {}
    fields = {
        JobField.NOTIFY_ON.value: ",".join(notify.on),
        JobField.NOTIFY_TO.value: ",".join(notify.channels),
    }
    if notify.webhook:
        fields[JobField.WEBHOOK.value] = notify.webhook
    return fields
