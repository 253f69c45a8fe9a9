"""The context a running task can read: who it is, its fencing token, and progress reports."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from .errors import JobcenterError


@dataclass
class TaskContext:
    """What a task knows about its own attempt. `token` is unique per attempt: use it to make
    the task's external writes idempotent (a retried or taken-over attempt has a new one)."""

    job_id: str
    task_id: str
    attempt: int
    handler: str
    report: Callable[[str], None] = field(repr=False, default=lambda _: None)

    @property
    def token(self) -> str:
        return f"{self.attempt}:{self.handler}"

    def progress(self, message: str) -> None:
        """Report progress (seed 004's execution step): shown by status; renews the lease."""
        self.report(str(message)[:500])


_current: ContextVar[TaskContext | None] = ContextVar("jobcenter_task", default=None)


def current_task() -> TaskContext:
    """The context of the task running in this thread; an error outside a task."""
    ctx = _current.get()
    if ctx is None:
        raise JobcenterError("current_task() called outside a running task")
    return ctx


def set_current(ctx: TaskContext | None) -> None:
    _current.set(ctx)
