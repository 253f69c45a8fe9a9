"""Running one attempt: payload decoding, the task call, its outcome, and timeouts.

Two runners. `ThreadRunner` runs tasks in threads: a thread cannot be stopped, so a task
past its timeout is reported failed at once (its late result is discarded) and its slot stays
busy until the thread returns. `ProcessRunner` runs each attempt in a child process, killed
at its timeout; progress reports travel back over a pipe."""

from __future__ import annotations

import heapq
import itertools
import logging
import multiprocessing
import os
import queue
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

from . import codec, registry
from .context import TaskContext, set_current
from .errors import Fatal, Retry
from .lifeline import exit_with
from .store import StartedTask

log = logging.getLogger(__name__)

ERROR_TEXT_MAX = 4_000  # characters of an error (with its traceback) kept in Redis
DEFAULT_BACKOFF = 1.0  # seconds; a spec's retry_backoff default
DEFAULT_BACKOFF_MAX = 300.0

Progress = Callable[[StartedTask, str], None]
Done = Callable[["Outcome"], None]


@dataclass
class Outcome:
    task: StartedTask
    ok: bool
    error: str = ""
    retry_delay_ms: int = -1  # < 0: do not retry
    # set when this worker has no code for the task: the attempt is given back, unused
    missing_task: str = ""


def backoff_ms(attempt: int, base: float, cap: float) -> int:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    return int(random.uniform(0, min(cap, base * 2 ** (attempt - 1))) * 1000)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(exc)).replace("\t", "  ")
    return (text + "\n" + tb)[:ERROR_TEXT_MAX]


def decode(task: StartedTask) -> dict[str, Any]:
    payload = codec.unpack(task.payload)
    if not isinstance(payload, dict) or "t" not in payload:
        raise ValueError("task payload is not a task")
    return payload


def retry_delay(task: StartedTask, payload: dict[str, Any]) -> int:
    base = payload.get("rb", DEFAULT_BACKOFF)
    return backoff_ms(task.attempt, base, payload.get("rm", DEFAULT_BACKOFF_MAX))


def execute(
    task: StartedTask, payload: dict[str, Any], handler: str, report: Callable[[str], None]
) -> Outcome:
    """Run one attempt and turn what happened into an Outcome; never raises."""
    ctx = TaskContext(task.job_id, payload.get("id", str(task.index)), task.attempt, handler)
    ctx.report = report
    set_current(ctx)
    try:
        fn = registry.lookup(payload["t"])
        fn(*payload.get("a", ()), **payload.get("k", {}))
        return Outcome(task, True)
    except registry.UnknownTask as exc:  # not a failure of the task: a worker with it may come
        return Outcome(task, False, str(exc), missing_task=payload["t"])
    except Fatal as exc:
        return Outcome(task, False, describe(exc))
    except Retry as exc:
        delay = exc.delay if exc.delay is not None else payload.get("rb", DEFAULT_BACKOFF)
        return Outcome(task, False, describe(exc), int(delay * 1000))
    except Exception as exc:
        return Outcome(task, False, describe(exc), retry_delay(task, payload))
    finally:
        set_current(None)


def timed_out(task: StartedTask, payload: dict[str, Any], note: str) -> Outcome:
    error = f"TimeoutError: task ran past its timeout of {payload['to']}s; {note}"
    return Outcome(task, False, error, retry_delay(task, payload))


