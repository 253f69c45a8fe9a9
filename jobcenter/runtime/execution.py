"""Running one attempt: payload decoding, the task call, its outcome, timeouts and stops.

Every way an attempt can end is an Outcome: a return, any exception (BaseException too:
SystemExit, KeyboardInterrupt, ...), a child process that exits or is killed, a pipe that
breaks.

Two runners. `ThreadRunner` runs tasks in threads, and coroutine functions side by side on
one event loop of its own: a thread cannot be stopped, so an attempt past its timeout or
stopped (`stop`: its job cancelled, its task taken over) is told so
(`current_task().cancelled`; a coroutine is cancelled at its next await), its outcome is
settled at once (a late result is discarded), and its slot stays busy until the thread
returns. (In a child process, a coroutine function runs on an event loop of its own,
`asyncio.run`.) `ProcessRunner` runs each attempt in a child process, killed at its timeout
or stop; progress reports travel back over a pipe. Both tell their StopWatch
(runtime/stopping.py) of every attempt they stop, and when it ended."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import logging
import multiprocessing
import os
import queue
import random
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any, Protocol

from jobcenter.config import DEFAULT_RESULT_MAX_BYTES
from jobcenter.errors import Fatal, Retry, SpecError
from jobcenter.model import codec
from jobcenter.storage.store import NO_RESULT, StartedTask

from . import registry
from .context import TaskContext, set_current, valid_utf8
from .lifeline import exit_with
from .stopping import (
    STOP_BOUND_SECONDS,
    STOP_WORDS,
    AttemptKey,
    Stop,
    StopReason,
    StopWatch,
)

log = logging.getLogger(__name__)

ERROR_TEXT_MAX = 4_000  # characters of an error (with its traceback) kept in Redis
ERROR_MESSAGE_MAX = 1_000  # characters of an exception's message on the error's first line
ERROR_LINE_MAX = 500  # characters kept of each traceback line (a huge message is one line)
DEFAULT_BACKOFF = 1.0  # seconds; a spec's retry_backoff default
DEFAULT_BACKOFF_MAX = 300.0
# A child whose pipe to the worker broke exits with this code: it can report nothing more.
PIPE_LOST_EXIT_CODE = 87
CHILD_EXIT_WAIT_SECONDS = 5.0  # a child whose pipe closed has this long to exit by itself

STOP_ORDER = b"\xff"  # sorts after every run order (they are ASCII)
Progress = Callable[[StartedTask, str], None]


class Done(Protocol):
    """Where a runner sends the outcomes of the attempts it was given: one or more at a time."""

    def __call__(self, *outcomes: Outcome) -> None: ...


@dataclass
class Outcome:
    task: StartedTask
    ok: bool
    error: str = ""
    retry_delay_ms: int = -1  # < 0: do not retry
    # set when this worker has no code for the task: the attempt is given back, unused
    missing_task: str = ""
    # set when a gate the task requires said no: the attempt goes back, unused, to wait
    gate: str = ""
    gate_backoff_ms: int = 0
    gate_give_up_ms: int = 0
    result: bytes = NO_RESULT  # what the task returned, packed (stored with its success)
    seconds: float = 0.0  # how long the attempt ran (ThreadRunner: what prefetching goes by)


class ResultRefused(Exception):
    """A task returned a value that cannot be stored: not msgpack-able, or over the limit.
    Running it again would return the same, so it fails the task without a retry."""


def pack_result(task_name: str, value: object, max_bytes: int) -> bytes:
    """The task's return value as stored in Redis; ResultRefused names what is wrong."""
    if value is None:
        return NO_RESULT
    try:
        return codec.pack(value, what="the result", max_bytes=max_bytes)
    except codec.TooLarge:
        raise ResultRefused(
            f"ResultTooLarge: task {task_name!r} returned a result of more than {max_bytes} "
            "bytes packed (JOBCENTER_RESULT_MAX_BYTES); it is not stored cut short: keep "
            "bulk data elsewhere and return a reference to it"
        ) from None
    except SpecError as exc:
        raise ResultRefused(
            f"TypeError: task {task_name!r} returned a {type(value).__name__} that cannot be "
            f"stored as its result ({exc}); a result must be msgpack-able: None, bool, int, "
            "float, str, bytes, and lists and dicts of them"
        ) from None


