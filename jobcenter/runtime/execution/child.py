"""What runs in a task's child process (processes.py starts it): the attempt, its progress
and its outcome sent back over a pipe, and an exit at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from jobcenter.storage.keyspace.records import TaskPayload
from jobcenter.storage.store import StartedTask

from .. import registry
from ..lifeline import exit_with
from ..tasklogs import capture_in_child
from .outcome import context_for, execute

# A child whose pipe to the worker broke exits with this code: it can report nothing more.
PIPE_LOST_EXIT_CODE = 87


def child_main(
    conn: Connection,
    task: StartedTask,
    payload: TaskPayload,
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

    output = capture_in_child(lambda data: send(("log", data)))
    ctx = context_for(task, payload, handler, lambda m: send(("progress", str(m))))
    outcome = execute(task, payload, ctx, result_max_bytes)
    for stream in (output, sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a task may have replaced or closed them
            stream.flush()
    send(("done", outcome))
    # At once: threads the task left behind must not keep the child (and its slot) alive.
    os._exit(0)