class ThreadRunner:
    """Tasks on `concurrency` long-lived threads fed by one queue (no Future per task: this
    is the hot path); a watcher thread enforces timeouts."""

    def __init__(self, concurrency: int, handler: str, on_slot_free: Callable[[], None]) -> None:
        self.handler = handler
        self.on_slot_free = on_slot_free
        self.inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.threads = [
            threading.Thread(target=self._serve, name=f"jobcenter-task-{i}", daemon=True)
            for i in range(concurrency)
        ]
        for thread in self.threads:
            thread.start()
        self.lock = threading.Condition()
        self.busy = 0  # threads occupied, including ones still running past their timeout
        self.deadlines: list[tuple[float, int]] = []
        # attempts with a timeout whose outcome has not gone out yet
        self.watched: dict[int, tuple[StartedTask, dict[str, Any], Done]] = {}
        self.ids = itertools.count()
        threading.Thread(target=self._watch, name="jobcenter-timeouts", daemon=True).start()

    def submit(self, task: StartedTask, progress: Progress, done: Done) -> None:
        try:
            payload = decode(task)
        except Exception as exc:  # unreadable payloads will not get better on retry
            done(Outcome(task, False, f"unreadable task payload: {exc}"))
            return
        run_id = next(self.ids)
        has_timeout = bool(payload.get("to"))
        with self.lock:
            self.busy += 1
            if has_timeout:
                self.watched[run_id] = (task, payload, done)
                heapq.heappush(self.deadlines, (time.monotonic() + float(payload["to"]), run_id))
                self.lock.notify()

        def run() -> None:
            try:
                outcome = execute(task, payload, self.handler, lambda m: progress(task, m))
            finally:
                with self.lock:
                    self.busy -= 1
                    late = has_timeout and self.watched.pop(run_id, None) is None
            if late:
                log.warning(
                    "job %s task %d returned after its timeout; result discarded",
                    task.job_id,
                    task.index,
                )
            else:
                done(outcome)
            self.on_slot_free()

        self.inbox.put(run)

    def _serve(self) -> None:
        while (run := self.inbox.get()) is not None:
            run()

    def _watch(self) -> None:
        while True:
            with self.lock:
                if not self.deadlines:
                    self.lock.wait()
                    continue
                deadline, run_id = self.deadlines[0]
                if deadline > time.monotonic():
                    self.lock.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self.deadlines)
                entry = self.watched.pop(run_id, None)
            if entry is None:
                continue  # it finished in time
            task, payload, done = entry
            log.warning(
                "job %s task %d ran past its timeout; its thread cannot be stopped "
                "and keeps its slot until it returns",
                task.job_id,
                task.index,
            )
            done(
                timed_out(
                    task,
                    payload,
                    "the thread pool cannot stop a thread: it runs on, "
                    "keeping its slot busy, and its result will be discarded",
                )
            )

    def kill_all(self) -> None:
        """Threads cannot be killed; they end with the process."""

    def shutdown(self) -> None:
        for _ in self.threads:
            self.inbox.put(None)


def _child_main(
    conn: Connection,
    task: StartedTask,
    payload: dict[str, Any],
    handler: str,
    modules: list[str],
    worker_pid: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when children stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_with(worker_pid)  # a kill -9'd worker's attempt must not run on
    registry.import_modules(modules)
    outcome = execute(task, payload, handler, lambda m: conn.send(("progress", m)))
    conn.send(("done", outcome))


class ProcessRunner:
    """Each attempt in its own child process (forkserver, task modules preloaded), killed
    at its timeout; a thread per slot supervises its child."""

    def __init__(self, concurrency: int, handler: str, modules: list[str]) -> None:
        self.handler = handler
        self.modules = modules
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["jobcenter.execution", *modules])
        forkserver.ensure_running()  # now, not on the first task (it takes ~2 s to start)
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="jobcenter-child")
        self.busy = 0
        self.lock = threading.Lock()
        self.children: set[Any] = set()  # live child processes, killed on a forced stop
        self.killed = False

    def submit(self, task: StartedTask, progress: Progress, done: Done) -> None:
        with self.lock:
            self.busy += 1
        self.pool.submit(self._supervise, task, progress, done)

    def _supervise(self, task: StartedTask, progress: Progress, done: Done) -> None:
        try:
            outcome = self._run_child(task, progress)
            if not self.killed:  # a child killed by kill_all was given back, not failed
                done(outcome)
        finally:
            with self.lock:
                self.busy -= 1

    def _run_child(self, task: StartedTask, progress: Progress) -> Outcome:
        try:
            payload = decode(task)
        except Exception as exc:
            return Outcome(task, False, f"unreadable task payload: {exc}")
        receiver, sender = self.ctx.Pipe(duplex=False)
        child = self.ctx.Process(
            target=_child_main,
            args=(sender, task, payload, self.handler, self.modules, os.getpid()),
            daemon=True,
        )
        child.start()
        sender.close()
        with self.lock:
            self.children.add(child)
        deadline = time.monotonic() + float(payload["to"]) if payload.get("to") else None
        try:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not receiver.poll(wait):
                    child.kill()
                    child.join()
                    return timed_out(task, payload, "its process was killed")
                try:
                    kind, value = receiver.recv()
                except EOFError:  # the child died without a word (OOM killer, kill -9, ...)
                    child.join()
                    return Outcome(
                        task,
                        False,
                        f"task process died (exit code {child.exitcode})",
                        retry_delay(task, payload),
                    )
                if kind == "done":
                    child.join()
                    return value  # type: ignore[no-any-return]
                progress(task, value)
        finally:
            receiver.close()
            with self.lock:
                self.children.discard(child)

    def kill_all(self) -> None:
        """Kill every running child: their attempts were given back and must not run on."""
        with self.lock:
            self.killed = True
            children = list(self.children)
        for child in children:
            child.kill()
        for child in children:
            child.join()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