def attempt_key(task: StartedTask) -> AttemptKey:
    return (task.job_id, task.index, task.token)


def ignore_stop(_: Stop) -> None:
    """A runner's default listener of its stops (the worker passes its own)."""


def backoff_ms(attempt: int, base: float, cap: float) -> int:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    return int(random.uniform(0, min(cap, base * 2 ** (attempt - 1))) * 1000)


def describe(exc: BaseException, note: str = "") -> str:
    """`Type: message` (and `note`), then the traceback: valid UTF-8, at most ERROR_TEXT_MAX
    characters (its start and end kept). Never raises, whatever the exception: huge, holding
    text UTF-8 cannot encode, or with a str() that raises."""
    name = type(exc).__name__
    try:
        head = f"{name}: {_clip(_safe_str(exc), ERROR_MESSAGE_MAX)}" + (f"\n{note}" if note else "")
        lines = "".join(traceback.format_exception(exc)).replace("\t", "  ").splitlines()
        text = "\n".join([head, *(_clip(line, ERROR_LINE_MAX) for line in lines)])
    except BaseException as failure:  # a description must not end the attempt
        text = f"{name} (its traceback could not be formatted: {type(failure).__name__})"
    return valid_utf8(_clip(text, ERROR_TEXT_MAX))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException as failure:  # a hostile __str__ may raise anything
        return f"<str() of the exception raised {type(failure).__name__}>"


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, keeping its start and its end (a traceback's end
    names the failing line)."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} characters cut ...] "
    keep = max(0, limit - len(marker))
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


def decode(task: StartedTask) -> dict[str, Any]:
    """The task's payload, its kwargs joined by its inputs (the parents' results)."""
    payload = codec.unpack(task.payload)
    if not isinstance(payload, dict) or "t" not in payload:
        raise ValueError("task payload is not a task")
    if task.inputs:
        payload["k"] = {**payload.get("k", {}), **task.input_kwargs()}
    return payload


def task_label(task: StartedTask) -> str:
    """The task's id for a log line (its index, '#3', when its payload cannot say)."""
    try:
        payload = codec.unpack(task.payload)
    except Exception:
        payload = None
    name = payload.get("id") if isinstance(payload, dict) else None
    return name if isinstance(name, str) else f"#{task.index}"


def retry_delay(task: StartedTask, payload: dict[str, Any]) -> int:
    base = payload.get("rb", DEFAULT_BACKOFF)
    return backoff_ms(task.attempt, base, payload.get("rm", DEFAULT_BACKOFF_MAX))


def context_for(
    task: StartedTask, payload: dict[str, Any], handler: str, report: Callable[[str], None]
) -> TaskContext:
    return TaskContext(
        task.job_id, payload.get("id", str(task.index)), task.attempt, handler, report, task.token
    )


def execute(
    task: StartedTask,
    payload: dict[str, Any],
    ctx: TaskContext,
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
) -> Outcome:
    """Run one attempt and turn what happened into an Outcome; never raises."""
    closed = gate_outcome(task, payload)
    if closed is not None:
        return closed
    set_current(ctx)
    try:
        value = _call(registry.lookup(payload["t"]), payload, ctx)
        return Outcome(task, True, result=pack_result(payload["t"], value, result_max_bytes))
    except BaseException as exc:
        return failed(task, payload, exc)
    finally:
        set_current(None)


async def execute_async(
    task: StartedTask,
    payload: dict[str, Any],
    ctx: TaskContext,
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
) -> Outcome:
    """execute() for a coroutine function's attempt, awaited on the runner's event loop (as
    an asyncio task: current_task() is its own); never raises."""
    closed = gate_outcome(task, payload)
    if closed is not None:
        return closed
    set_current(ctx)
    try:
        fn = registry.lookup(payload["t"])
        value = await _until_stopped(fn(*payload.get("a", ()), **payload.get("k", {})), ctx)
        return Outcome(task, True, result=pack_result(payload["t"], value, result_max_bytes))
    except BaseException as exc:
        return failed(task, payload, exc)


