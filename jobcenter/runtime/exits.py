"""How a worker process ends: with the code the worker chose, whatever its tasks do.

Two things would otherwise decide it behind the worker's back:

- A task in the thread pool that calls os._exit(0) ends the whole process with "success",
  and a supervisor that restarts only on failure (systemd's Restart=on-failure) leaves the
  worker down. `guard()` replaces os._exit in the worker's process: called by anything but
  the worker, it logs who called it and ends the process non-zero (EXIT_TASK_ENDED_IT in
  place of a 0; another code is kept). The worker's own exits go through `exit_now`, the
  real os._exit. Replacing the function is the one way to see such an exit coming: os._exit
  runs no atexit hook, no `finally`, and skips the exit status the worker would have given.
  A process forked from the worker (a task's os.fork(), multiprocessing) exits as it says:
  its exit is its own. Code that took os._exit before guard() ran, or calls the C _exit
  itself, is not caught.
- A task's leftover non-daemon thread keeps a stopped worker alive, since Python joins every
  such thread before the process ends. `finish()` ends a worker whose orderly stop is done
  without waiting for them: they belong to attempts that ended already.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import NoReturn

from jobcenter.errors import JobcenterError

from .context import current_task

log = logging.getLogger(__name__)

EXIT_TASK_ENDED_IT = 71  # a task ended the worker's process with os._exit(0)
# Threads that end on their own at a stop (an executor's idle threads told to shut down) get
# this long; a task's thread still running after it is left behind.
FINISH_GRACE_SECONDS = 1.0

_real_exit = os._exit  # taken before guard() replaces it


def exit_now(code: int) -> NoReturn:
    """End the process at once with `code`, as the worker chose, once what was logged or
    printed is flushed."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _real_exit(code)


def guard() -> None:
    """From now on an os._exit in this process that the worker did not make ends it non-zero,
    with a log line naming the task (or thread) that made it."""
    owner = os.getpid()

    def guarded_exit(status: int) -> NoReturn:  # os._exit's own signature
        if os.getpid() != owner:  # a forked child: its exit is its own
            _real_exit(status)
        given = status or EXIT_TASK_ENDED_IT
        log.critical(
            "os._exit(%d) called by %s, not by the worker: the worker exits %d, for its "
            "supervisor to restart it (its running tasks run again once their leases end)",
            status,
            _caller(),
            given,
            stack_info=True,
        )
        exit_now(given)

    os._exit = guarded_exit


def finish(code: int = 0) -> None:
    """After the worker's orderly stop: return, for the process to end as usual; or, when
    threads a task left running (not daemons) would keep it alive, log them and end it now
    with `code`."""
    deadline = time.monotonic() + FINISH_GRACE_SECONDS
    left = []
    for thread in threading.enumerate():
        if thread.daemon or thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread.name)
    if not left:
        return
    log.warning(
        "worker stopped; not waiting for %d thread(s) its tasks left running: %s",
        len(left),
        ", ".join(left),
    )
    exit_now(code)


def _caller() -> str:
    try:
        ctx = current_task()
    except JobcenterError:  # not from a task's own thread: a thread a task started, say
        return f"thread {threading.current_thread().name!r}"
    return f"task {ctx.task_id!r} of job {ctx.job_id} (attempt {ctx.attempt})"
