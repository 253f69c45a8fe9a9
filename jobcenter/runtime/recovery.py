"""The recovery pass (ARCHITECTURE.md, Recovery): repairs whatever crashes, power loss and lost
messages left behind, so every job and task ends terminal. One pass at a time per
namespace (a singleton lease), each repair checked again inside its Lua script."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from jobcenter.model.reports import RecoveryReport
from jobcenter.model.spec import DEFAULT_QUEUE
from jobcenter.model.states import JobState, TaskState
from jobcenter.storage import limits
from jobcenter.storage.admin import trim_expired
from jobcenter.storage.keyspace.keys import NODE_QUEUE_PREFIX
from jobcenter.storage.keyspace.records import JobRecord
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.keyspace.schema import code as return_code
from jobcenter.storage.store import Store, served_member

from .archiver import archiver_for
from .leader import Leader

log = logging.getLogger(__name__)

SINGLETON = "recovery"
OK = return_code("OK")  # singleton: the lease is ours; finalize: the job ended
ALREADY = return_code("ALREADY")  # singleton: this round ran already
LEASES_PAGE = 1_000  # expired leases handled per read
LEADER_MESSAGES_MAX = 1_000  # due leader messages one pass runs at most
REPAIR_BATCH = 500  # tasks per repair script call: bounded work
ARCHIVE_STALE_MAX = 1_000  # jobs a pass archives per shard, whose archive step was interrupted


class Recovery:
    """One recovery pass for a namespace, run by `handler`."""

    def __init__(self, store: Store, handler: str) -> None:
        self.store = store
        self.handler = handler
        self.settings = store.settings
        self.report = RecoveryReport()
        self._lease_ms = int(self.settings.worker_timeout_seconds * 1000)
        self._served: set[str] | None = None  # read once per pass, when first needed

    def run(self, round_no: int = 0) -> RecoveryReport:
        """Run one pass unless another holds the lease or round `round_no` ran already."""
        # a pass killed half way blocks the next ones only until its handler would count as
        # gone; the lease is renewed as the pass goes
        lease_ms = self._lease_ms
        acquired = self.store.singleton(SINGLETON, "acquire", self.handler, lease_ms, round_no)
        if acquired != OK:
            self.report.ran = False
            self.report.skipped = (
                "this round ran already"
                if acquired == ALREADY
                else "another recovery pass holds the lease"
            )
            return self.report
        try:
            for shard in range(self.store.keys.shards):
                self._expired_leases(shard)
                self._slots(shard)
                self.store.keep_hashtables(shard)  # rule 10
                self._leader_messages(shard)
                for job_id in self.store.active_job_ids(shard):
                    self._job(job_id)
                    self._renew()
            self.report.trimmed = trim_expired(self.store)
            self._archive()
        finally:
            self.store.singleton(SINGLETON, "release", self.handler, lease_ms)
        if self.report.repairs:
            log.warning("recovery repaired: %s", self.report.to_dict())
        return self.report

    # -- rule 12: finished jobs whose archive step was interrupted; the archive's retention --

    def _archive(self) -> None:
        archiver = archiver_for(self.store)
        if archiver is None:
            return
        try:
            self.report.archived += archiver.archive_stale(self.store, ARCHIVE_STALE_MAX)
            self.report.archive_pruned += archiver.prune(self.store)
        except Exception as exc:  # the database down: the jobs wait in Redis, next pass
            log.warning("recovery could not reach the archive: %s", exc)

    # -- rule 1: dead handlers and expired leases (timed_out, then requeued or failed) -----

    def _expired_leases(self, shard: int) -> None:
        while True:
            pairs = self.store.expired_leases(shard, LEASES_PAGE)
            for outcome, n in self.store.expire(pairs).items():
                self.report.leases[outcome] = self.report.leases.get(outcome, 0) + n
            self._renew()
            if len(pairs) < LEASES_PAGE or self.report.leases.get("live") == len(pairs):
                return

    # -- rule 9: pool and limit slots held without a lease, counters off --------------------

    def _slots(self, shard: int) -> None:
        check = limits.reconcile(self.store, shard=shard)
        self.report.slots_leaked += check.leaked
        self.report.slots_corrected += check.corrected

    # -- rule 5: leader steps whose worker died are due again: run them here --------------

    def _leader_messages(self, shard: int) -> None:
        leader = Leader(self.store, self.handler)
        for _ in range(LEADER_MESSAGES_MAX):
            result = self.store.claim(self.handler, [], max_tasks=0, max_leader=1, shard=shard)
            if not result.leader:
                return
            for kind, job_id in result.leader:
                if leader.handle(kind, job_id) == "abandoned":  # rule 6
                    self.report.abandoned += 1
                else:
                    self.report.leader_steps += 1
            self._renew()

    def _renew(self) -> None:
        self.store.singleton(SINGLETON, "renew", self.handler, self._lease_ms)

    # -- rules 2-5 for one unfinished job ---------------------------------------------------

    def _job(self, job_id: str) -> None:
        store = self.store
        fields, first_task = store.job_fields_and_first_task(job_id)
        self.report.jobs_checked += 1
        job = JobRecord.from_hash(fields)
        state = job.state
        if state is not None and JobState(state).terminal:
            return
        if state is None or (not first_task and _tasks_written(job)):  # rule 11
            settled = store.settle_lost(job_id)
            if settled is not None:
                self.report.lost += 1
                log.error("job %s: Redis lost its keys; settled %s", job_id, settled)
            return
        now = self.store.now_ms()
        idle_ms = now - (job.updated_at if job.updated_at is not None else now)
        if job.stop:  # a cancel (or abandon) under way: its leader may have died
            limit = job.tasks if state == JobState.RUNNING else job.written
            if job.cancel_cursor < limit:
                self._resubmit(job_id, "cancel")
        if state == JobState.PENDING:
            if not job.stop:
                self._resubmit(job_id, "split")
            return
        if job.left == 0:
            if idle_ms >= self.settings.worker_timeout_seconds * 1000:
                code, _ = store.finalize(job_id)
                self.report.finalized += code == OK
            else:
                self._resubmit(job_id, "finalize")
            return
        if store.has_frontier(job_id):
            self._resubmit(job_id, "continue")
        self._tasks(job_id, now, job.queue if job.queue is not None else DEFAULT_QUEUE)

    def _resubmit(self, job_id: str, kind: str) -> None:
        if self.store.resubmit(job_id, kind):
            self.report.resubmitted[kind] = self.report.resubmitted.get(kind, 0) + 1

    def _tasks(self, job_id: str, now: int, job_queue: str) -> None:
        states = self.store.task_field(job_id, TaskField.STATE)
        by_state: dict[str, list[str]] = defaultdict(list)
        for index, state in states.items():
            by_state[state].append(index)

        parked = by_state[TaskState.QUEUED] + by_state[TaskState.RETRY_WAIT]
        dead = self._on_dead_nodes(job_id, parked, now) if parked else {}
        for node, indexes in dead.items():
            error = (
                f"no live worker on its node {node!r} for "
                f"{self.settings.worker_timeout_seconds:g} s"
            )
            for batch in _batches(indexes):
                repaired, failed = self.store.repair_counts(job_id, "node", batch, error)
                self.report.node_retried += repaired - failed
                self.report.node_failed += failed
        gone = {i for indexes in dead.values() for i in indexes}
        parked = [i for i in parked if i not in gone]  # the node rule came first
        unrunnable = self._without_worker(job_id, parked, now, job_queue)
        for error, indexes in unrunnable.items():
            for batch in _batches(indexes):
                self.report.no_worker += self.store.repair(job_id, "abandon", batch, error)
        given_up = {i for indexes in unrunnable.values() for i in indexes}
        alive = [i for i in parked if i not in given_up]
        for batch in _batches(alive):
            self.report.requeued += self.store.repair(job_id, "requeue", batch)
        running = by_state[TaskState.RUNNING] + by_state[TaskState.TIMED_OUT]
        for batch in _batches(running):  # a running task must always hold a lease
            self.report.leased += self.store.repair(job_id, "lease", batch)

        waiting = by_state[TaskState.WAITING]
        if waiting:
            parents: dict[str, list[str]] = defaultdict(list)
            for index, csv in self.store.task_field(job_id, TaskField.CHILDREN).items():
                for child in csv.split(","):
                    parents[child].append(index)
            # every parent ended: its trigger rule decides (repair.lua), nothing else would
            ready = [i for i in waiting if all(_ended(states.get(p)) for p in parents[i])]
            for batch in _batches(ready):
                items = [x for i in batch for x in (i, len(parents[i]), *parents[i])]
                self.report.released += self.store.repair(job_id, "release", items)

    def _without_worker(
        self, job_id: str, parked: list[str], now: int, job_queue: str
    ) -> dict[str, list[str]]:
        """Tasks a worker gave back for want of their code (give_back.lua) that have waited
        past the limit while no live worker serving their queue had their task name
        registered, by the error they fail with."""
        waiting = self.store.task_field(job_id, TaskField.WAITING_FOR) if parked else {}
        limit_ms = self.settings.unknown_task_timeout_seconds * 1000
        overdue: dict[str, str] = {}  # index -> task name
        for index in parked:
            since, _, name = waiting.get(index, "").partition("|")
            if since and now - int(since) >= limit_ms:
                overdue[index] = name
        if not overdue:
            return {}
        if self._served is None:
            self._served = self.store.served_since(int(now - limit_ms))
        queues = self.store.task_field(job_id, TaskField.QUEUE)
        out: dict[str, list[str]] = defaultdict(list)
        for index, name in overdue.items():
            queue = queues.get(index, job_queue)
            if served_member(queue, name) not in self._served:
                error = (
                    f"no live worker has task {name!r} registered (queue {queue!r}): waited "
                    f"{self.settings.unknown_task_timeout_seconds:g} s for one; start a "
                    "worker that imports its module"
                )
                out[error].append(index)
        return out

    def _on_dead_nodes(self, job_id: str, indexes: list[str], now: int) -> dict[str, list[str]]:
        """Tasks pinned to a node none of whose workers was alive (heartbeat, or presence
        kept by its rq child: a stalled worker is alive) for the worker timeout, while they
        waited that long, by node. (A timed_out attempt is rule 1's: it may still report.)"""
        timeout_ms = self.settings.worker_timeout_seconds * 1000
        queues = self.store.task_field(job_id, TaskField.QUEUE)
        pinned = [i for i in indexes if queues.get(i, "").startswith(NODE_QUEUE_PREFIX)]
        if not pinned:
            return {}
        since = self.store.queued_since(job_id, pinned)
        seen = self.store.node_heartbeats()  # node name -> last sign of life of any worker
        dead: dict[str, list[str]] = defaultdict(list)
        for index, queued_at in zip(pinned, since, strict=True):
            node = queues[index][len(NODE_QUEUE_PREFIX) :]
            last = seen.get(node, 0)
            waited = now - (queued_at or now)
            if now - last > timeout_ms and waited > timeout_ms:
                dead[node].append(index)
        return dead


def _batches(items: list[Any], size: int = REPAIR_BATCH) -> list[list[Any]]:
    return [items[k : k + size] for k in range(0, len(items), size)]


def _tasks_written(job: JobRecord) -> bool:
    """Whether the job's tasks hash must hold its tasks: it runs, or a split wrote some."""
    return job.state == JobState.RUNNING or job.written > 0


def _ended(state: str | None) -> bool:
    return state is not None and TaskState(state).terminal