def gate_outcome(task: StartedTask, payload: dict[str, Any]) -> Outcome | None:
    """The outcome of an attempt one of whose gates says no (it does not run), or None."""
    closed = closed_gate(payload.get("g", ()))
    if closed is None:
        return None
    return Outcome(
        task,
        False,
        f"gate {closed.name!r} said no",
        gate=closed.name,
        gate_backoff_ms=int(closed.backoff * 1000),
        gate_give_up_ms=int(closed.give_up_after * 1000),
    )


def failed(task: StartedTask, payload: dict[str, Any], exc: BaseException) -> Outcome:
    """The outcome of an attempt whose task raised `exc`."""
    if isinstance(exc, ResultRefused):
        return Outcome(task, False, str(exc))
    if isinstance(exc, registry.UnknownTask):  # not the task failing: a worker with it may come
        return Outcome(task, False, str(exc), missing_task=payload["t"])
    if isinstance(exc, Fatal):
        return Outcome(task, False, describe(exc))
    if isinstance(exc, Retry):
        delay = exc.delay if exc.delay is not None else payload.get("rb", DEFAULT_BACKOFF)
        return Outcome(task, False, describe(exc), int(delay * 1000))
    if isinstance(exc, Exception):
        return Outcome(task, False, describe(exc), retry_delay(task, payload))
    # SystemExit, KeyboardInterrupt, GeneratorExit, CancelledError...
    note = "(raised by the task: it fails this attempt; a task cannot stop its worker)"
    return Outcome(task, False, describe(exc, note), retry_delay(task, payload))


def is_async_task(name: str) -> bool:
    """Whether task `name` is a coroutine function (an unknown one is not: execute() says
    it is unknown)."""
    try:
        return inspect.iscoroutinefunction(registry.lookup(name))
    except registry.UnknownTask:
        return False


def closed_gate(names: Iterable[str]) -> registry.Gate | None:
    """The first of a task's gates that says no, if any. A gate this worker has not
    registered says no (it cannot vouch for it), with the default timings; a check that
    raises says no too."""
    for name in names:
        gate = registry.lookup_gate(name)
        if gate is None:
            log.warning("gate %r is not registered on this worker: its tasks wait", name)
            return registry.Gate(
                name, bool, registry.GATE_BACKOFF_SECONDS, registry.GATE_GIVE_UP_SECONDS
            )
        try:
            if gate.check():
                continue
        except Exception as exc:
            log.warning("gate %r check raised (%s): taken as no", name, exc)
        return gate
    return None


def _call(fn: Callable[..., Any], payload: dict[str, Any], ctx: TaskContext) -> Any:
    """Call the task and return its return value; run what it returns if that is a
    coroutine (or other awaitable), and return what that returns."""
    result = fn(*payload.get("a", ()), **payload.get("k", {}))
    if inspect.isawaitable(result):
        return asyncio.run(_until_stopped(result, ctx))
    if isinstance(result, types.GeneratorType | types.AsyncGeneratorType):
        # @task refuses generator functions; this catches wrappers that return one
        raise Fatal(
            f"task {payload['t']!r} returned a {type(result).__name__} instead of doing its "
            "work: a generator runs nothing until iterated; make the task a plain function"
        )
    return result


