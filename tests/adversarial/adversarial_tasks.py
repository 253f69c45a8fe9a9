"""Hostile tasks: every kind of callable, every way to end an attempt, errors over every limit.

Imported as `adversarial.adversarial_tasks` by the adversarial tests, by the process pool's
children, and by worker processes (`jobcenter worker adversarial.adversarial_tasks`). Every
task is registered under an explicit `adversarial.` name. Tasks leave their marks in files
(`mark(path, text)`): runner-level tests run without Redis, and worker processes share the
test's file system. A task that must run until it is stopped polls for that with a deadline,
so a failed test leaves nothing running for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from jobcenter import TaskCancelled, current_task, task

STOP_DEADLINE_SECONDS = 60.0  # a task waiting to be stopped gives up after this
POLL_SECONDS = 0.01


def mark(path: str, text: str) -> None:
    """Append a line to `path`: what a task did, for the test to read."""
    with open(path, "a") as out:
        out.write(text + "\n")


def marks(path: str | Path) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []


class CustomBaseError(BaseException):
    """A BaseException subclass of a user's own."""


class StrRaises(Exception):
    """An exception whose str() and repr() raise."""

    def __str__(self) -> str:
        raise RuntimeError("str() refused")

    def __repr__(self) -> str:
        raise RuntimeError("repr() refused")


BASE_EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": lambda: KeyboardInterrupt(),
    "GeneratorExit": lambda: GeneratorExit(),
    "CancelledError": lambda: asyncio.CancelledError(),
    "CustomBaseError": lambda: CustomBaseError("mine"),
}


@task(name="adversarial.raise_base")
def raise_base(kind: str, path: str = "") -> None:
    """Raises the BaseException named `kind` (see BASE_EXCEPTIONS); marks each call."""
    if path:
        mark(path, f"{kind} {current_task().attempt}")
    raise BASE_EXCEPTIONS[kind]()


@task(name="adversarial.sys_exit")
def sys_exit(code: int = 0) -> None:
    sys.exit(code)


@task(name="adversarial.exit_process")
def exit_process(code: int) -> None:
    """Ends its process at once (in the thread pool this would end the worker: process pool
    only)."""
    os._exit(code)


@task(name="adversarial.kill_self")
def kill_self(signum: int) -> None:
    """Sends its own process a signal (process pool only)."""
    os.kill(os.getpid(), signum)


@task(name="adversarial.huge_error")
def huge_error(size: int) -> None:
    raise ValueError("x" * size)


@task(name="adversarial.deep_error")
def deep_error(depth: int = 100_000) -> None:
    """A RecursionError: a traceback of ~1000 frames."""
    deep_error(depth - 1)


