"""The context a running task can read: who it is, its fencing token, progress reports, and
whether its attempt was stopped (its job cancelled, its task taken over, past its timeout)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from jobcenter.errors import JobcenterError, TaskCancelled

PROGRESS_MAX = 500  # characters of a progress message kept (status shows it)


def valid_utf8(text: str) -> str:
    """`text` with what UTF-8 cannot encode (lone surrogates, from bytes decoded with
    surrogateescape) escaped: Redis clients encode strictly, and one bad character must not
    stop a report."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class TaskContext:
    """What a task knows about its own attempt. `token`, its fencing token
    (`<attempt>:<handler>:<nonce>`, the nonce random per claim), is unique per attempt: use it
    to make the task's external writes idempotent (a retried or taken-over attempt, or one
    started again after Redis lost writes, has a new one)."""

    job_id: str
    task_id: str
    attempt: int
    handler: str
    report: Callable[[str], None] = field(repr=False, default=lambda _: None)
    token: str = ""
    # when its job was due: the fire time of the schedule that submitted it (not when it
    # ran), or the one given at submit (`--fire-time`); None for a job without one
    fire_time: datetime | None = None
    schedule_id: str | None = None  # the schedule that submitted its job
    _stopped: bool = field(default=False, repr=False)  # set once, under _lock
    _why: str = field(default="", repr=False)  # why it was stopped, in words
    _on_stop: list[Callable[[], object]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def progress(self, message: str) -> None:
        """Report progress (seed 004's execution step): shown by status; renews the lease.
        Raises TaskCancelled once the attempt was stopped: a stopped attempt writes nothing
        more, and a task that only reports progress stops at its next report."""
        self.check_cancelled()
        self.report(valid_utf8(str(message)[:PROGRESS_MAX]))
        self.check_cancelled()  # the report may have learned that the attempt is over

    @property
    def cancelled(self) -> bool:
        """True once this attempt was stopped: its job was cancelled, another attempt took
        the task over (this one's lease ran out), or (in the thread pool, which cannot stop a
        thread) it ran past its timeout. Its result is discarded whatever the cause, so a long
        task should check this and return early, freeing its slot."""
        return self._stopped

    def check_cancelled(self) -> None:
        """Raise TaskCancelled if this attempt was stopped (see `cancelled`)."""
        if self.cancelled:
            raise TaskCancelled(
                f"job {self.job_id} task {self.task_id}: attempt {self.attempt} was stopped: "
                f"{self._why}"
            )

    def stop(self, why: str) -> None:
        """Mark the attempt stopped (`why`, in words) and run the stop hooks (the runner
        calls this)."""
        with self._lock:
            self._why = self._why or why
            self._stopped = True
            hooks, self._on_stop[:] = list(self._on_stop), []
        for hook in hooks:
            _run_hook(hook)

    def on_stop(self, hook: Callable[[], object]) -> None:
        """Call `hook` when the attempt is stopped (at once if it is already)."""
        with self._lock:
            if not self._stopped:
                self._on_stop.append(hook)
                return
        _run_hook(hook)


def _run_hook(hook: Callable[[], object]) -> None:
    # a hook may find its event loop closed already: the attempt ended meanwhile
    with contextlib.suppress(RuntimeError):
        hook()


_current: ContextVar[TaskContext | None] = ContextVar("jobcenter_task", default=None)


def current_task() -> TaskContext:
    """The context of the task running in this thread; an error outside a task."""
    ctx = _current.get()
    if ctx is None:
        raise JobcenterError("current_task() called outside a running task")
    return ctx


def set_current(ctx: TaskContext | None) -> None:
    _current.set(ctx)
