"""The process pool: each attempt in a child process of its own (child.py), killed at its
timeout or stop; its progress reports travel back over a pipe, and a child that exits or is
killed, or whose pipe breaks, is an Outcome too. The runner tells its StopWatch
(runtime/stopping.py) of every attempt it stops, and when it ended."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

from jobcenter.config import DEFAULT_RESULT_MAX_BYTES
from jobcenter.storage.keyspace.records import TaskPayload
from jobcenter.storage.store import StartedTask

from ..stopping import STOP_BOUND_SECONDS, AttemptKey, Stop, StopReason
from ..tasklogs import AttemptLog
from .child import PIPE_LOST_EXIT_CODE, child_main
from .outcome import (
    Done,
    Outcome,
    Progress,
    attempt_key,
    decode,
    describe,
    ignore_stop,
    relay,
    retry_delay,
    task_label,
    timed_out,
    with_log,
)
from .runner import Runner

log = logging.getLogger(__name__)

CHILD_EXIT_WAIT_SECONDS = 5.0  # a child whose pipe closed has this long to exit by itself


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


class ProcessRunner(Runner):
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
        super().__init__(handler, on_slot_free, result_max_bytes, on_stop, stop_bound)
        self.modules = modules
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["jobcenter.runtime.execution.child", *modules])
        forkserver.ensure_running()  # now, not on the first task (it takes ~2 s to start)
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="jobcenter-child")
        self.busy = 0
        self.lock = threading.Lock()
        # attempts whose outcome has not gone out, with their child once started: whoever
        # removes one settles its outcome (its supervisor, or a stop)
        self.attempts: dict[AttemptKey, Any] = {}
        self.outputs_kept: dict[AttemptKey, AttemptLog] = {}  # what running children wrote
        self.killed = False

    def submit(self, task: StartedTask, progress: Progress, done: Done) -> None:
        with self.lock:
            self.busy += 1
            self.attempts[attempt_key(task)] = None
        self.pool.submit(self._supervise, task, progress, done)

    def _supervise(self, task: StartedTask, progress: Progress, done: Done) -> None:
        try:
            output = AttemptLog()  # what the child sends of its output
            with self.lock:
                self.outputs_kept[attempt_key(task)] = output
            outcome = with_log(self._outcome(task, progress, output), output, self.handler)
            with self.lock:
                mine = self.attempts.pop(attempt_key(task), False) is not False
            if mine and not self.killed:  # a child killed by kill_all was given back
                done(outcome)
            elif not mine:  # stopped: its child is gone now
                self.stops.ended(attempt_key(task))
        finally:
            with self.lock:
                self.busy -= 1
                self.outputs_kept.pop(attempt_key(task), None)
            self.on_slot_free()

    def _outcome(self, task: StartedTask, progress: Progress, output: AttemptLog) -> Outcome:
        try:
            payload = decode(task)
        except Exception as exc:
            return Outcome(task, False, f"unreadable task payload: {exc}")
        try:
            return self._run_child(task, payload, progress, output)
        except Exception as exc:  # cannot start a process (fork fails, no fds left, ...)
            log.warning("job %s task %s: %s", task.job_id, task_label(task), describe(exc))
            error = f"cannot run the task process: {describe(exc)}"
            return Outcome(task, False, error, retry_delay(task, payload))

    def _run_child(
        self, task: StartedTask, payload: TaskPayload, progress: Progress, output: AttemptLog
    ) -> Outcome:
        receiver, sender = self.ctx.Pipe(duplex=False)
        child = self.ctx.Process(
            target=child_main,
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
            return self._follow(child, receiver, task, payload, progress, output)
        finally:
            receiver.close()

    def _follow(
        self,
        child: Any,
        receiver: Connection,
        task: StartedTask,
        payload: TaskPayload,
        progress: Progress,
        output: AttemptLog,
    ) -> Outcome:
        """Relay the child's progress and keep its output until it reports its outcome,
        dies, or times out."""
        deadline = time.monotonic() + float(payload.timeout) if payload.timeout else None
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
            if kind == "log":
                output.write(value)
                continue
            if kind == "done":
                child.join()
                return value
            relay(progress, task, value)

    def outputs(self) -> dict[AttemptKey, AttemptLog]:
        """The logs of the attempts running here, so far (the heartbeat stores them)."""
        with self.lock:
            return dict(self.outputs_kept)

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
