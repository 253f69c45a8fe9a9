"""The thread pool: attempts on long-lived threads fed by one run-order queue, coroutine
functions' attempts side by side on one event loop (event_loop.py), and a watcher thread
that enforces timeouts. A thread cannot be stopped, so an attempt past its timeout or
stopped (`stop`: its job cancelled, its task taken over) is told so
(`current_task().cancelled`; a coroutine is cancelled at its next await), its outcome is
settled at once (a late result is discarded), and its slot stays busy until the thread
returns. The runner tells its StopWatch (runtime/stopping.py) of every attempt it stops, and
when it ended."""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jobcenter.config import DEFAULT_RESULT_MAX_BYTES
from jobcenter.storage.keyspace.records import TaskPayload
from jobcenter.storage.store import StartedTask

from ..context import TaskContext
from ..stopping import STOP_BOUND_SECONDS, STOP_WORDS, AttemptKey, Stop, StopReason
from ..tasklogs import AttemptLog, capturing, install
from .event_loop import EventLoop
from .outcome import (
    Done,
    Outcome,
    Progress,
    attempt_key,
    context_for,
    decode,
    execute,
    execute_async,
    ignore_stop,
    is_async_task,
    relay,
    timed_out,
    with_log,
)
from .runner import Runner

log = logging.getLogger(__name__)

STOP_ORDER = b"\xff"  # sorts after every run order (they are ASCII)


@dataclass(eq=False)
class _Attempt:
    """An attempt given to the thread pool whose outcome has not gone out yet."""

    task: StartedTask
    payload: TaskPayload
    done: Done
    context: TaskContext
    on_loop: bool = False  # a coroutine function's attempt: it runs on the runner's event loop
    stopped: StopReason | None = None  # why its outcome was settled before it returned
    began: bool = False  # a thread took it (until then it may be withdrawn)
    withdrawn: bool = False  # given back before a thread took it: it never runs here
    output: AttemptLog = field(default_factory=AttemptLog)  # what it prints and logs


class RunOrderInbox:
    """The attempts waiting for a slot, handed out in run order (then arrival order), while
    fewer than `slots` handed out are running. A heap under a plain lock; threads that find
    nothing to take sleep on a C-level queue, and a put or a freed slot wakes one of them only
    when one sleeps and something can start (queue.PriorityQueue's Python Condition cost a few
    tens of microseconds per task)."""

    def __init__(self, slots: int) -> None:
        self.heap: list[tuple[bytes, int, _Attempt | None]] = []
        self.lock = threading.Lock()
        self.wakes: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.arrivals = itertools.count()  # equal run orders: first come, first run
        self.slots = slots
        self.running = 0  # handed out and not released
        self.sleeping = 0  # threads in get() with no wake sent to them

    def put(self, run_order: bytes, attempt: _Attempt | None, wake: bool = True) -> _Attempt | None:
        """Queue an attempt (None: a thread's stop, which needs no slot). An attempt for the
        event loop that can start now is not queued but returned, its slot taken, for the
        caller to start on the loop (no thread in between). `wake` off: the calling thread
        takes it itself next (get()), or calls wake() if it cannot."""
        with self.lock:
            if (
                attempt is not None
                and attempt.on_loop
                and self.running < self.slots
                and (not self.heap or run_order < self.heap[0][0])
            ):
                self.running += 1
                return attempt
            heapq.heappush(self.heap, (run_order, next(self.arrivals), attempt))
            woken = wake and self._wake_one()
        if woken:
            self.wakes.put(None)
        return None

    def wake(self) -> None:
        """Wake a sleeping thread if something can start now."""
        with self.lock:
            woken = self._wake_one()
        if woken:
            self.wakes.put(None)

    def get(self) -> _Attempt | None:
        """The next attempt to run (its slot taken), or None for a thread to stop."""
        while True:
            with self.lock:
                if self.heap and (self.heap[0][2] is None or self.running < self.slots):
                    attempt = heapq.heappop(self.heap)[2]
                    self.running += attempt is not None
                    return attempt
                self.sleeping += 1
            self.wakes.get()

    def release(self, take_on_loop: bool = False, wake: bool = True) -> _Attempt | None:
        """An attempt handed out ended: its slot is free. `take_on_loop` (the event loop's
        thread): the next attempt, taken, if it is one for the loop; `wake`: whether a sleeping
        thread is to take what can start now (not when the caller calls get() next)."""
        with self.lock:
            self.running -= 1
            head = self.heap[0][2] if self.heap else None
            if take_on_loop and head is not None and head.on_loop:
                self.running += 1
                return heapq.heappop(self.heap)[2]
            woken = wake and self._wake_one()
        if woken:
            self.wakes.put(None)
        return None

    def _wake_one(self) -> bool:
        """Under the lock: whether to wake a sleeping thread for the head of the heap."""
        if not self.sleeping or not self.heap:
            return False
        if self.heap[0][2] is not None and self.running >= self.slots:
            return False
        self.sleeping -= 1
        return True


