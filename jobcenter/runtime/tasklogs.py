"""Task logs: what each attempt prints and logs, kept per attempt and bounded.

A worker's threads share sys.stdout, so the capture is per attempt, not per process:
`install` puts a proxy on sys.stdout and sys.stderr and a handler on the root logger once,
and each routes a write to the attempt running in the writing thread or coroutine (a
context variable the runner sets with `capturing`), or to the real stream when none is.
An attempt's AttemptLog keeps only its last LOG_MAX_BYTES and counts what it dropped, so a
task that prints megabytes costs neither the worker's memory nor Redis more than that.
A child process (process pool) sends its writes to the worker over its pipe (`ChildStream`);
the worker keeps them in the attempt's AttemptLog, so a child killed mid-print keeps what
reached the worker.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TextIO

from jobcenter.storage.task_logs import WORKER_MARK, dropped_line

from .logs import TEXT_FORMAT

LOG_MAX_BYTES = 64 * 1024  # bytes kept of an attempt's output: its last ones
CHILD_SEND_BYTES = 4096  # a child sends its output at each newline, or once this much waits
LOG_LEVEL = logging.INFO  # records at this level and above reach an attempt's log

_current: ContextVar[AttemptLog | None] = ContextVar("jobcenter_attempt_log", default=None)
_install_lock = threading.Lock()


class AttemptLog:
    """The last `max_bytes` bytes an attempt wrote, and how many it wrote before them."""

    def __init__(self, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.chunks: deque[bytes] = deque()
        self.size = 0  # bytes in chunks
        self.dropped = 0  # bytes written before the ones kept
        self.writes = 0  # bumped by every write: tells a reader whether anything changed
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self.lock:
            self.writes += 1
            if len(data) >= self.max_bytes:
                self.dropped += self.size + len(data) - self.max_bytes
                self.chunks.clear()
                self.chunks.append(data[-self.max_bytes :])
                self.size = self.max_bytes
                return
            self.chunks.append(data)
            self.size += len(data)
            while self.size > self.max_bytes:  # drop from the head, a chunk or a part of one
                excess = self.size - self.max_bytes
                head = self.chunks[0]
                if len(head) <= excess:
                    self.chunks.popleft()
                    cut = len(head)
                else:
                    self.chunks[0] = head[excess:]
                    cut = excess
                self.size -= cut
                self.dropped += cut

    def write_text(self, text: str) -> None:
        self.write(text.encode("utf-8", "backslashreplace"))

    def note(self, line: str) -> None:
        """A line of the worker's own about the attempt, on a line of its own (after output
        cut mid-line, by a kill or a task that printed no newline)."""
        with self.lock:
            mid_line = bool(self.chunks) and not self.chunks[-1].endswith(b"\n")
        self.write_text(("\n" if mid_line else "") + f"{WORKER_MARK} {line}\n")

    def empty(self) -> bool:
        return not self.writes

    def render(self) -> bytes:
        """What is stored: the kept bytes, after a line saying how many were dropped."""
        with self.lock:
            body = b"".join(self.chunks)
            dropped = self.dropped
        if not dropped:
            return body
        return dropped_line(dropped, self.max_bytes) + body


def current() -> AttemptLog | None:
    """The log of the attempt running in this thread or coroutine, if any."""
    return _current.get()


class capturing:  # a `with` block, named like the contextmanager function it replaces
    """Route this thread's (or coroutine's) output to `log` while the block runs. A class,
    not a generator: it runs around every attempt of the thread pool."""

    __slots__ = ("log", "reset")

    def __init__(self, log: AttemptLog | None) -> None:
        self.log = log

    def __enter__(self) -> None:
        self.reset = _current.set(self.log)

    def __exit__(self, *_: object) -> None:
        _current.reset(self.reset)


class _Router:
    """sys.stdout or sys.stderr: writes go to the current attempt's log, else to the real
    stream. Everything else (fileno, encoding, isatty...) is the real stream's."""

    def __init__(self, real: TextIO) -> None:
        self._real = real

    def write(self, text: str) -> int:
        log = _current.get()
        if log is None:
            return self._real.write(text)
        log.write_text(text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if _current.get() is None:
            self._real.flush()

    @property
    def buffer(self) -> _RouterBuffer:
        return _RouterBuffer(self._real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _RouterBuffer:
    """_Router.buffer: bytes go to the current attempt's log, else to the real stream's."""

    def __init__(self, real: TextIO) -> None:
        self._real = real

    def write(self, data: bytes) -> int:
        log = _current.get()
        if log is None:
            return self._real.buffer.write(data)
        log.write(bytes(data))
        return len(data)

    def flush(self) -> None:
        if _current.get() is None:
            self._real.buffer.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real.buffer, name)


class _LogHandler(logging.Handler):
    """Log records emitted inside an attempt, formatted, into its log."""

    def __init__(self) -> None:
        super().__init__(LOG_LEVEL)
        self.setFormatter(logging.Formatter(TEXT_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        log = _current.get()
        if log is None:
            return
        try:
            log.write_text(self.format(record) + "\n")
        except Exception:  # a record that cannot be formatted must not fail the task
            self.handleError(record)


def install() -> None:
    """Capture attempts' output from now on (once per process). The root logger is set to
    let INFO records through, with its handlers kept at the level it had, so the worker's
    own console shows what it showed before."""
    with _install_lock:
        if not isinstance(sys.stdout, _Router):
            sys.stdout = _Router(sys.stdout)
        if not isinstance(sys.stderr, _Router):
            sys.stderr = _Router(sys.stderr)
        root = logging.getLogger()
        if any(isinstance(h, _LogHandler) for h in root.handlers):
            return
        if root.level > LOG_LEVEL or root.level == logging.NOTSET:
            for handler in root.handlers:
                handler.setLevel(max(handler.level, root.getEffectiveLevel()))
            root.setLevel(LOG_LEVEL)
        root.addHandler(_LogHandler())


class ChildStream:
    """A child process's sys.stdout and sys.stderr: its writes go to the worker through
    `send`, at each newline or once CHILD_SEND_BYTES wait, so a child killed mid-print
    loses at most its last unfinished line."""

    def __init__(self, send: Callable[[bytes], None], real: TextIO) -> None:
        self._send = send
        self._real = real  # the process's own stream: what fileno() gives (see there)
        self._pending: list[bytes] = []
        self._size = 0
        self._lock = threading.Lock()
        self.encoding = "utf-8"
        self.errors = "backslashreplace"
        self.buffer = _ChildBuffer(self)  # for tasks that write bytes to sys.stdout.buffer

    def write(self, text: str) -> int:
        self.write_bytes(text.encode("utf-8", "backslashreplace"))
        return len(text)

    def write_bytes(self, data: bytes) -> None:
        with self._lock:
            self._pending.append(data)
            self._size += len(data)
            if b"\n" in data or self._size >= CHILD_SEND_BYTES:
                self._flush_locked()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending, self._size = [], 0
            self._send(data)

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        """The real descriptor, for code that hands it on (a subprocess's stdout): what
        goes there reaches the worker's own output, not the task's log."""
        return self._real.fileno()


class _ChildBuffer:
    """ChildStream.buffer: bytes written to it go to the task's log too."""

    def __init__(self, stream: ChildStream) -> None:
        self._stream = stream

    def write(self, data: bytes) -> int:
        self._stream.write_bytes(bytes(data))
        return len(data)

    def flush(self) -> None:
        self._stream.flush()


def capture_in_child(send: Callable[[bytes], None]) -> ChildStream:
    """In a task's child process: its stdout, stderr and log records (INFO and above) go
    to the worker through `send`."""
    stream = ChildStream(send, sys.__stdout__ or sys.stdout)
    sys.stdout = sys.stderr = stream
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    handler.setLevel(LOG_LEVEL)
    root.handlers[:] = [handler]
    root.setLevel(LOG_LEVEL)
    return stream


def ended_line(ok: bool, error: str, attempt: int, handler: str) -> str:
    """The worker's line closing an attempt's log."""
    if ok:
        return f"attempt {attempt} succeeded on worker {handler}"
    first = error.splitlines()[0] if error else "no error text"
    return f"attempt {attempt} failed on worker {handler}: {first}"
