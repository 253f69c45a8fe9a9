"""The worker daemon: claims ready tasks and leader messages, runs tasks in a pool,
heartbeats their leases, reports completions and failures, and shuts down gracefully.

Threads: the main thread claims tasks (blocking on wake-up lists when idle), a leader thread
runs leader messages and sweeps expired leases (so leader steps never wait for a free task
slot), a reporter thread reports finished attempts in batches, a heartbeat thread renews
leases; the runner's threads or child processes run the tasks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from . import rq_runner, schedule
from .errors import UnknownJob
from .execution import Outcome, ProcessRunner, ThreadRunner
from .health import Pulse
from .ids import handler_id
from .keys import node_queue
from .leader import Leader
from .store import HEARTBEAT_CANCELLED, SWEEP_MAX, StartedTask, Store

log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 1.0  # an idle worker wakes at least this often: lease sweeps, recovery
RETRY_WAKE_MIN_SECONDS = 0.005  # shortest wait for a due retry (Redis timeouts are coarse)

CLAIM_BATCH_MAX = 256  # tasks reserved per claim: one round trip serves many tasks
REPORT_BATCH_MAX = 512  # finished attempts reported per round trip
LEADER_BATCH = 4  # leader messages taken per claim
RECONNECT_MAX_SECONDS = 5.0  # longest pause between tries while Redis is unreachable
PROGRESS_MIN_INTERVAL_SECONDS = 1.0  # a task's progress goes out at once at most this often


@dataclass
class Options:
    queues: list[str] = field(default_factory=lambda: ["default"])
    node: str | None = None
    concurrency: int = 4
    pool: str = "thread"  # or "process" for CPU-bound tasks
    burst: bool = False
    modules: list[str] = field(default_factory=list)
    leader: bool = True
    recovery: bool = True  # supervise an rq worker for the recovery job, and enqueue it


class Backoff:
    """Pauses between tries while Redis is unreachable: 0.1 s doubling to a cap."""

    def __init__(self) -> None:
        self.pause = 0.1

    def reset(self) -> None:
        self.pause = 0.1

    def wait(self, stop: threading.Event | None, why: str) -> None:
        log.warning("%s; retrying in %.1fs", why, self.pause)
        if stop is None:
            time.sleep(self.pause)
        else:
            stop.wait(self.pause)
        self.pause = min(self.pause * 2, RECONNECT_MAX_SECONDS)


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
        self.outcomes: queue.Queue[Outcome | None] = queue.Queue()
        self.lock = threading.Condition()
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        self.runner = self._make_runner()
        self.grace_ms = max(1, store.settings.lease_ms // 3)
        self.completed = 0
        self.failed = 0
        self.rq_child: Any = None
        self.next_retry_ms = -1  # from the last claim: when a retry in our queues is due
        self.own_wake = store.keys.worker_wake(0, self.handler)
        self.pulse = Pulse()  # what health.py reports: the heartbeat's rounds

    def _make_runner(self) -> ThreadRunner | ProcessRunner:
        if self.options.pool == "process":
            return ProcessRunner(
                self.options.concurrency, self.handler, self.options.modules, self._slot_freed
            )
        return ThreadRunner(self.options.concurrency, self.handler, self._slot_freed)

    def _slot_freed(self) -> None:
        with self.lock:
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
            # end the blocking waits now, from another thread and connection
            threading.Thread(target=self._poke, daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _poke(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self.store.poke(self.handler, tokens=2)  # the claim loop and the leader loop

    def give_back_and_exit(self) -> None:
        """Forced stop: kill what runs, give it back to the queues, exit. Whatever fails on
        the way (Redis down), the process exits; leases then expire and recovery re-drives."""
        try:
            with self.lock:
                running = [
                    (r.task.job_id, r.task.index, r.task.attempt) for r in self.running.values()
                ]
            self.runner.kill_all()  # a given-back attempt must not run on beside the next one
            released = self.store.release(self.handler, running) if running else 0
            if self.rq_child is not None:
                rq_runner.stop_rq_worker(self.rq_child)

            log.warning("worker %s: gave %d running tasks back; exiting", self.handler, released)
            self._deregister()
        except Exception:
            log.exception("worker %s: forced stop could not finish cleanly", self.handler)
        finally:
            os._exit(0)

    def run(self) -> None:
        """Serve until stopped (or, with burst, until nothing is left to do)."""
        self.store.check_server()
        self._register()
        self.pulse.beat(ok=True)
        self._supervise_recovery()
        threads = [
            threading.Thread(target=self._report_loop, name="jobcenter-reporter", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="jobcenter-heartbeat", daemon=True),
        ]
        if self.options.leader:
            threads.append(
                threading.Thread(target=self._leader_loop, name="jobcenter-leader", daemon=True)
            )
            threads.append(
                threading.Thread(
                    target=schedule.run_ticker,
                    args=(self.store, self.handler, self.stopped),
                    name="jobcenter-scheduler",
                    daemon=True,
                )
            )

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
            self._claim_loop()
            with self.lock:  # graceful: wait for running tasks to be reported
                while self.running:
                    self.lock.wait()
        finally:
            self.outcomes.put(None)
            threads[0].join()
            self.stopped.set()
            self.runner.shutdown()
            if self.rq_child is not None:
                rq_runner.stop_rq_worker(self.rq_child)
            self._deregister()
            log.info(
                "worker %s stopped: %d succeeded, %d failed",
                self.handler,
                self.completed,
                self.failed,
            )

    # -- claiming --------------------------------------------------------------------------

    def _free_slots(self) -> int:
        # a thread running past its timeout was reported already but still holds its slot
        return self.options.concurrency - max(len(self.running), self.runner.busy)

    def _claim_loop(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                if self._claim_once():
                    backoff.reset()
                    continue
                if self.options.burst and not self.running and self.store.idle(self.queues):
                    return
                self._wait_for_work()
                backoff.reset()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                backoff.wait(self.stopping, f"redis unreachable ({exc})")

    def _claim_once(self) -> bool:
        """One claim round trip per shard; True if it found any task."""
        free = min(self._free_slots(), CLAIM_BATCH_MAX)
        if free <= 0:
            return False
        found = False
        sweep = 0 if self.options.leader else SWEEP_MAX  # the leader thread sweeps
        self.next_retry_ms = -1
        for shard in range(self.store.keys.shards):
            result = self.store.claim(
                self.handler, self.queues, max_tasks=free, max_leader=0, shard=shard, sweep=sweep
            )
            if result.next_retry_ms >= 0 and (
                self.next_retry_ms < 0 or result.next_retry_ms < self.next_retry_ms
            ):
                self.next_retry_ms = result.next_retry_ms
            self._expire(result.expired)
            self._run(result.tasks)
            free -= len(result.tasks)
            found = found or bool(result.tasks)
        return found

    def _expire(self, expired: list[tuple[str, int]]) -> None:
        if expired:
            log.info("expired leases: %s", self.store.expire(expired, self.grace_ms))

    def _leader_loop(self) -> None:
        """Leader messages (split, continue, cancel, finalize) and expired-lease sweeps."""
        backoff = Backoff()
        wake = [self.store.keys.leader_wake(shard) for shard in range(self.store.keys.shards)]
        while not self.stopped.is_set():
            try:
                found = False
                for shard in range(self.store.keys.shards):
                    result = self.store.claim(
                        self.handler, [], max_tasks=0, max_leader=LEADER_BATCH, shard=shard
                    )
                    for kind, job_id in result.leader:
                        self._lead(kind, job_id)
                    self._expire(result.expired)
                    found = found or bool(result.leader or result.expired)
                if not found:
                    self.store.redis.blpop([*wake, self.own_wake], timeout=IDLE_WAIT_SECONDS)
                backoff.reset()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                backoff.wait(self.stopped, f"leader: redis unreachable ({exc})")

    def _lead(self, kind: str, job_id: str) -> None:
        try:
            self.leader.handle(kind, job_id)
        except (redis.ConnectionError, redis.TimeoutError):
            raise
        except Exception:  # one bad job must not take the worker down; its message comes back
            log.exception("leader step %s of job %s failed", kind, job_id)

    def _wait_for_work(self) -> None:
        with self.lock:
            while self._free_slots() <= 0 and not self.stopping.is_set():
                self.lock.wait()  # woken by the reporter when a slot frees
        if self.stopping.is_set():
            return
        timeout = IDLE_WAIT_SECONDS
        if self.next_retry_ms >= 0:  # wake when the next retry is due, not a second later
            timeout = min(timeout, max(RETRY_WAKE_MIN_SECONDS, self.next_retry_ms / 1000))
        keys = self.store.wake_keys(self.queues, leader=False) + [self.own_wake]
        self.store.redis.blpop(keys, timeout=timeout)

    def _run(self, tasks: list[StartedTask]) -> None:
        if not tasks:
            return
        with self.lock:
            for task in tasks:
                self.running[(task.job_id, task.index)] = Running(task)
        for task in tasks:
            self.runner.submit(task, self._report_progress, self.outcomes.put)

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
        self.store.heartbeat(self.handler, [(task.job_id, task.index, task.attempt, message)])

    # -- reporting -------------------------------------------------------------------------

    def _report_loop(self) -> None:
        while True:
            first = self.outcomes.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < REPORT_BATCH_MAX:
                try:
                    item = self.outcomes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self.outcomes.put(None)
                    break
                batch.append(item)
            self._report_with_retry(batch)

    def _report_with_retry(self, batch: list[Outcome]) -> None:
        backoff = Backoff()
        while True:
            try:
                self._report(batch)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # Results are kept until Redis answers; a lease that expires meanwhile
                # makes the report stale, and the task runs again elsewhere.
                backoff.wait(None, f"cannot report results ({exc})")

    def _report(self, batch: list[Outcome]) -> None:
        done = [(o.task.job_id, o.task.index, o.task.attempt) for o in batch if o.ok]
        taken: list[StartedTask] = []
        if done:
            take_max = 0 if self.stopping.is_set() else len(done)
            codes, taken = self.store.complete(
                self.handler, done, take_queues=self.queues, take_max=take_max
            )
            for (job_id, index), code in codes.items():
                if code < 0:
                    log.warning(
                        "late result of job %s task %d discarded (code %d): the "
                        "attempt was taken over or cancelled",
                        job_id,
                        index,
                        code,
                    )
            self.completed += len(done)
        for outcome in batch:
            if not outcome.ok:
                t = outcome.task
                code, state = self.store.fail(
                    self.handler,
                    t.job_id,
                    t.index,
                    t.attempt,
                    outcome.error,
                    outcome.retry_delay_ms,
                )
                if code < 0:
                    log.warning(
                        "late failure of job %s task %d discarded (code %d)",
                        t.job_id,
                        t.index,
                        code,
                    )
                self.failed += 1
        with self.lock:
            for outcome in batch:
                self.running.pop((outcome.task.job_id, outcome.task.index), None)
            self.lock.notify_all()
        self._run(taken)

    # -- heartbeats ------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = self.store.settings.lease_seconds / 3
        while not self.stopped.wait(interval):
            try:
                self._heartbeat()
                self.pulse.beat(ok=True)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                self.pulse.beat(ok=False)
                log.warning("heartbeat failed: %s", exc)

    def _heartbeat(self) -> None:
        with self.lock:
            running = [
                (r.task.job_id, r.task.index, r.task.attempt, r.progress)
                for r in self.running.values()
            ]
        attempts = {(job_id, index): attempt for job_id, index, attempt, _ in running}
        for (job_id, index), code in self.store.heartbeat(self.handler, running).items():
            if code in (HEARTBEAT_CANCELLED, UnknownJob.code):
                self._stop_attempt(job_id, index, attempts[(job_id, index)], code)
            elif code < 0:
                log.warning(
                    "job %s task %d: this attempt was taken over (code %d); its "
                    "result will be discarded",
                    job_id,
                    index,
                    code,
                )
        self._register()
        self._supervise_recovery()

    def _stop_attempt(self, job_id: str, index: int, attempt: int, code: int) -> None:
        """The attempt's job was cancelled (or is gone): stop the attempt and free its slot.
        Nothing is reported: the cancel settled the task already."""
        if not self.runner.cancel((job_id, index, attempt)):
            return  # it ended meanwhile; the reporter has its outcome
        why = "was cancelled" if code == HEARTBEAT_CANCELLED else "is gone"
        log.info("job %s %s: stopped its running task %d (attempt %d)", job_id, why, index, attempt)
        with self.lock:
            running = self.running.get((job_id, index))
            if running is not None and running.task.attempt == attempt:
                del self.running[(job_id, index)]
            self.lock.notify_all()

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
            self.rq_child = rq_runner.spawn_rq_worker(self.store.settings)
        try:
            rq_runner.enqueue_recovery(self.store)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("cannot enqueue the recovery job (%s); next heartbeat tries again", exc)

    def _register(self) -> None:
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": ",".join(self.queues),
            "node": self.options.node or "",
            "concurrency": self.options.concurrency,
        }
        self.store.register_worker(self.handler, info, self.options.node)

    def _deregister(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self.store.deregister_worker(self.handler)