@task(name="adversarial.non_utf8_error")
def non_utf8_error() -> None:
    """A message UTF-8 cannot encode: bytes decoded with surrogateescape (as os.fsdecode
    and sys.argv do)."""
    raise ValueError(b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape"))


@task(name="adversarial.bytes_error")
def bytes_error() -> None:
    """A message of raw bytes that are not UTF-8."""
    raise ValueError(b"\xff\xfe raw")


@task(name="adversarial.non_utf8_progress")
def non_utf8_progress(path: str, hold: str = "") -> None:
    """Reports progress UTF-8 cannot encode, then finishes (once file `hold` exists)."""
    current_task().progress(b"\xff\xfe".decode("utf-8", "surrogateescape"))
    mark(path, "reported")
    deadline = time.monotonic() + STOP_DEADLINE_SECONDS
    while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


@task(name="adversarial.str_raises")
def str_raises() -> None:
    raise StrRaises()


@task(name="adversarial.close_pipe_then_progress")
def close_pipe_then_progress() -> None:
    """Closes the pipe its process pool child reports on, then reports progress (a broken
    pipe while relaying progress)."""
    for obj in gc.get_objects():
        if isinstance(obj, Connection) and not obj.closed:
            os.close(obj.fileno())
    current_task().progress("into a closed pipe")


@task(name="adversarial.close_pipe_and_run_on")
def close_pipe_and_run_on() -> None:
    """Closes its pipe to the worker and runs on without ever reporting."""
    for obj in gc.get_objects():
        if isinstance(obj, Connection) and not obj.closed:
            os.close(obj.fileno())
    time.sleep(STOP_DEADLINE_SECONDS)


@task(name="adversarial.leave_a_thread_behind")
def leave_a_thread_behind() -> None:
    """Returns, leaving a non-daemon thread that never ends in its process."""
    threading.Thread(target=threading.Event().wait, daemon=False).start()


@task(name="adversarial.wait_until_cancelled")
def wait_until_cancelled(path: str) -> str:
    """Marks 'started', then runs until current_task().cancelled; marks 'saw cancel' (the
    thread pool) -- in the process pool it is killed first. Marks its pid for the test."""
    ctx = current_task()
    mark(path, f"started {os.getpid()}")
    deadline = time.monotonic() + STOP_DEADLINE_SECONDS
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    mark(path, "saw cancel" if ctx.cancelled else "never cancelled")
    ctx.check_cancelled()
    return "done"


@task(name="adversarial.progress_until_stopped")
def progress_until_stopped(path: str) -> None:
    """Marks 'started', then only reports progress (it never looks at
    current_task().cancelled); marks 'progress refused' when a report raises TaskCancelled."""
    ctx = current_task()
    mark(path, f"started {os.getpid()}")
    deadline = time.monotonic() + STOP_DEADLINE_SECONDS
    try:
        while time.monotonic() < deadline:
            ctx.progress("working")
            time.sleep(POLL_SECONDS)
    except TaskCancelled:
        mark(path, "progress refused")
        raise
    mark(path, "never stopped")


@task(name="adversarial.swallow_cancel")
async def swallow_cancel(path: str, seconds: float) -> None:
    """Marks 'started', then awaits `seconds` in all, swallowing its cancel; marks 'done'."""
    mark(path, f"started {os.getpid()}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(POLL_SECONDS)
    mark(path, "done")


@task(name="adversarial.run_on")
def run_on(path: str, seconds: float = STOP_DEADLINE_SECONDS) -> None:
    """Marks 'started', then runs on `seconds`, paying no attention to being cancelled."""
    mark(path, f"started {os.getpid()}")
    time.sleep(seconds)
    mark(path, "ran to its end")


@task(name="adversarial.async_mark")
async def async_mark(path: str, text: str) -> str:
    await asyncio.sleep(0)
    mark(path, f"{text} {current_task().task_id}")
    return text


OVERLAP = {"inside": 0, "peak": 0}  # async_overlap's attempts running now, and at most


@task(name="adversarial.async_overlap")
async def async_overlap(path: str, side_by_side: int) -> None:
    """Marks its thread, then awaits until `side_by_side` attempts of it ran at once (or its
    deadline): they can only if they share the event loop, each awaiting."""
    OVERLAP["inside"] += 1
    OVERLAP["peak"] = max(OVERLAP["peak"], OVERLAP["inside"])
    mark(path, f"thread {threading.get_ident()}")
    deadline = time.monotonic() + STOP_DEADLINE_SECONDS
    try:
        while OVERLAP["peak"] < side_by_side and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
    finally:
        OVERLAP["inside"] -= 1


@task(name="adversarial.async_add")
async def async_add(x: int, y: int = 0) -> int:
    """x + y, after an await (a result the next async task receives as an input)."""
    await asyncio.sleep(0)
    return x + y


@task(name="adversarial.async_fail")
async def async_fail(message: str) -> None:
    await asyncio.sleep(0)
    raise RuntimeError(message)


@task(name="adversarial.async_wait_until_cancelled")
async def async_wait_until_cancelled(path: str) -> None:
    """Marks 'started', then awaits until its coroutine is cancelled; marks 'cancelled'."""
    mark(path, f"started {os.getpid()}")
    try:
        await asyncio.sleep(STOP_DEADLINE_SECONDS)
    except asyncio.CancelledError:
        mark(path, "cancelled")
        raise
    mark(path, "never cancelled")


async def _marks_later(path: str) -> None:
    await asyncio.sleep(0)
    mark(path, "awaited")


@task(name="adversarial.returns_a_coroutine")
def returns_a_coroutine(path: str) -> Coroutine[Any, Any, None]:
    """A plain function returning a coroutine (a decorator around an async def does this)."""
    return _marks_later(path)


def _gen(path: str) -> Iterator[int]:
    mark(path, "generator body ran")
    yield 1


@task(name="adversarial.returns_a_generator")
@functools.wraps(_gen)
def returns_a_generator(path: str) -> Iterator[int]:
    """A wrapper @task cannot see through: it returns a generator, doing no work."""
    return _gen(path)


class CallableObject:
    def __call__(self, path: str) -> None:
        mark(path, "callable object")


class Methods:
    def bound(self, path: str) -> None:
        mark(path, "bound method")

    @staticmethod
    def static(path: str) -> None:
        mark(path, "static method")

    @classmethod
    def klass(cls, path: str) -> None:
        mark(path, f"class method of {cls.__name__}")


def _with_prefix(prefix: str, path: str) -> None:
    mark(path, f"{prefix} partial")


task(name="adversarial.callable_object")(CallableObject())
task(name="adversarial.bound_method")(Methods().bound)
task(name="adversarial.static_method")(Methods.static)
task(name="adversarial.class_method")(Methods.klass)
task(name="adversarial.partial")(functools.partial(_with_prefix, "a"))
task(name="adversarial.lambda")(lambda path: mark(path, "lambda"))
task(name="adversarial.async_partial")(functools.partial(async_mark, text="async partial"))

# Signals that end a child at once (it ignores SIGTERM and SIGINT: its worker decides).
DEADLY_SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSEGV": signal.SIGSEGV}
