"""Attempts, the follower's fast path: claim, reserve, start, complete, fail, heartbeat, expire,
give back, release and gate waits, each one script call (a pipeline for many jobs)."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import redis

from jobcenter.model import codec
from jobcenter.model.states import TaskState

from ..keyspace import schema
from ..keyspace.schema import TaskField
from ..lua import Batch
from ..server.replies import text
from .base import JobMeta, StoreBase

SWEEP_MAX = 100  # expired leases reported per claim: bounded work on the fast path
# A timed_out attempt's worker may still report within a third of a lease (a late heartbeat
# or result after a pause) before the attempt is run again or failed.
LEASE_GRACE_DIVISOR = 3
LEADER_TIMEOUT_FACTOR = 1.0  # a leader step not renewed within one lease is taken over
# Random bytes of a claim's nonce (hex in the fencing token): unique per claim without any
# counter of Redis's, which a restart from an older snapshot or a failover can roll back.
NONCE_BYTES = 8
HEARTBEAT_CANCELLED = schema.code("ITEM_JOB_STOPPED")  # heartbeat.lua, per attempt


# What complete.lua gets for a task that returned None: nothing is stored (a succeeded task
# without a result field returned None), so tasks without results cost no memory.
NO_RESULT = b""
# Jobs per complete.lua call: each brings its own releases (up to COMPLETE_FRONTIER_BUDGET
# children) to the call, so a call's work stays a few ms.
COMPLETE_JOBS_MAX = 8
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
        return {name: unpack_input(value) for name, value in self.inputs}


def unpack_input(value: InputValue) -> Any:
    if isinstance(value, list):
        return [None if item is None else codec.unpack(item) for item in value]
    return None if value is None else codec.unpack(value)


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


class Attempts(StoreBase):
    """The follower's fast path: claim, reserve, start, complete, fail, heartbeat, expire,
    give back, release, gate waits."""

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
        ran_ms: Mapping[tuple[str, int], int] | None = None,
    ) -> tuple[dict[tuple[str, int], int], list[StartedTask]]:
        """Complete (job, index, fencing token[, result]) attempts, each result (msgpack;
        default NO_RESULT) stored with its success, and its run time (`ran_ms`, by (job,
        index): what the worker measured; else Redis time since it started) learned for
        critical_path; returns a code per task and the tasks this
        worker took to run at once, from `take_queues`: released children, then the next
        queued tasks of the same jobs (at most `take_max` for its free slots, and up to
        `prefetch` more, queued before the call and sorting before `prefetch_before` and
        before the first child of what it takes: complete.lua). One call per shard carries the
        jobs' tasks (COMPLETE_JOBS_MAX jobs a call), sharing the budget. RefusedInPart when
        Redis refused some jobs' parts (their tasks have no code)."""
        spawned = self.spawn_children(handler, done)  # type: ignore[attr-defined]
        by_job: dict[str, list[tuple[int, str, bytes, int | str]]] = defaultdict(list)
        ran = ran_ms or {}
        for job_id, index, token, *result in done:
            if (job_id, index) not in spawned:  # those wait for their child job (waits.py)
                item = (index, token, result[0] if result else NO_RESULT)
                by_job[job_id].append((*item, ran.get((job_id, index), "")))
        nonce = new_nonce()  # of the attempts the calls start
        budget = (take_max, prefetch, prefetch_before)
        codes: dict[tuple[str, int], int] = dict(spawned)
        taken: list[StartedTask] = []
        refused: Exception | None = None
        # the parts a part that raised kept from running go again (taking nothing): a job
        # whose part fails never holds up another's
        while by_job:
            replies = self._complete_round(handler, nonce, by_job, take_queues, budget)
            not_run: dict[str, list[tuple[int, str, bytes, int | str]]] = {}
            for job_id, reply in replies.items():
                if reply is None:
                    not_run[job_id] = by_job[job_id]
                elif isinstance(reply, Exception):
                    refused = refused or reply
                else:
                    indexes = [item[0] for item in by_job[job_id]]
                    codes.update(_task_codes(job_id, indexes, reply))
                    if reply[0] >= 0:
                        taken += started_tasks(job_id, reply[2], handler, nonce)
            by_job, budget = not_run, (0, 0, None)
        if refused is not None:
            raise RefusedInPart(refused, codes, taken)
        return codes, taken

    def _complete_round(
        self,
        handler: str,
        nonce: str,
        by_job: Mapping[str, list[Any]],
        take_queues: Sequence[str],
        budget: tuple[int, int, bytes | None],
    ) -> dict[str, Any]:
        """One pipelined round of complete.lua calls for `by_job`, the calls sharing the take
        `budget` (free slots, prefetch, its bound): each job's reply, its call's error when
        Redis refused the call, or None for a part not run (after a part that raised)."""
        take_max, prefetch, prefetch_before = budget
        batch = self.scripts.batch()
        calls = self._complete_calls(by_job)
        for n, jobs in enumerate(calls):
            share = _share(take_max, len(calls), n)
            extra = _share(prefetch, len(calls), n)
            take: int | str = share
            if extra:
                take = f"{share}+{extra}"
                if prefetch_before is not None:
                    take += "@" + prefetch_before.decode()
            args = [handler, nonce, self.settings.lease_ms, take, len(take_queues), *take_queues]
            self._complete_call(jobs, by_job, args, batch)
        replies: dict[str, Any] = {}
        for jobs, reply in zip(calls, batch.execute(raise_on_error=False), strict=True):
            if isinstance(reply, Exception):
                replies.update(dict.fromkeys(jobs, reply))
            else:
                replies.update(zip(jobs, reply, strict=True))
        return replies

    def _complete_calls(self, by_job: Mapping[str, Any]) -> list[list[str]]:
        """The jobs of each complete.lua call: those of one shard together (one hash slot),
        COMPLETE_JOBS_MAX at most, in the order they came."""
        by_shard: dict[int, list[list[str]]] = {}
        for job_id in by_job:
            calls = by_shard.setdefault(self.keys.job_shard(job_id), [[]])
            if len(calls[-1]) == COMPLETE_JOBS_MAX:
                calls.append([])
            calls[-1].append(job_id)
        return [jobs for calls in by_shard.values() for jobs in calls]

    def _complete_call(
        self, jobs: Sequence[str], by_job: Mapping[str, Any], args: list[Any], batch: Batch
    ) -> None:
        """Add one complete.lua call for `jobs` (of one shard) to `batch`: the first job's
        context, with the queues of every job; then each further job's own keys."""
        first = jobs[0]
        keys, argv = self._cached_context(first, True)
        queues = self.job_meta(first).queues
        more = [q for job_id in jobs[1:] for q in self.job_meta(job_id).queues if q not in queues]
        if more:  # rare: jobs of other queues in one call
            all_queues = tuple(dict.fromkeys([*queues, *more]))
            keys, argv = self._context(first, JobMeta(all_queues, self.job_meta(first).idem))
        keys = [*keys, self.keys.estimates(self.keys.job_shard(first))]
        args = [*argv, *args, len(jobs)]
        for job_id in jobs:
            if job_id != first:
                keys += self._bound_keys(job_id, self.job_meta(job_id).idem)
            items = by_job[job_id]
            args += [job_id, len(items), *(x for item in items for x in item)]
        batch.add("complete", keys, args)

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
