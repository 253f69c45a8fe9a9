"""The exception hierarchy, and the one table mapping Lua return codes to exceptions."""

from __future__ import annotations

import math


class JobcenterError(Exception):
    """Root of every error jobcenter raises on purpose."""


class SpecError(JobcenterError, ValueError):
    """A job spec, schedule or argument is invalid; the message names the offending thing."""


class SettingsMismatch(JobcenterError, ValueError):
    """This process's settings disagree with what the namespace stored (CLI exit code 2)."""


class IdempotencyConflict(SpecError):
    """An idempotency key already names a job submitted with a different spec."""


class Refused(JobcenterError):
    """Not allowed in the current state: deleting an unfinished job, retrying a cancelled
    one, starting a second server in one directory (CLI exit code 5)."""


class RedisUnavailable(JobcenterError):
    """Redis cannot be reached (CLI exit code 3)."""


class NotFound(JobcenterError, KeyError):
    """A job, schedule or task that does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""

    @classmethod
    def job(cls, job_id: str, namespace: str | None = None) -> NotFound:
        """The error for a job that is not there (never submitted, expired or deleted); the
        namespace is named where the reader may have meant another one."""
        where = f" in namespace {namespace!r}" if namespace is not None else ""
        return cls(f"no job {job_id}{where}")


class NoResult(JobcenterError):
    """The task exists but has no result yet: it has not succeeded (CLI exit code 7)."""


class TransitionRejected(Refused):
    """A Lua transition refused to change anything (stale token, wrong state, ...)."""

    code: int = 0


class StaleToken(TransitionRejected):
    """The fencing token is not the task's current attempt: a late result, discarded."""

    code = -2


class WrongState(TransitionRejected):
    """The task or job is not in a state that allows this transition."""

    code = -3


class UnknownJob(TransitionRejected, NotFound):
    """The job hash does not exist (expired, deleted or never submitted)."""

    code = -4


class NewerRelease(TransitionRejected):
    """A newer jobcenter release wrote the job (its protocol is above this release's): this
    release leaves it alone, for a worker or command of that release (ARCHITECTURE.md,
    Version skew)."""

    code = -10


class TaskFailure(JobcenterError):
    """Base for exceptions a task raises to steer its own retry policy."""


class Fatal(TaskFailure):
    """Raised by a task: fail now, never retry."""


class Retry(TaskFailure):
    """Raised by a task: retry this attempt after `delay` seconds (counts as an attempt)."""

    def __init__(self, message: str = "retry requested", delay: float | None = None) -> None:
        super().__init__(message)
        if delay is not None and not 0 <= float(delay) < math.inf:
            raise ValueError(f"Retry delay must be a finite number of seconds >= 0, got {delay!r}")
        self.delay = None if delay is None else float(delay)


class TaskCancelled(JobcenterError):
    """Raised by `current_task().check_cancelled()` and `progress()` in an attempt that was
    stopped (its job was cancelled, another attempt took its task over, or it ran past its
    timeout): its result is discarded anyway."""


# The one table from Lua return codes to exceptions. Scripts return {code, ...};
# code >= 0 is success, a negative code raises the class listed here.
LUA_ERRORS: dict[int, type[TransitionRejected]] = {
    StaleToken.code: StaleToken,
    WrongState.code: WrongState,
    UnknownJob.code: UnknownJob,
    NewerRelease.code: NewerRelease,
}


def raise_for_code(code: int, detail: str = "") -> None:
    """Raise the exception a negative Lua return code stands for; do nothing for >= 0."""
    if code >= 0:
        return
    cls = LUA_ERRORS.get(code)
    if cls is None:
        raise JobcenterError(f"unknown script return code {code} {detail}".strip())
    raise cls(detail or cls.__doc__ or cls.__name__)