class ThreadRunner(Runner):
    """Tasks on `concurrency` long-lived threads fed by one queue (no Future per task: this
    is the hot path); a watcher thread enforces timeouts. The queue hands out the attempts
    waiting for a slot in their tasks' run order (priority, then queue order), so a task
    held beyond the free slots (prefetched) never runs before a higher one taken after it.
    A coroutine function's attempt takes a slot the same way and then runs on one shared
    event loop, not on the thread: I/O-bound async tasks share a thread, with no hand-over of
    the GIL between tasks at each of their I/O calls."""

    def __init__(
        self,
        concurrency: int,
        handler: str,
        on_slot_free: Callable[[], None],
        result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
        on_stop: Callable[[Stop], None] = ignore_stop,
        stop_bound: float = STOP_BOUND_SECONDS,
    ) -> None:
        super().__init__(handler, on_slot_free, result_max_bytes, on_stop, stop_bound)
        install()  # each attempt's output goes to its own log
        self.inbox = RunOrderInbox(concurrency)
        self.threads = [
            threading.Thread(target=self._serve, name=f"jobcenter-task-{i}", daemon=True)
            for i in range(concurrency)
        ]
        for thread in self.threads:
            thread.start()
        self.event_loop: EventLoop | None = None  # started by the first async attempt
        self.lock = threading.Lock()
        self.deadline_added = threading.Condition(self.lock)  # the timeout watcher waits on it
        self.busy = 0  # threads occupied, including ones still running past a timeout or stop
        # attempts whose outcome has not gone out: whoever removes one settles its outcome
        self.active: dict[AttemptKey, _Attempt] = {}
        self.deadlines: list[tuple[float, int, _Attempt]] = []
        self.ids = itertools.count()  # breaks ties between equal deadlines
        # per task thread: `free`, while its attempt's outcome goes out, for the first attempt
        # that outcome's report takes (the thread runs it next itself: no other thread is
        # woken for it, as in a chain); `deferred`, once it took one
        self.serving = threading.local()
        threading.Thread(target=self._watch, name="jobcenter-timeouts", daemon=True).start()

    def submit(self, task: StartedTask, progress: Progress, done: Done) -> None:
        try:
            payload = decode(task)
        except Exception as exc:  # unreadable payloads will not get better on retry
            done(Outcome(task, False, f"unreadable task payload: {exc}"))
            return
        context = context_for(task, payload, self.handler, lambda m: relay(progress, task, m))
        attempt = _Attempt(task, payload, done, context, on_loop=is_async_task(payload.task))
        with self.lock:
            self.busy += 1
            self.active[attempt_key(task)] = attempt
            if attempt.on_loop and self.event_loop is None:
                self.event_loop = EventLoop()
        mine = not attempt.on_loop and getattr(self.serving, "free", False)
        if mine:
            self.serving.free, self.serving.deferred = False, True
        if self.inbox.put(task.run_order, attempt, wake=not mine) is not None:
            self._start_on_loop(attempt)

    def outputs(self) -> dict[AttemptKey, AttemptLog]:
        """The logs of the attempts running here, so far (the heartbeat stores them)."""
        with self.lock:
            return {key: a.output for key, a in self.active.items() if a.began}

    def hand_over_deferred(self) -> None:
        """The calling thread reports more outcomes before it goes back for an attempt: the
        one it kept for itself goes to a sleeping thread now."""
        if getattr(self.serving, "deferred", False):
            self.serving.deferred = False
            self.inbox.wake()

    def withdraw_waiting(self) -> list[StartedTask]:
        """Take back the attempts no thread has begun (a worker's prefetched tasks, when it
        stops): they never run here, and the caller gives their tasks back."""
        with self.lock:
            waiting = [a for a in self.active.values() if not a.began]
            for attempt in waiting:
                attempt.withdrawn = True
                del self.active[attempt_key(attempt.task)]
                self.busy -= 1
        return [attempt.task for attempt in waiting]

    def _settle(self, attempt: _Attempt, stopped: StopReason | None = None) -> bool:
        """Take the right to settle the attempt's outcome (`stopped`: why before it returned);
        False if it was taken already."""
        key = attempt_key(attempt.task)
        with self.lock:
            if self.active.get(key) is not attempt:
                return False
            del self.active[key]
            attempt.stopped = stopped
            return True

    def _begin(self, attempt: _Attempt) -> bool:
        """Mark the attempt begun (its timeout counts from now); False if it was withdrawn."""
        with self.lock:
            if attempt.withdrawn:
                return False
            attempt.began = True
            if attempt.payload.timeout:
                deadline = time.monotonic() + float(attempt.payload.timeout)
                heapq.heappush(self.deadlines, (deadline, next(self.ids), attempt))
                self.deadline_added.notify()
        return True

    def _end(self, attempt: _Attempt, outcome: Outcome | None) -> None:
        """The attempt returned (outcome: None if it never ran): send its outcome, unless it
        was settled already (timed out, stopped: its late result is discarded), and free its
        thread."""
        with self.lock:
            self.busy -= 1
        if outcome is not None and self._settle(attempt):
            with_log(outcome, attempt.output, self.handler)
            if attempt.on_loop:
                assert self.event_loop is not None
                self.event_loop.ended.put((attempt.done, outcome))
            else:
                attempt.done(outcome)
        elif attempt.stopped is not None:
            self.stops.ended(attempt_key(attempt.task))
        self.on_slot_free()

    def _run(self, attempt: _Attempt) -> None:
        if not self._begin(attempt):
            return
        outcome = None
        began = time.monotonic()
        try:
            if not attempt.context.cancelled:  # not cancelled while it waited for a thread
                with capturing(attempt.output):
                    outcome = execute(
                        attempt.task, attempt.payload, attempt.context, self.result_max_bytes
                    )
                outcome.seconds = time.monotonic() - began
        finally:
            self._end(attempt, outcome)

    async def _run_on_loop(self, attempt: _Attempt) -> None:
        """_run for a coroutine function's attempt, as a task of the event loop; it releases
        its slot, and the next attempt, if it is one for the loop too, starts from here
        (no thread in between)."""
        try:
            if self._begin(attempt):
                outcome = None
                began = time.monotonic()
                try:
                    if not attempt.context.cancelled:  # not cancelled while it waited
                        with capturing(attempt.output):  # this asyncio task's context
                            outcome = await execute_async(
                                attempt.task,
                                attempt.payload,
                                attempt.context,
                                self.result_max_bytes,
                            )
                        outcome.seconds = time.monotonic() - began
                finally:
                    self._end(attempt, outcome)
        finally:
            next_attempt = self.inbox.release(take_on_loop=True)
            if next_attempt is not None:
                self._start_on_loop(next_attempt)

    def _start_on_loop(self, attempt: _Attempt) -> None:
        assert self.event_loop is not None  # started by submit()
        self.event_loop.start(self._run_on_loop(attempt))

    def _serve(self) -> None:
        while (attempt := self.inbox.get()) is not None:
            if attempt.on_loop:
                self._start_on_loop(attempt)
                continue
            self.serving.free = True
            try:
                self._run(attempt)
            finally:
                self.serving.free = self.serving.deferred = False
                self.inbox.release(wake=False)  # this thread takes what is next itself

    def _watch(self) -> None:
        while True:
            with self.lock:
                if not self.deadlines:
                    self.deadline_added.wait()
                    continue
                deadline, _, attempt = self.deadlines[0]
                if deadline > time.monotonic():
                    self.deadline_added.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self.deadlines)
            if not self._settle(attempt, StopReason.TIMED_OUT):
                continue  # it finished in time, or was stopped
            task = attempt.task
            self.stops.stopped(attempt_key(task), StopReason.TIMED_OUT, _kind(attempt))
            attempt.context.stop(STOP_WORDS[StopReason.TIMED_OUT])
            if attempt.on_loop:
                note = "its coroutine is cancelled at its next await; its result will be discarded"
            else:
                note = (
                    "the thread pool cannot stop a thread: it runs on, "
                    "keeping its slot busy, and its result will be discarded"
                )
                log.warning(
                    "job %s task %d ran past its timeout; its thread cannot be stopped "
                    "and keeps its slot until it returns",
                    task.job_id,
                    task.index,
                )
            ended = timed_out(task, attempt.payload, note)
            attempt.output.note("ran past its timeout: what it writes from now on is not kept")
            attempt.done(with_log(ended, attempt.output, self.handler))

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        """Stop an attempt that is no longer live (its job cancelled, its task taken over...):
        tell the task (`current_task().cancelled`, a coroutine is cancelled) and stop waiting
        for it; its late result is discarded. One no thread has begun never runs, and its slot
        is free at once. False if the attempt is not running here (or its outcome has gone
        out already)."""
        with self.lock:
            attempt = self.active.pop(key, None)
            if attempt is None:
                return False
            attempt.stopped = reason
            waiting = not attempt.began
            if waiting:  # as withdraw_waiting: the thread that takes it drops it
                attempt.withdrawn = True
                self.busy -= 1
        self.stops.stopped(key, reason, _kind(attempt))
        attempt.context.stop(STOP_WORDS[reason])
        if waiting:
            self.stops.ended(key)
            self.on_slot_free()
        return True

    def kill_all(self) -> None:
        """Threads cannot be killed; they end with the process."""

    def shutdown(self) -> None:
        for _ in self.threads:
            self.inbox.put(STOP_ORDER, None)  # after what waits


def _kind(attempt: _Attempt) -> str:
    """What runs an attempt of the thread pool, as a stop is counted."""
    return "async" if attempt.on_loop else "thread"
