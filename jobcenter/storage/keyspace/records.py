"""Typed records of what Python reads from the schema: a job hash and a task's packed
payload, each read once through the names schema.py generates into Lua
(JobField, PayloadKey), so no caller spells a stored field itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobcenter.model import codec
from jobcenter.model.spec import DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF_MAX

from .schema import JobField, PayloadKey


@dataclass(frozen=True)
class TaskPayload:
    """What a worker needs to run a task (TaskField.PAYLOAD, written by layout.py)."""

    task: str  # the registered task name
    id: str | None  # the task's id in the spec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    timeout: float | None  # seconds; None (or 0): none
    retry_backoff: float
    retry_backoff_max: float
    gates: tuple[str, ...]  # the gates it requires
    fire_time: float | None = None  # its job's fire time, epoch seconds
    schedule_id: str | None = None  # the schedule that fired its job

    @classmethod
    def unpack(cls, data: bytes) -> TaskPayload:
        """The payload packed in `data`; ValueError when it is not a task's."""
        return cls.from_dict(codec.unpack(data))

    @classmethod
    def from_dict(cls, raw: Any) -> TaskPayload:
        if not isinstance(raw, dict) or not isinstance(raw.get(PayloadKey.TASK), str):
            raise ValueError("task payload is not a task")
        task_id = raw.get(PayloadKey.ID)
        return cls(
            task=raw[PayloadKey.TASK],
            id=task_id if isinstance(task_id, str) else None,
            args=tuple(raw.get(PayloadKey.ARGS) or ()),
            kwargs=dict(raw.get(PayloadKey.KWARGS) or {}),
            timeout=raw.get(PayloadKey.TIMEOUT),
            retry_backoff=raw.get(PayloadKey.RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF),
            retry_backoff_max=raw.get(PayloadKey.RETRY_BACKOFF_MAX, DEFAULT_RETRY_BACKOFF_MAX),
            gates=tuple(raw.get(PayloadKey.GATES) or ()),
            fire_time=raw.get(PayloadKey.FIRE_TIME),
            schedule_id=raw.get(PayloadKey.SCHEDULE),
        )


def _text(raw: dict[str, bytes], field: str) -> str | None:
    value = raw.get(field)
    return None if value is None else value.decode()


def _int(raw: dict[str, bytes], field: str, default: int) -> int:
    value = raw.get(field)
    return default if value is None else int(value)


@dataclass(frozen=True)
class JobRecord:
    """The job hash's fields its runtime readers need (recovery, the leader)."""

    state: str | None  # its JobState; None: the hash is gone
    queue: str | None
    tasks: int  # 0 until written
    left: int  # tasks not finished; 1 when unknown, so a job is never taken for done
    written: int
    queued: int
    cancel_cursor: int
    stop: str | None
    leader: str | None
    schedule_id: str | None
    fire_time: float | None
    updated_at: int | None
    spec: bytes | None
    ranks: bytes | None

    @classmethod
    def from_hash(cls, raw: dict[str, bytes]) -> JobRecord:
        """The record of a job hash read whole (HGETALL: field names decoded, values bytes)."""
        updated = raw.get(JobField.UPDATED_AT)
        fire = raw.get(JobField.FIRE_TIME)
        return cls(
            state=_text(raw, JobField.STATE),
            queue=_text(raw, JobField.QUEUE),
            tasks=_int(raw, JobField.TASKS, 0),
            left=_int(raw, JobField.LEFT, 1),
            written=_int(raw, JobField.WRITTEN, 0),
            queued=_int(raw, JobField.QUEUED, 0),
            cancel_cursor=_int(raw, JobField.CANCEL_CURSOR, 0),
            stop=_text(raw, JobField.STOP) or None,
            leader=_text(raw, JobField.LEADER),
            schedule_id=_text(raw, JobField.SCHEDULE_ID) or None,
            fire_time=None if fire is None else float(fire),
            updated_at=None if updated is None else int(updated),
            spec=raw.get(JobField.SPEC),
            ranks=raw.get(JobField.RANKS),
        )
