"""Task and job states: the one list that both Python and the Lua scripts use."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    WAITING = "waiting"  # some dependency has not succeeded yet
    QUEUED = "queued"  # ready; in a queue or just claimed
    RUNNING = "running"  # an attempt holds a lease
    TIMED_OUT = "timed_out"  # lease expired; the same attempt may still resume (seed 004)
    RETRY_WAIT = "retry_wait"  # a failed attempt waiting out its backoff
    AWAITING = "awaiting"  # waits for the world (`wait_for:`), holding no slot: a signal
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UPSTREAM_FAILED = "upstream_failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # never ran: its trigger rule could not be met, and no parent failed

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_TASK_STATES


TERMINAL_TASK_STATES = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.UPSTREAM_FAILED,
        TaskState.CANCELLED,
        TaskState.SKIPPED,
    }
)


class JobState(StrEnum):
    PENDING = "pending"  # submitted; the leader has not split it yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def lua_constants() -> str:
    """Lua `local` lines naming every state, prepended to each script by the loader."""
    lines = [f"local T_{s.name} = '{s.value}'" for s in TaskState]
    lines += [f"local J_{s.name} = '{s.value}'" for s in JobState]
    # The order of the per-state job indexes in a job script's KEYS (see Store._context).
    lines.append(f"local JOB_STATES = {{{', '.join(f'J_{s.name}' for s in JobState)}}}")
    return "\n".join(lines) + "\n"
