"""Attempts a worker stops before they return: why (their job was cancelled, another attempt
took their task over, ... or they ran past their timeout), and whether each really stopped.

The runners stop an attempt (its child killed, its coroutine cancelled, its thread told) and
tell a StopWatch, which follows it until it returns and reports each step to the worker:
told, still running STOP_BOUND_SECONDS later (a thread that never looks, a coroutine that
swallows its cancel, a child the kernel cannot kill yet), ended (how long after it was told).
The worker logs each step (`log_stop`) and counts the first two in the metrics (StopCounts).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from jobcenter.storage import metrics
from jobcenter.storage.keyspace.keys import Keys
from jobcenter.storage.keyspace.schema import MetricField
from jobcenter.storage.store import Store

log = logging.getLogger(__name__)

# An attempt still running this long after it was told to stop will not stop soon: a child
# dies at once when killed, a coroutine at its next await, a thread that looks at its stop
# within its next step. The worker warns and counts it (its slot stays busy meanwhile).
STOP_BOUND_SECONDS = 5.0

AttemptKey = tuple[str, int, str]  # job id, task index, fencing token (unique per claim)


class StopReason(StrEnum):
    """Why an attempt was stopped: the first four are what Redis answered its heartbeat."""

    CANCELLED = "cancelled"  # its job was cancelled (or abandoned by recovery)
    TAKEN_OVER = "taken_over"  # its lease ran out and another attempt took the task over
    NOT_RUNNING = "not_running"  # its lease ran out and the task was queued again, or failed
    GONE = "gone"  # its job was deleted, or expired
    TIMED_OUT = "timed_out"  # it ran past its timeout


# Each reason in words: what the task reads in TaskCancelled, what the worker logs.
STOP_WORDS = {
    StopReason.CANCELLED: "its job was cancelled",
    StopReason.TAKEN_OVER: "another attempt took the task over: this one's lease ran out",
    StopReason.NOT_RUNNING: "the task is not running any more: this attempt's lease ran out",
    StopReason.GONE: "its job is gone",
    StopReason.TIMED_OUT: "it ran past its timeout",
}


class StopStep(StrEnum):
    TOLD = "told"  # the attempt was just stopped (killed, cancelled, told)
    OVERDUE = "overdue"  # it still runs STOP_BOUND_SECONDS after
    ENDED = "ended"  # it returned, or its child died


@dataclass(frozen=True)
class Stop:
    """One step of a stopped attempt, as the worker logs and counts it."""

    key: AttemptKey
    reason: StopReason
    runner: str  # what had to stop: "thread", "async" (a coroutine) or "process" (a child)
    step: StopStep
    seconds: float = 0.0  # since it was told


@dataclass
class _Told:
    at: float  # time.monotonic() when it was told
    reason: StopReason
    runner: str


class StopWatch:
    """Follows stopped attempts until they end; `report` gets each step (from the thread that
    stopped it, a thread of the watch's own, the thread that ran it). A report that raises
    is logged, never passed on to those threads."""

    def __init__(self, report: Callable[[Stop], None], bound: float = STOP_BOUND_SECONDS) -> None:
        self.report = report
        self.bound = bound
        self.lock = threading.Condition()
        self.told: dict[AttemptKey, _Told] = {}
        self.checks: list[tuple[float, AttemptKey]] = []  # when to see if each still runs
        self.thread: threading.Thread | None = None  # started at the first stop

    def stopped(self, key: AttemptKey, reason: StopReason, runner: str) -> None:
        """The attempt was just stopped: follow it until `ended`."""
        told = _Told(time.monotonic(), reason, runner)
        with self.lock:
            self.told[key] = told
            heapq.heappush(self.checks, (told.at + self.bound, key))
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._watch, name="jobcenter-stops", daemon=True
                )
                self.thread.start()
            self.lock.notify()
        self._report(Stop(key, reason, runner, StopStep.TOLD))

    def ended(self, key: AttemptKey) -> None:
        """The attempt returned (or its child died); nothing if it was not stopped."""
        with self.lock:
            told = self.told.pop(key, None)
        if told is not None:
            seconds = time.monotonic() - told.at
            self._report(Stop(key, told.reason, told.runner, StopStep.ENDED, seconds))

    def _watch(self) -> None:
        while True:
            with self.lock:
                while not self.checks or self.checks[0][0] > time.monotonic():
                    self.lock.wait(self.checks[0][0] - time.monotonic() if self.checks else None)
                _, key = heapq.heappop(self.checks)
                told = self.told.get(key)
            if told is not None and time.monotonic() - told.at >= self.bound:
                seconds = time.monotonic() - told.at
                self._report(Stop(key, told.reason, told.runner, StopStep.OVERDUE, seconds))

    def _report(self, stop: Stop) -> None:
        try:
            self.report(stop)
        except Exception:  # a log or a count must not break the thread that stops
            log.exception("job %s task %d: could not report its stop", stop.key[0], stop.key[1])


# What an attempt still running past the bound does, by what runs it.
OVERDUE_WORDS = {
    "thread": "a thread cannot be killed: it keeps its slot until the task returns (a long "
    "task should check current_task().cancelled)",
    "async": "its coroutine swallows its cancel, or blocks the event loop",
    "process": "its child process did not die when killed",
}


def log_stop(stop: Stop, task: str) -> None:
    """The worker's log line of a stop's step, naming the task `task` (its id): a warning for
    an attempt that does not stop; the stop itself is logged by whoever decided it (the
    heartbeat, the timeout)."""
    job_id, _, token = stop.key
    attempt = token.partition(":")[0]
    why = STOP_WORDS[stop.reason]
    if stop.step is StopStep.OVERDUE:
        log.warning(
            "job %s task %s attempt %s still runs %.1f s after it was stopped (%s): %s",
            job_id, task, attempt, stop.seconds, why, OVERDUE_WORDS[stop.runner],
        )  # fmt: skip
    elif stop.step is StopStep.ENDED:
        log.info(
            "job %s task %s attempt %s ended %.3f s after it was stopped (%s)",
            job_id, task, attempt, stop.seconds, why,
        )  # fmt: skip


class StopCounts:
    """Stops counted and not yet added to the shards' metrics (the heartbeat adds them):
    attempts stopped, and those still running past the bound, by reason and runner."""

    FIELDS = {StopStep.TOLD: MetricField.STOPPED, StopStep.OVERDUE: MetricField.STOP_OVERDUE}

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.lock = threading.Lock()
        self.counts: Counter[tuple[int, str]] = Counter()

    def add(self, stop: Stop) -> None:
        kind = self.FIELDS.get(stop.step)
        if kind is not None:
            shard = self.keys.job_shard(stop.key[0])
            with self.lock:
                self.counts[shard, kind.of(stop.reason, stop.runner)] += 1

    def flush(self, store: Store) -> None:
        """Add what was counted to Redis; kept for the next flush if Redis refuses."""
        with self.lock:
            counts, self.counts = self.counts, Counter()
        try:
            metrics.count(store, counts)
        except BaseException:
            with self.lock:
                self.counts.update(counts)
            raise
