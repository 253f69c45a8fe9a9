"""The worker daemon: claims ready tasks and leader messages, runs tasks in a pool,
heartbeats their leases, reports completions and failures, and shuts down gracefully.

Threads: the main thread claims tasks (blocking on wake-up lists when idle), a leader thread
runs leader messages and sweeps expired leases (so leader steps never wait for a free task
slot), notifier threads deliver job notifications (runtime/notifier.py), a heartbeat
thread renews leases; the runner's threads or child processes run the tasks. The thread on
which an attempt ends reports it, with whatever else ended meanwhile, unless another is
reporting already (that one takes it along): no hand-off to a reporter thread.

Every loop rides out any Redis error (unreachable, out of memory, read-only, busy): it logs
it, backs off and goes on, and what it had to write waits and is tried again. A loop that
fails otherwise (a bug) takes the process down with a non-zero exit, its running tasks given
back, so a supervisor restarts it: never a live process that does no work.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from jobcenter.model.ids import handler_id
from jobcenter.model.spec import DEFAULT_QUEUE
from jobcenter.schedules import run_ticker
from jobcenter.storage import schema
from jobcenter.storage.errors import RedisError, trouble
from jobcenter.storage.keys import LEADER_SEGMENT, node_queue
from jobcenter.storage.outages import Backoff
from jobcenter.storage.refusals import (
    JOB_GONE,
    STALE_TOKEN,
    STOPPED,
    UNKNOWN_ATTEMPT,
    count_unknown,
    what_it_returned,
    why_refused,
)
from jobcenter.storage.store import (
    SWEEP_MAX,
    RefusedInPart,
    StartedTask,
    Store,
)

from . import exits, registry, rq_runner
from .eviction_guard import EvictionGuard
from .execution import Outcome, ProcessRunner, ThreadRunner, task_label
from .leader import Leader
from .notifier import DELIVERY_THREADS, Notifier
from .pulse import Pulse
from .segments import Ownership, ShardWaits
from .stopping import Stop, StopCounts, StopReason, log_stop

log = logging.getLogger(__name__)

RETRY_WAKE_MIN_SECONDS = 0.005  # shortest wait for a due retry (Redis timeouts are coarse)

CLAIM_BATCH_MAX = 256  # tasks reserved per claim: one round trip serves many tasks
# A completion of short tasks (each ran under PREFETCH_RUN_MAX_SECONDS) takes up to this many
# tasks per slot beyond the free slots (thread pool only): started, leased and heartbeated
# here, they wait at most about one short task for a thread, so no thread waits for the
# completion's round trip; a stopping worker gives back those no thread has begun.
PREFETCH_PER_SLOT = 1
PREFETCH_RUN_MAX_SECONDS = 0.05
REPORT_BATCH_MAX = 512  # finished attempts reported per round trip
LEADER_BATCH = 4  # leader messages taken per claim
REPORT_RETRY_MAX_SECONDS = 1.0  # a refused report is tried again at least this often
# A refused heartbeat is tried again this many times per heartbeat interval, so once Redis
# takes writes again each lease is renewed well within the grace a timed-out attempt gets.
HEARTBEAT_RETRIES_PER_INTERVAL = 4
PROGRESS_MIN_INTERVAL_SECONDS = 1.0  # a task's progress goes out at once at most this often
GATE_GAVE_UP = schema.code("ITEM_ALREADY")  # gate_wait.lua: the task failed
COMPLETED_ALREADY = schema.code("ITEM_ALREADY")  # complete.lua: reported before
# A task this worker has no code for waits this long at least before it is claimed again (no
# hot loop on the worker that lacks it), and at most this long (a worker that has the code,
# once started, gets it soon); in between, a quarter of the time it has waited so far, and
# the least while a live worker serves it.
GIVE_BACK_DELAY_MIN_MS = 500
GIVE_BACK_DELAY_MAX_MS = 10_000
GIVE_BACK_WAIT_SECONDS = 5.0  # a forced stop waits this long at most for a claim under way
FORCED_STOP_MAX_SECONDS = 60.0  # past this, a forced stop that hangs (Redis hung) exits anyway
EXIT_LOOP_FAILED = 70  # exit code when a loop met an error it cannot go on from (EX_SOFTWARE)
# Why an attempt whose heartbeat Redis refused is no longer live, by the refusal's code (any
# other refusal: the task is not running any more).
STOP_REASONS = {
    **{code: StopReason.CANCELLED for code in STOPPED},
    STALE_TOKEN: StopReason.TAKEN_OVER,
    UNKNOWN_ATTEMPT: StopReason.TAKEN_OVER,  # Redis lost its start: the task runs again
    JOB_GONE: StopReason.GONE,
}
PAUSED_POLL_SECONDS = 0.5  # a loop paused while Redis may evict looks again this often


@dataclass
class Options:
    queues: list[str] = field(default_factory=lambda: [DEFAULT_QUEUE])
    node: str | None = None
    concurrency: int = 4
    pool: str = "thread"  # or "process" for CPU-bound tasks
    burst: bool = False
    modules: list[str] = field(default_factory=list)
    leader: bool = True
    recovery: bool = True  # supervise an rq worker for the recovery job, and enqueue it


@dataclass
class Running:
    task: StartedTask
    progress: str = ""
    progress_sent_at: float = 0.0  # monotonic time the last progress went out at once


class Worker:
    """One `jobcenter worker` process."""

    def __init__(self, store: Store, options: Options) -> None:
        self.store = store
        self.options = options
        self.handler = handler_id()
        self.queues = ([node_queue(options.node)] if options.node else []) + options.queues
        self.leader = Leader(store, self.handler)
        self.running: dict[tuple[str, int], Running] = {}
        self.outcomes: deque[Outcome] = deque()  # ended attempts waiting to be reported
        self.reporting = threading.Lock()  # held by the one thread reporting them
        self.lock = threading.Condition()
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.stop_counts = StopCounts(store.keys)  # attempts stopped, for the metrics
        self.runner = self._make_runner()
        self.completed = 0
        self.failed = 0
        self.taking = 0  # slots a completion call under way may fill with what it takes
        self.rq_child: Any = None
        self.next_retry_ms = -1  # from the last claim: when a retry in our queues is due
        # the last claim filled every slot it asked for: more may be ready, so a freed slot
        # claims at once instead of waiting for a wake-up token
        self.more_ready = False
        # the shards this worker polls (owned segments): its queues', and with a leader
        # thread the leader messages'; each idle loop waits on the shards it owns
        segments = [*self.queues, *([LEADER_SEGMENT] if options.leader else [])]
        self.ownership = Ownership(store, self.handler, segments, self._owned_changed)
        self.task_waits = ShardWaits(
            store, self.handler, self._task_wake_keys, self._thread, "task-wait"
        )
        self.leader_waits = ShardWaits(
            store, self.handler, lambda s: [store.keys.leader_wake(s)], self._thread, "lead-wait"
        )
        self.pulse = Pulse()  # what health.py reports: the heartbeat's rounds
        self.eviction = EvictionGuard(store)  # claims nothing while Redis may evict keys
        self.exiting = threading.Event()  # a forced stop is under way (give_back_and_exit)
        self.lacking: set[str] = set()  # task names given back for want of their code
        self.newer_seen: set[tuple[str, int]] = set()  # (queue, protocol) of a newer release
        # held while tasks are started and registered in `running`, so the reporter never
        # takes a task just started by a claim for one it has to adopt (_adopt), and a forced
        # stop gives back every task a claim started (reentrant: a signal handler takes it)
        self.starting = threading.RLock()

    def _make_runner(self) -> ThreadRunner | ProcessRunner:
        limit = self.store.settings.result_max_bytes
        if self.options.pool == "process":
            return ProcessRunner(
                self.options.concurrency,
                self.handler,
                self.options.modules,
                self._slot_freed,
                limit,
                self._attempt_stopped,
            )
        return ThreadRunner(
            self.options.concurrency, self.handler, self._slot_freed, limit, self._attempt_stopped
        )

    def _slot_freed(self) -> None:
        """A runner's thread or child returned. Its slot is free only if its outcome was
        reported already (it ran past its timeout, or was stopped); otherwise the report
        frees it and wakes the claim loop then: no wake-up per task for nothing."""
        with self.lock:
            if self._free_slots() > 0:
                self.lock.notify_all()

    # -- lifecycle -------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: stop claiming, finish what runs. Second: give it back, exit."""

        def on_signal(signum: int, _frame: Any) -> None:
            if self.stopping.is_set():
                self.give_back_and_exit()
            log.info(
                "worker %s stopping (signal %d): finishing running tasks", self.handler, signum
            )
            self.stopping.set()
            with self.lock:
                self.lock.notify_all()
            # give the owned shards back and end the blocking waits now, from another
            # thread and connection
            threading.Thread(target=self._stop_polling, daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _stop_polling(self) -> None:
        """A stopping worker claims nothing more: its shards go to the other workers at
        once, the claim loop's wait ends, and no listener stays blocked in Redis. (The
        leader loop, owning nothing now, waits on until the worker has stopped.)"""
        listened = set(self.task_waits.shards) | set(self.leader_waits.shards)
        try:
            self.ownership.give_back_all()
        except RedisError as exc:  # its leases expire instead
            log.warning("could not give the owned shards back (%s)", exc)
        self.task_waits.close()
        with contextlib.suppress(RedisError):
            self.store.poke(self.handler, sorted(listened))

    def give_back_and_exit(self, exit_code: int = 0) -> NoReturn:
        """Forced stop: kill what runs, give it back to the queues, exit. Whatever fails on
        the way (Redis down), the process exits; leases then expire and recovery re-drives."""
        try:
            self.exiting.set()
            self.stopping.set()  # nothing more is claimed, nor any child taken on completion
            # nor is a claim left half done: what it started is given back too
            self.starting.acquire(timeout=GIVE_BACK_WAIT_SECONDS)
            with self.lock:
                running = [
                    (r.task.job_id, r.task.index, r.task.token) for r in self.running.values()
                ]
            self.runner.kill_all()  # a given-back attempt must not run on beside the next one
            released = self.store.release(self.handler, running) if running else 0
            self.ownership.give_back_all()
            if self.rq_child is not None:  # forced: no grace (a graceful stop may be waiting on it)
                rq_runner.stop_rq_worker(self.rq_child, grace_seconds=0)

            log.warning("worker %s: gave %d running tasks back; exiting", self.handler, released)
            self._deregister()
        except Exception:
            log.exception("worker %s: forced stop could not finish cleanly", self.handler)
        finally:
            exits.exit_now(exit_code)

    def _die(self, loop: str) -> NoReturn:
        """A loop met an error it cannot go on from (not Redis's: those it waits out): give
        the running tasks back and exit non-zero, so a supervisor restarts the worker."""
        log.critical(
            "worker %s: its %s loop failed; giving its tasks back and exiting",
            self.handler,
            loop,
            exc_info=True,
        )
        self.give_back_and_exit(EXIT_LOOP_FAILED)

    def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread running `loop`; if it ever raises, the process exits (_die)."""

        def run() -> None:
            try:
                loop()
            except BaseException:
                self._die(name)

        return threading.Thread(target=run, name=f"jobcenter-{name}", daemon=True)

    def run(self) -> None:
        """Serve until stopped (or, with burst, until nothing is left to do)."""
        self.store.check_server()
        self.eviction.check_at_start()
        self.ownership.renew_round()  # the shards to poll, before it says it serves
        self._register()
        self.pulse.beat(ok=True)
        self._supervise_recovery()
        threads = [
            self._thread(self._heartbeat_loop, "heartbeat"),
            self._thread(lambda: self.ownership.run(self.stopped), "shard-leases"),
        ]
        if self.options.leader:
            threads.append(self._thread(self._leader_loop, "leader"))
            threads.append(
                self._thread(
                    lambda: run_ticker(self.store, self.handler, self.stopped),
                    "scheduler",
                )
            )
            notifier = Notifier(
                self.store, self.handler, self.stopped, lambda: self.ownership.owned(LEADER_SEGMENT)
            )
            threads.append(self._thread(notifier.poll_loop, "notifier"))
            threads += [
                self._thread(notifier.deliver_loop, f"notify-{n}") for n in range(DELIVERY_THREADS)
            ]

        for thread in threads:
            thread.start()
        log.info(
            "worker %s serving %s with %d %s slots",
            self.handler,
            ",".join(self.queues),
            self.options.concurrency,
            self.options.pool,
        )
        try:
            try:
                self._claim_loop()
            except Exception:
                self._die("claim")
            self._give_back_prefetched()
            with self.lock:  # graceful: wait for running tasks to be reported
                while self.running:
                    self.lock.wait()
        finally:
            if self.exiting.is_set():
                # a loop failed, and its thread gives the running tasks back and ends the
                # process: not a normal exit here (it would say 0), unless it hangs
                threading.Event().wait(FORCED_STOP_MAX_SECONDS)
                exits.exit_now(EXIT_LOOP_FAILED)
            self.stopped.set()
            self._stop_polling()
            self.leader_waits.close()
            self.runner.shutdown()
            if self.rq_child is not None:
                rq_runner.stop_rq_worker(self.rq_child)
            with contextlib.suppress(RedisError):
                self.stop_counts.flush(self.store)
            self._deregister()
            log.info(
                "worker %s stopped: %d succeeded, %d failed",
                self.handler,
                self.completed,
                self.failed,
            )

    # -- claiming --------------------------------------------------------------------------

    def _free_slots(self, reporting: int = 0) -> int:
        """Slots free, once `reporting` of the running attempts (finished, their threads
        returned) are reported; slots a completion call may fill (`taking`) are not free."""
        # a thread running past its timeout was reported already but still holds its slot
        used = max(len(self.running) - reporting, self.runner.busy)
        return self.options.concurrency - used - self.taking

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

    def _report_progress(self, task: StartedTask, message: str) -> None:
        """Store the message; send it at once unless this task sent one under a second ago
        (the next heartbeat carries it then), so a chatty task cannot flood Redis."""
        now = time.monotonic()
        with self.lock:
            running = self.running.get((task.job_id, task.index))
            if running is None:
                return
            running.progress = message
            if now - running.progress_sent_at < PROGRESS_MIN_INTERVAL_SECONDS:
                return
            running.progress_sent_at = now
        try:
            codes = self.store.heartbeat(
                self.handler, [(task.job_id, task.index, task.token, message)]
            )
        except RedisError as exc:  # the heartbeat loop carries it, and logs the trouble
            log.debug("progress of job %s task %s not sent: %s", task.job_id, task_label(task), exc)
            return
        code = codes.get((task.job_id, task.index), 0)
        if code < 0:
            self._stop_attempt(task.job_id, task.index, task.token, code)

    # -- reporting -------------------------------------------------------------------------

    def _ended(self, *outcomes: Outcome) -> None:
        """Attempts ended: report them from this thread (the one that ran them, the runner's
        timeout watcher, or its event loop's reporter), with every other outcome waiting,
        unless a thread is reporting already; that one reports them with its next batch.
        Whoever lets go of the reporting looks again, so no outcome is left behind."""
        self.outcomes.extend(outcomes)
        try:
            while self.outcomes and self.reporting.acquire(blocking=False):
                try:
                    while self.outcomes:
                        # a task thread that kept a taken attempt for itself reports on
                        # first: another thread runs it
                        self.runner.hand_over_deferred()
                        batch = [self.outcomes.popleft()]
                        while self.outcomes and len(batch) < REPORT_BATCH_MAX:
                            batch.append(self.outcomes.popleft())
                        self._report_with_retry(batch)
                finally:
                    self.reporting.release()
        except BaseException:
            self._die("reporter")

    def _report_with_retry(self, batch: list[Outcome]) -> None:
        """Report a batch until Redis has taken all of it. What Redis refuses (unreachable,
        out of memory, read-only) is kept and tried again, never turned into a task failure;
        meanwhile those attempts stay in `running`, so the heartbeat keeps their leases. A
        lease that runs out all the same makes the late report stale: the task then runs
        again elsewhere."""
        backoff = Backoff(REPORT_RETRY_MAX_SECONDS)
        left = list(batch)
        while left:
            try:
                self._report(left)
            except RedisError as exc:
                backoff.wait(None, f"cannot report {len(left)} results: {trouble(exc)}")

    def _report(self, left: list[Outcome]) -> None:
        """Report finished attempts. Each one Redis takes leaves `left` (and `running`) at
        once, so when a RedisError comes out, `left` holds just what is still to report."""
        done = [o for o in left if o.ok]
        if done:
            self._complete(done, left)
            if left:  # more round trips before this thread is free: not with a task kept
                self.runner.hand_over_deferred()
        given_back = [o for o in left if o.missing_task]
        if given_back:
            self._give_back(given_back, left)
        gated = [o for o in left if o.gate]
        if gated:
            self._gate_wait(gated, left)
        for outcome in list(left):
            t = outcome.task
            code, _ = self.store.fail(
                self.handler, t.job_id, t.index, t.token, outcome.error, outcome.retry_delay_ms
            )
            if code < 0:
                self._refused(
                    "failure", t.job_id, t.index, t.token, code, f"its error: {outcome.error}"
                )
            self.failed += 1
            self._settle(left, [outcome])

    def _refused(
        self, report: str, job_id: str, index: int, token: str, code: int, reported: str = ""
    ) -> None:
        """Log a report (result, failure, heartbeat) Redis refused, with its real cause. One
        of an attempt Redis does not know (it lost writes: the task may run again) is an
        error, counted, with what the attempt reported: its only trace."""
        cause = why_refused(self.store, job_id, index, token, code)
        name = self._label(job_id, index)
        if code == UNKNOWN_ATTEMPT:
            log.error(
                "job %s task %s: %s refused: %s (code %d)%s",
                job_id,
                name,
                report,
                cause,
                code,
                f"; {reported}" if reported else "",
            )
            with contextlib.suppress(RedisError):  # the log line above is what counts
                count_unknown(self.store, job_id, report)
        elif report == "heartbeat":
            log.warning(
                "job %s task %s: heartbeat refused: %s (code %d)", job_id, name, cause, code
            )
        else:
            log.warning(
                "late %s of job %s task %s discarded: %s (code %d)",
                report,
                job_id,
                name,
                cause,
                code,
            )

    def _complete(self, done: list[Outcome], left: list[Outcome]) -> None:
        """Report successes; the same call takes what the freed slots (and any other free
        one) run next: released children, then the next queued tasks of the same job."""
        with self.lock:
            take_max = prefetch = 0
            before: bytes | None = None
            if not self.stopping.is_set() and self.eviction.safe.is_set():
                free = self._free_slots(len(done))  # below 0: that many held beyond the slots
                take_max = max(0, min(CLAIM_BATCH_MAX, free))
                prefetch, before = self._prefetch(done)
                prefetch += min(0, free)  # what the prefetch has left
                prefetch = max(0, min(CLAIM_BATCH_MAX - take_max, prefetch))
            self.taking += take_max + prefetch  # held from the claim loop until the reply is in
        attempts = [(o.task.job_id, o.task.index, o.task.token, o.result) for o in done]
        refused: RefusedInPart | None = None
        try:
            codes, taken = self.store.complete(
                self.handler,
                attempts,
                take_queues=self.queues,
                take_max=take_max,
                prefetch=prefetch,
                prefetch_before=before,
            )
        except RefusedInPart as exc:
            codes, taken, refused = exc.codes, exc.taken, exc
        except BaseException:
            with self.lock:
                self.taking -= take_max + prefetch
            raise
        for (job_id, index), code in codes.items():
            if code < 0:
                token, result = next((t, r) for j, i, t, r in attempts if (j, i) == (job_id, index))
                self._refused("result", job_id, index, token, code, what_it_returned(result))
        reported = [o for o in done if (o.task.job_id, o.task.index) in codes]
        self.completed += len(reported)
        self._settle(left, reported, taken, take_max + prefetch)
        self._submit(taken)
        self._adopt([job_id for (job_id, _), code in codes.items() if code == COMPLETED_ALREADY])
        if refused is not None:
            raise refused

    def _stop_taking(self, slots: int) -> None:
        with self.lock:
            self.taking -= slots
            self.lock.notify_all()

    def _prefetch(self, done: list[Outcome]) -> tuple[int, bytes | None]:
        """Tasks a worker may hold beyond its slots (called with the lock held), and the run
        order they must sort before (None: any): none unless every task it reports was
        short (a long task would keep a prefetched one waiting for a thread while another
        worker idles); only ones before the first child of every task held here (a thread
        that task frees would start a prefetched one before its children, which are
        released only once it ended: the thread pool runs what it holds in run order);
        none with child processes (nothing to take back on stop)."""
        if self.options.pool != "thread":
            return 0, None
        if any(o.seconds >= PREFETCH_RUN_MAX_SECONDS for o in done):
            return 0, None
        reporting = {(o.task.job_id, o.task.index) for o in done}
        firsts = [
            r.task.first_child
            for k, r in self.running.items()
            if k not in reporting and r.task.first_child is not None
        ]
        before = min(firsts, default=None)
        if before == b"":  # a held task with too many children to order
            return 0, None
        return self.options.concurrency * PREFETCH_PER_SLOT, before

    def _give_back_prefetched(self) -> None:
        """A stopping worker finishes what runs; tasks it took but no thread has begun go
        back to their queues (release.lua: no attempt used up). If Redis refuses, their
        leases run out and recovery re-drives them."""
        waiting = self.runner.withdraw_waiting()
        if not waiting:
            return
        try:
            released = self.store.release(
                self.handler, [(t.job_id, t.index, t.token) for t in waiting]
            )
            log.info("worker %s: gave %d prefetched tasks back", self.handler, released)
        except RedisError as exc:
            log.warning("prefetched tasks not given back (%s): their leases run out", exc)
        with self.lock:
            for task in waiting:
                self.running.pop((task.job_id, task.index), None)
            self.lock.notify_all()

    def _adopt(self, replayed: list[str]) -> None:
        """Run the tasks that a completion whose reply was lost (a connection reset: the
        call ran, it was sent again and found done) started for this worker: they run under
        its handler, and nobody else would run them before their lease ran out."""
        for job_id in sorted(set(replayed)):
            with self.starting:
                running = self.store.running_attempts(self.handler, job_id)
                with self.lock:
                    orphans = [t for t in running if (t.job_id, t.index) not in self.running]
                self._run(orphans)

    def _give_back(self, given_back: list[Outcome], left: list[Outcome]) -> None:
        """Hand back attempts of tasks this worker has no code for: unused, they wait in
        their queue for a worker that has the code (warned once per task name)."""
        for name in sorted({o.missing_task for o in given_back} - self.lacking):
            self.lacking.add(name)
            log.warning(
                "task %r is not registered on this worker (modules: %s): giving its tasks "
                "back to the queue for a worker that has it",
                name,
                ", ".join(self.options.modules) or "none",
            )
        attempts = [(o.task.job_id, o.task.index, o.task.token, o.missing_task) for o in given_back]
        # a live worker that has the code takes the task after the shortest delay, not after
        # one grown with the wait (which only keeps a hot loop off while nobody has it)
        live_since = self.store.now_ms() - int(self.store.settings.worker_timeout_seconds * 1000)
        served = self.store.served_since(live_since)
        refused: RefusedInPart | None = None
        try:
            codes = self.store.give_back(
                self.handler, attempts, GIVE_BACK_DELAY_MIN_MS, GIVE_BACK_DELAY_MAX_MS, served
            )
        except RefusedInPart as exc:
            codes, refused = exc.codes, exc
        self._settle(left, [o for o in given_back if (o.task.job_id, o.task.index) in codes])
        if refused is not None:
            raise refused

    def _gate_wait(self, gated: list[Outcome], left: list[Outcome]) -> None:
        """Hand back attempts whose gate said no: unused, they wait the gate's backoff."""
        attempts = [
            (o.task.job_id, o.task.index, o.task.token, o.gate, o.gate_backoff_ms,
             o.gate_give_up_ms)
            for o in gated
        ]  # fmt: skip
        codes = self.store.gate_wait(self.handler, attempts)
        labels = {(o.task.job_id, o.task.index): task_label(o.task) for o in gated}
        for (job_id, index), code in codes.items():
            if code == GATE_GAVE_UP:
                name = labels[(job_id, index)]
                log.warning("job %s task %s failed: its gate said no too long", job_id, name)
        self._settle(left, [o for o in gated if (o.task.job_id, o.task.index) in codes])

    def _settle(
        self,
        left: list[Outcome],
        reported: list[Outcome],
        taken: Sequence[StartedTask] = (),
        was_taking: int = 0,
    ) -> None:
        """Outcomes Redis took: no longer to report, and their slots are free, or run what
        the same call took (`taken`, for `was_taking` slots held): in one step, so the claim
        loop never sees those slots free in between."""
        ids = {id(o) for o in reported}
        left[:] = [o for o in left if id(o) not in ids]
        with self.lock:
            for outcome in reported:
                key = (outcome.task.job_id, outcome.task.index)
                # not the task's next attempt here (the task started again after Redis lost
                # the writes of this one's claim)
                if key in self.running and self.running[key].task.token == outcome.task.token:
                    del self.running[key]
            for task in taken:
                self.running[(task.job_id, task.index)] = Running(task)
            self.taking -= was_taking
            # waiters: the claim loop, for a free slot; a graceful stop, for none running
            if self._free_slots() > 0 or not self.running:
                self.lock.notify_all()

    # -- heartbeats ------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        """Renew leases every lease/3; a heartbeat Redis refuses is tried again soon, since
        the leases it renews may be running out."""
        interval = self.store.settings.lease_seconds / 3
        backoff = Backoff(interval / HEARTBEAT_RETRIES_PER_INTERVAL)
        while not self.stopped.wait(interval):
            while not self.stopped.is_set():
                try:
                    self._heartbeat()
                    self.pulse.beat(ok=True)
                    break
                except RedisError as exc:
                    self.pulse.beat(ok=False)
                    backoff.wait(self.stopped, f"heartbeat: {trouble(exc)}")
            backoff.reset()

    def _heartbeat(self) -> None:
        with self.lock:
            running = [
                (r.task.job_id, r.task.index, r.task.token, r.progress)
                for r in self.running.values()
            ]
        tokens = {(job_id, index): token for job_id, index, token, _ in running}
        for (job_id, index), code in self.store.heartbeat(self.handler, running).items():
            if code < 0:
                self._stop_attempt(job_id, index, tokens[(job_id, index)], code)
        self.stop_counts.flush(self.store)
        self._register()
        self._supervise_recovery()
        self.eviction.check()

    def _label(self, job_id: str, index: int) -> str:
        """A running task's id for a log line ('#index' once it left)."""
        with self.lock:
            running = self.running.get((job_id, index))
        return f"#{index}" if running is None else task_label(running.task)

    def _stop_attempt(self, job_id: str, index: int, token: str, code: int) -> None:
        """Redis refused the attempt's heartbeat (`code`): it is no longer live (its job was
        cancelled or is gone, another attempt took the task over, the task was queued again
        or failed when its lease ran out, or Redis lost the writes that started it). Stop it
        now, whatever the cause, so it never runs beside the task's next attempt, and free its
        slot. Nothing is reported: Redis would refuse its outcome."""
        name = self._label(job_id, index)
        stopped = self.runner.stop(
            (job_id, index, token), STOP_REASONS.get(code, StopReason.NOT_RUNNING)
        )
        if code == UNKNOWN_ATTEMPT:  # an error of its own, counted: Redis lost writes
            self._refused("heartbeat", job_id, index, token, code)
        why = why_refused(self.store, job_id, index, token, code)
        attempt = token.partition(":")[0]
        if not stopped:  # it ended meanwhile: the reporter has its outcome
            log.info("job %s task %s attempt %s: heartbeat refused: %s (code %d)",
                     job_id, name, attempt, why, code)  # fmt: skip
            return
        level = logging.INFO if code in STOPPED or code == JOB_GONE else logging.WARNING
        log.log(level, "job %s task %s attempt %s stopped: %s (code %d)",
                job_id, name, attempt, why, code)  # fmt: skip
        with self.lock:
            running = self.running.get((job_id, index))
            if running is not None and running.task.token == token:
                del self.running[(job_id, index)]
            self.lock.notify_all()

    def _attempt_stopped(self, stop: Stop) -> None:
        """A runner's word on an attempt it stopped (told, still running, ended): logged,
        and counted for the metrics."""
        log_stop(stop)
        self.stop_counts.add(stop)

    def _supervise_recovery(self) -> None:
        """Keep the rq child alive and enqueue this round's recovery job (once per round,
        whichever worker gets there first)."""
        if not self.options.recovery or self.stopping.is_set():
            return
        if self.rq_child is None or self.rq_child.poll() is not None:
            if self.rq_child is not None:
                log.warning(
                    "rq recovery worker exited (%s); restarting it", self.rq_child.returncode
                )
            self.rq_child = rq_runner.spawn_rq_worker(self.store.settings, self.options.node)
        try:
            rq_runner.enqueue_recovery(self.store)
        except RedisError as exc:
            log.warning("cannot enqueue the recovery job (%s); next heartbeat tries again", exc)

    def _register(self) -> None:
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": ",".join(self.queues),
            "node": self.options.node or "",
            "concurrency": self.options.concurrency,
        }
        keep_ms = int(self.store.settings.unknown_task_timeout_seconds * 1000)
        self.store.publish_served(self.queues, registry.names(), keep_ms)
        self.store.register_worker(self.handler, info, self.options.node)

    def _deregister(self) -> None:
        with contextlib.suppress(RedisError):
            self.store.deregister_worker(self.handler)