async def _until_stopped(awaitable: Awaitable[Any], ctx: TaskContext) -> Any:
    """Await the task's coroutine; stopping the attempt cancels it at its next await."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    ctx.on_stop(lambda: loop.call_soon_threadsafe(me.cancel))
    return await awaitable


def relay(progress: Progress, task: StartedTask, message: str) -> None:
    """Pass a progress report on. Progress is advisory (the next heartbeat carries it
    again), so a failure to send it must not fail the attempt nor stop its supervisor."""
    try:
        progress(task, message)
    except Exception as exc:
        log.warning(
            "job %s task %s: progress report not sent (%s)", task.job_id, task_label(task), exc
        )


def timed_out(task: StartedTask, payload: dict[str, Any], note: str) -> Outcome:
    error = f"TimeoutError: task ran past its timeout of {payload['to']}s; {note}"
    return Outcome(task, False, error, retry_delay(task, payload))


@dataclass(eq=False)
class _Attempt:
    """An attempt given to the thread pool whose outcome has not gone out yet."""

    task: StartedTask
    payload: dict[str, Any]
    done: Done
    context: TaskContext
    on_loop: bool = False  # a coroutine function's attempt: it runs on the runner's event loop
    stopped: StopReason | None = None  # why its outcome was settled before it returned
    began: bool = False  # a thread took it (until then it may be withdrawn)
    withdrawn: bool = False  # given back before a thread took it: it never runs here


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


class EventLoop:
    """An asyncio event loop on a thread of its own: the attempts of coroutine functions run
    on it side by side (no thread each), as many as the runner has free slots. Their
    outcomes are reported from another thread, so the loop runs on during a report, and what
    ends meanwhile goes out with the next report, in one batch."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.ended: queue.SimpleQueue[tuple[Done, Outcome]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="jobcenter-event-loop", daemon=True
        )
        self.thread.start()
        threading.Thread(target=self._report, name="jobcenter-loop-reports", daemon=True).start()

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` as a task of the loop (from any thread)."""
        if threading.current_thread() is self.thread:
            self._spawn(coroutine)
        else:
            self.loop.call_soon_threadsafe(self._spawn, coroutine)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _report(self) -> None:
        while True:
            ended = [self.ended.get()]
            while not self.ended.empty():
                ended.append(self.ended.get())
            by_done: dict[Done, list[Outcome]] = {}
            for done, outcome in ended:
                by_done.setdefault(done, []).append(outcome)
            for done, outcomes in by_done.items():
                done(*outcomes)


class ThreadRunner:
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
        self.handler = handler
        self.on_slot_free = on_slot_free
        self.result_max_bytes = result_max_bytes
        self.stops = StopWatch(on_stop, stop_bound)
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
        attempt = _Attempt(task, payload, done, context, on_loop=is_async_task(payload["t"]))
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
            if attempt.payload.get("to"):
                deadline = time.monotonic() + float(attempt.payload["to"])
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
                        outcome = await execute_async(
                            attempt.task, attempt.payload, attempt.context, self.result_max_bytes
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
            attempt.done(timed_out(task, attempt.payload, note))

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


def _child_main(
    conn: Connection,
    task: StartedTask,
    payload: dict[str, Any],
    handler: str,
    modules: list[str],
    worker_pid: int,
    result_max_bytes: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when children stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_with(worker_pid)  # a kill -9'd worker's attempt must not run on
    registry.import_modules(modules)

    def send(message: tuple[str, Any]) -> None:
        try:
            conn.send(message)
        except OSError:  # the pipe broke or was closed: nothing more can reach the worker
            os._exit(PIPE_LOST_EXIT_CODE)

    ctx = context_for(task, payload, handler, lambda m: send(("progress", str(m))))
    send(("done", execute(task, payload, ctx, result_max_bytes)))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a task may have closed them
            stream.flush()
    # At once: threads the task left behind must not keep the child (and its slot) alive.
    os._exit(0)


def child_died(exitcode: int | None) -> str:
    """The error of an attempt whose process ended without reporting an outcome."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        how = f"was killed by signal {-exitcode} ({name})"
    elif exitcode == PIPE_LOST_EXIT_CODE:
        how = f"exited with code {exitcode}: its pipe to the worker broke"
    else:
        how = f"exited with code {exitcode}"
    return f"task process {how} before reporting an outcome"


class ProcessRunner:
    """Each attempt in its own child process (forkserver, task modules preloaded), killed
    at its timeout or stop; a thread per slot supervises its child."""

    def __init__(
        self,
        concurrency: int,
        handler: str,
        modules: list[str],
        on_slot_free: Callable[[], None],
        result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
        on_stop: Callable[[Stop], None] = ignore_stop,
        stop_bound: float = STOP_BOUND_SECONDS,
    ) -> None:
        self.handler = handler
        self.modules = modules
        self.result_max_bytes = result_max_bytes
        self.on_slot_free = on_slot_free
        self.stops = StopWatch(on_stop, stop_bound)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["jobcenter.runtime.execution", *modules])
        forkserver.ensure_running()  # now, not on the first task (it takes ~2 s to start)
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="jobcenter-child")
        self.busy = 0
        self.lock = threading.Lock()
        # attempts whose outcome has not gone out, with their child once started: whoever
        # removes one settles its outcome (its supervisor, or a stop)
        self.attempts: dict[AttemptKey, Any] = {}
        self.killed = False

    def submit(self, task: StartedTask, progress: Progress, done: Done) -> None:
        with self.lock:
            self.busy += 1
            self.attempts[attempt_key(task)] = None
        self.pool.submit(self._supervise, task, progress, done)

    def _supervise(self, task: StartedTask, progress: Progress, done: Done) -> None:
        try:
            outcome = self._outcome(task, progress)
            with self.lock:
                mine = self.attempts.pop(attempt_key(task), False) is not False
            if mine and not self.killed:  # a child killed by kill_all was given back
                done(outcome)
            elif not mine:  # stopped: its child is gone now
                self.stops.ended(attempt_key(task))
        finally:
            with self.lock:
                self.busy -= 1
            self.on_slot_free()

    def _outcome(self, task: StartedTask, progress: Progress) -> Outcome:
        try:
            payload = decode(task)
        except Exception as exc:
            return Outcome(task, False, f"unreadable task payload: {exc}")
        try:
            return self._run_child(task, payload, progress)
        except Exception as exc:  # cannot start a process (fork fails, no fds left, ...)
            log.warning("job %s task %s: %s", task.job_id, task_label(task), describe(exc))
            error = f"cannot run the task process: {describe(exc)}"
            return Outcome(task, False, error, retry_delay(task, payload))

    def _run_child(self, task: StartedTask, payload: dict[str, Any], progress: Progress) -> Outcome:
        receiver, sender = self.ctx.Pipe(duplex=False)
        child = self.ctx.Process(
            target=_child_main,
            args=(
                sender,
                task,
                payload,
                self.handler,
                self.modules,
                os.getpid(),
                self.result_max_bytes,
            ),
            daemon=True,
        )
        child.start()
        sender.close()
        key = attempt_key(task)
        with self.lock:
            stopped = key not in self.attempts  # stopped while its child started
            if not stopped:
                self.attempts[key] = child
        if stopped:
            child.kill()
        try:
            return self._follow(child, receiver, task, payload, progress)
        finally:
            receiver.close()

    def _follow(
        self,
        child: Any,
        receiver: Connection,
        task: StartedTask,
        payload: dict[str, Any],
        progress: Progress,
    ) -> Outcome:
        """Relay the child's progress until it reports its outcome, dies, or times out."""
        deadline = time.monotonic() + float(payload["to"]) if payload.get("to") else None
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not receiver.poll(wait):
                self.stops.stopped(attempt_key(task), StopReason.TIMED_OUT, "process")
                child.kill()
                child.join()
                self.stops.ended(attempt_key(task))
                return timed_out(task, payload, "its process was killed")
            try:
                kind, value = receiver.recv()
            except Exception:  # EOF, a broken pipe: the child died, or closed its pipe
                child.join(CHILD_EXIT_WAIT_SECONDS)
                if child.exitcode is None:  # alive, but it can report nothing any more
                    child.kill()
                    child.join()
                    error = "task process closed its pipe to the worker; it was killed"
                else:
                    error = child_died(child.exitcode)
                return Outcome(task, False, error, retry_delay(task, payload))
            if kind == "done":
                child.join()
                return value
            relay(progress, task, value)

    def withdraw_waiting(self) -> list[StartedTask]:
        """No prefetching with child processes: nothing waits that could be taken back."""
        return []

    def hand_over_deferred(self) -> None:
        """Nothing to hand over: every attempt has a child of its own at once."""

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        """Kill the child of an attempt that is no longer live (its job cancelled, its task
        taken over...); its outcome is dropped. False if the attempt is not running here (or
        its outcome has gone out already)."""
        with self.lock:
            if key not in self.attempts:
                return False
            child = self.attempts.pop(key)
        self.stops.stopped(key, reason, "process")
        if child is not None:
            child.kill()
        return True

    def kill_all(self) -> None:
        """Kill every running child: their attempts were given back and must not run on."""
        with self.lock:
            self.killed = True
            children = [child for child in self.attempts.values() if child is not None]
        for child in children:
            child.kill()
        for child in children:
            child.join()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
