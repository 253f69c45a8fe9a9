"""The worker's claim loop (tasks from its owned queues, as many as its slots are free) and
leader loop (leader messages and expired-lease sweeps), and how what a claim took is handed
to the runner."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from jobcenter.storage.keyspace import schema
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT
from jobcenter.storage.server.errors import RedisError, trouble
from jobcenter.storage.server.outages import Backoff
from jobcenter.storage.store import SWEEP_MAX, StartedTask

from .state import CLAIM_BATCH_MAX, Running, WorkerState

log = logging.getLogger(__name__)

RETRY_WAKE_MIN_SECONDS = 0.005  # shortest wait for a due retry (Redis timeouts are coarse)
LEADER_BATCH = 4  # leader messages taken per claim
PAUSED_POLL_SECONDS = 0.5  # a loop paused while Redis may evict looks again this often


class Claiming(WorkerState):
    """The claim loop and the leader loop of a worker."""

    def _claim_loop(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            if not self.eviction.safe.is_set():  # Redis may evict: claim nothing
                self.stopping.wait(PAUSED_POLL_SECONDS)
                continue
            try:
                # claim again at once only while the last claim filled what it asked for: a
                # short one drained the queues, and what is queued next brings a wake-up token
                if self._claim_once() and self.more_ready:
                    backoff.reset()
                    continue
                if self.options.burst and not self.running and self.store.idle(self.queues):
                    return
                self._wait_for_work()
                backoff.reset()
            except RedisError as exc:
                backoff.wait(self.stopping, f"claim: {trouble(exc)}")

    def _claim_once(self) -> bool:
        """One claim round trip per owned shard; True if it found any task."""
        with self.lock:  # held from a completion taking children meanwhile
            free = min(self._free_slots(), CLAIM_BATCH_MAX)
            if free <= 0:
                # no slot for what a wake-up token may have announced: claim once one frees
                self.more_ready = True
                return False
            self.taking += free
        try:
            return self._claim_shards(free)
        finally:
            self._stop_taking(free)

    def _stop_taking(self, slots: int) -> None:
        with self.lock:
            self.taking -= slots
            self.lock.notify_all()

    def _claim_shards(self, free: int) -> bool:
        found = more = False
        sweep = 0 if self.options.leader else SWEEP_MAX  # the leader thread sweeps
        self.next_retry_ms = -1
        for shard, queues in self.ownership.queues_by_shard(self.queues).items():
            with self.starting:
                result = self.store.claim(
                    self.handler,
                    queues,
                    max_tasks=free,
                    max_leader=0,
                    shard=shard,
                    sweep=sweep,
                )
                self._run(result.tasks)
            if result.next_retry_ms >= 0 and (
                self.next_retry_ms < 0 or result.next_retry_ms < self.next_retry_ms
            ):
                self.next_retry_ms = result.next_retry_ms
            self._expire(result.expired)
            self._note_newer(result.newer)
            more = more or len(result.tasks) == free
            free -= len(result.tasks)
            found = found or bool(result.tasks)
        self.more_ready = more
        return found

    def _note_newer(self, newer: dict[str, int]) -> None:
        """Say once per queue and protocol that a newer release's tasks wait there: this
        worker leaves them in place for a worker of that release (claim.lua)."""
        for queue, protocol in newer.items():
            if (queue, protocol) not in self.newer_seen:
                self.newer_seen.add((queue, protocol))
                log.warning(
                    "queue %r holds tasks of a newer jobcenter release (protocol %d; this "
                    "worker speaks %d): left in the queue for a worker of that release; "
                    "upgrade this worker to run them",
                    queue,
                    protocol,
                    schema.PROTOCOL,
                )

    def _expire(self, expired: list[tuple[str, int]]) -> None:
        if expired:
            log.info("expired leases: %s", self.store.expire(expired))

    def _leader_loop(self) -> None:
        """Leader messages (split, continue, cancel, finalize, compact) and expired-lease
        sweeps. The compactions a claim took go together, after the others."""
        backoff = Backoff()
        while not self.stopped.is_set():
            if not self.eviction.safe.is_set():  # Redis may evict: take no leader step
                self.stopped.wait(PAUSED_POLL_SECONDS)
                continue
            try:
                found = False
                for shard in self.ownership.owned(LEADER_SEGMENT):
                    result = self.store.claim(
                        self.handler, [], max_tasks=0, max_leader=LEADER_BATCH, shard=shard
                    )
                    compactions = [job_id for kind, job_id in result.leader if kind == "compact"]
                    for kind, job_id in result.leader:
                        if kind != "compact":
                            self._lead(
                                functools.partial(self.leader.handle, kind, job_id),
                                f"leader step {kind} of job {job_id}",
                            )
                    if compactions:
                        self._lead(
                            functools.partial(self.leader.compact_many, compactions),
                            f"compaction of jobs {', '.join(compactions)}",
                        )
                    self._expire(result.expired)
                    found = found or bool(result.leader or result.expired)
                if not found:
                    self.leader_waits.wait(self.store.settings.idle_wait_seconds)
                backoff.reset()
            except RedisError as exc:  # the message comes back when its lease ends
                backoff.wait(self.stopped, f"leader: {trouble(exc)}")

    def _lead(self, step: Callable[[], object], what: str) -> None:
        """Run one leader step (or a batch of compactions): a step that fails is logged."""
        try:
            step()
        except RedisError:
            raise
        except Exception:  # one bad job must not take the worker down; its message comes back
            log.exception("%s failed", what)

    def _wait_for_work(self) -> None:
        with self.lock:
            while self._free_slots() <= 0 and not self.stopping.is_set():
                self.lock.wait()  # woken by the reporter when a slot frees
        if self.stopping.is_set() or self.more_ready:
            return  # a slot is free and the last claim left work behind: claim it now
        timeout = self.store.settings.idle_wait_seconds
        if self.next_retry_ms >= 0:  # wake when the next retry is due, not a second later
            timeout = min(timeout, max(RETRY_WAKE_MIN_SECONDS, self.next_retry_ms / 1000))
        self.task_waits.wait(timeout)

    def _task_wake_keys(self, shard: int) -> list[str]:
        """The wake-up lists of the queues this worker owns in `shard`, and the shard's
        freed-slot list: parked tasks are in no queue, so a slot given back wakes through it."""
        queues = self.ownership.queues_by_shard(self.queues).get(shard, [])
        if not queues:
            return []
        return [
            *(self.store.keys.wake(shard, q) for q in queues),
            self.store.keys.freed_wake(shard),
        ]

    def _owned_changed(self, taken: set[tuple[int, str]]) -> None:
        """Listen on the shards owned now; claim at once in those just taken."""
        new_shards = {shard for shard, _ in taken}
        self.task_waits.listen_to(self.ownership.queues_by_shard(self.queues), new_shards)
        self.leader_waits.listen_to(self.ownership.owned(LEADER_SEGMENT), new_shards)

    def _run(self, tasks: list[StartedTask]) -> None:
        if not tasks:
            return
        with self.lock:
            for task in tasks:
                self.running[(task.job_id, task.index)] = Running(task)
        self._submit(tasks)

    def _submit(self, tasks: list[StartedTask]) -> None:
        """Hand tasks registered in `running` to the runner."""
        for task in tasks:
            self.runner.submit(task, self._report_progress, self._ended)
