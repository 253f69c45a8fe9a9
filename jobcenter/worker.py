"""The worker daemon: claims ready tasks and leader messages, runs tasks in a pool,
heartbeats their leases, reports completions and failures, and shuts down gracefully.

Threads: the main thread claims (blocking on wake-up lists when idle), a reporter thread
reports finished attempts in batches, a heartbeat thread renews leases; the pool runs tasks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import signal
import socket
import threading
import time
import traceback
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis

from . import codec, registry, rq_runner
from .context import TaskContext, set_current
from .errors import Fatal, Retry
from .ids import handler_id
from .keys import node_queue
from .leader import Leader
from .store import StartedTask, Store

log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 1.0  # an idle worker wakes at least this often: due retries, lease sweeps
CLAIM_BATCH_MAX = 256  # tasks reserved per claim: one round trip serves many tasks
REPORT_BATCH_MAX = 512  # finished attempts reported per round trip
LEADER_BATCH = 4  # leader messages taken per claim
ERROR_TEXT_MAX = 4_000  # characters of an error kept in Redis
RECONNECT_MAX_SECONDS = 5.0  # longest pause between tries while Redis is unreachable
WORKER_INFO_FIELDS = ("host", "pid", "queues", "node", "concurrency", "started_at")


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


@dataclass
class Outcome:
    task: StartedTask
    ok: bool
    error: str = ""
    retry_delay_ms: int = -1  # < 0: do not retry


@dataclass
class Running:
    task: StartedTask
    progress: str = ""


def backoff_ms(attempt: int, base: float, cap: float) -> int:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    return int(random.uniform(0, min(cap, base * 2 ** (attempt - 1))) * 1000)


def execute(task: StartedTask, handler: str, report: Any = None) -> Outcome:
    """Run one attempt and turn what happened into an Outcome; never raises."""
    try:
        payload = codec.unpack(task.payload)
        assert isinstance(payload, dict)
    except Exception as exc:  # a payload we cannot read will not get better on retry
        return Outcome(task, False, f"unreadable task payload: {exc}")
    task_id = payload.get("id", str(task.index))
    ctx = TaskContext(task.job_id, task_id, task.attempt, handler)
    if report is not None:
        ctx.report = lambda message: report(task, message)
    set_current(ctx)
    try:
        fn = registry.lookup(payload["t"])
        fn(*payload.get("a", ()), **payload.get("k", {}))
        return Outcome(task, True)
    except registry.UnknownTask as exc:
        return Outcome(task, False, str(exc))
    except Fatal as exc:
        return Outcome(task, False, _describe(exc))
    except Retry as exc:
        delay = exc.delay if exc.delay is not None else payload.get("rb", 1.0)
        return Outcome(task, False, _describe(exc), int(delay * 1000))
    except Exception as exc:
        delay = backoff_ms(task.attempt, payload.get("rb", 1.0), payload.get("rm", 300.0))
        return Outcome(task, False, _describe(exc), delay)
    finally:
        set_current(None)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(exc)).replace("\t", "  ")
    return (text + "\n" + tb)[:ERROR_TEXT_MAX]


def _init_process(modules: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when children stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    registry.import_modules(modules)


def _execute_in_process(task: StartedTask, handler: str) -> Outcome:
    return execute(task, handler)


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
        self.pool: Executor = self._make_pool()
        self.grace_ms = max(1, store.settings.lease_ms // 3)
        self.completed = 0
        self.failed = 0
        self.rq_child: Any = None

    def _make_pool(self) -> Executor:
        if self.options.pool == "process":
            return ProcessPoolExecutor(
                self.options.concurrency,
                initializer=_init_process,
                initargs=(self.options.modules,),
            )
        return ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="jobcenter-task")

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

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def give_back_and_exit(self) -> None:
        with self.lock:
            running = [(r.task.job_id, r.task.index, r.task.attempt) for r in self.running.values()]
        released = self.store.release(self.handler, running) if running else 0
        log.warning("worker %s: gave %d running tasks back; exiting", self.handler, released)
        self._deregister()
        os._exit(0)

    def run(self) -> None:
        """Serve until stopped (or, with burst, until nothing is left to do)."""
        self.store.check_server()
        self._register()
        self._supervise_recovery()
        threads = [
            threading.Thread(target=self._report_loop, name="jobcenter-reporter", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="jobcenter-heartbeat", daemon=True),
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
            self._claim_loop()
            with self.lock:  # graceful: wait for running tasks to be reported
                while self.running:
                    self.lock.wait()
        finally:
            self.outcomes.put(None)
            threads[0].join()
            self.stopped.set()
            self.pool.shutdown(wait=False, cancel_futures=True)
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
        return self.options.concurrency - len(self.running)

    def _claim_loop(self) -> None:
        pause = 0.1
        while not self.stopping.is_set():
            try:
                busy = self._claim_once()
                pause = 0.1
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis unreachable (%s); retrying in %.1fs", exc, pause)
                self.stopping.wait(pause)
                pause = min(pause * 2, RECONNECT_MAX_SECONDS)
                continue
            if busy:
                continue
            if self.options.burst and not self.running and self.store.idle(self.queues):
                return
            self._wait_for_work()

    def _claim_once(self) -> bool:
        """One claim round trip (plus the work it hands out); True if it found anything."""
        free = min(self._free_slots(), CLAIM_BATCH_MAX)
        max_leader = LEADER_BATCH if self.options.leader else 0
        found = False
        for shard in range(self.store.keys.shards):
            result = self.store.claim(
                self.handler, self.queues, max_tasks=free, max_leader=max_leader, shard=shard
            )
            for kind, job_id in result.leader:
                try:
                    self.leader.handle(kind, job_id)
                except (redis.ConnectionError, redis.TimeoutError):
                    raise
                except Exception:  # a bad job must not take the worker down; recovery retries
                    log.exception("leader step %s of job %s failed", kind, job_id)
            if result.expired:
                outcomes = self.store.expire(result.expired, self.grace_ms)
                log.info("expired leases: %s", outcomes)
            self._run(result.tasks)
            free -= len(result.tasks)
            found = found or bool(result.leader or result.tasks or result.expired)
        return found

    def _wait_for_work(self) -> None:
        with self.lock:
            while self._free_slots() <= 0 and not self.stopping.is_set():
                self.lock.wait()  # woken by the reporter when a slot frees
        if self.stopping.is_set():
            return
        keys = self.store.wake_keys(self.queues, leader=self.options.leader)
        self.store.redis.blpop(keys, timeout=IDLE_WAIT_SECONDS)

    def _run(self, tasks: list[StartedTask]) -> None:
        if not tasks:
            return
        with self.lock:
            for task in tasks:
                self.running[(task.job_id, task.index)] = Running(task)
        for task in tasks:
            if isinstance(self.pool, ProcessPoolExecutor):
                future = self.pool.submit(_execute_in_process, task, self.handler)
            else:
                future = self.pool.submit(execute, task, self.handler, self._report_progress)
            future.add_done_callback(lambda f, t=task: self._finished(t, f))

    def _finished(self, task: StartedTask, future: Any) -> None:
        try:
            outcome = future.result()
        except BaseException as exc:  # the pool itself broke (a killed child process)
            outcome = Outcome(task, False, _describe(exc), 1000)
        self.outcomes.put(outcome)

    def _report_progress(self, task: StartedTask, message: str) -> None:
        with self.lock:
            running = self.running.get((task.job_id, task.index))
            if running is not None:
                running.progress = message
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
        pause = 0.1
        while True:
            try:
                self._report(batch)
                return
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # Results are kept until Redis answers; a lease that expires meanwhile
                # makes the report stale, and the task runs again elsewhere.
                log.warning("cannot report results (%s); retrying in %.1fs", exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, RECONNECT_MAX_SECONDS)

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
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("heartbeat failed: %s", exc)

    def _heartbeat(self) -> None:
        with self.lock:
            running = [
                (r.task.job_id, r.task.index, r.task.attempt, r.progress)
                for r in self.running.values()
            ]
        for (job_id, index), code in self.store.heartbeat(self.handler, running).items():
            if code < 0:
                log.warning(
                    "job %s task %d: this attempt was taken over (code %d); its "
                    "result will be discarded",
                    job_id,
                    index,
                    code,
                )
        self._register()
        self._supervise_recovery()

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
        rq_runner.enqueue_recovery(self.store)

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
