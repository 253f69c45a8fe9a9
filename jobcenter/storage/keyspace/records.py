"""Typed records of what Python reads from the schema: a job hash, a task's fields and a
task's packed payload, each read once through the names schema.py generates into Lua
(JobField, TaskField, PayloadKey), so no caller spells a stored field itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from jobcenter.model import codec
from jobcenter.model.spec import DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF_MAX

from .schema import JobField, PayloadKey, TaskField


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
        if not isinstance(raw, dict) or not isinstance(raw.get(_TASK), str):
            raise ValueError("task payload is not a task")
        task_id = raw.get(_ID)
        return cls(
            task=raw[_TASK],
            id=task_id if isinstance(task_id, str) else None,
            args=tuple(raw.get(_ARGS) or ()),
            kwargs=dict(raw.get(_KWARGS) or {}),
            timeout=raw.get(_TIMEOUT),
            retry_backoff=raw.get(_RETRY_BACKOFF, DEFAULT_RETRY_BACKOFF),
            retry_backoff_max=raw.get(_RETRY_BACKOFF_MAX, DEFAULT_RETRY_BACKOFF_MAX),
            gates=tuple(raw.get(_GATES) or ()),
            fire_time=raw.get(_FIRE_TIME),
            schedule_id=raw.get(_SCHEDULE),
        )


# The payload's keys as plain str, looked up once: from_dict runs for every task a worker
# starts, and an enum member's lookup (and a dict lookup by it) costs several times a str's.
(
    _TASK, _ID, _ARGS, _KWARGS, _TIMEOUT, _RETRY_BACKOFF, _RETRY_BACKOFF_MAX, _GATES,
    _FIRE_TIME, _SCHEDULE,
) = (
    key.value
    for key in (
        PayloadKey.TASK, PayloadKey.ID, PayloadKey.ARGS, PayloadKey.KWARGS, PayloadKey.TIMEOUT,
        PayloadKey.RETRY_BACKOFF, PayloadKey.RETRY_BACKOFF_MAX, PayloadKey.GATES,
        PayloadKey.FIRE_TIME, PayloadKey.SCHEDULE,
    )
)  # fmt: skip


def _text(raw: Mapping[str, bytes | None], field: str) -> str | None:
    value = raw.get(field)
    return None if value is None else value.decode()


def _int(raw: Mapping[str, bytes | None], field: str, default: int) -> int:
    value = raw.get(field)
    return default if value is None else int(value)


def _int_or_none(raw: Mapping[str, bytes | None], field: str) -> int | None:
    value = raw.get(field)
    return None if value is None else int(value)


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


@dataclass(frozen=True)
class TaskRecord:
    """One task's fields as `status` and the dashboard's task page show them (times in ms,
    Redis TIME; None: not written)."""

    # What it reads: read these of one task (TaskField.<name>.of(index)) to build one.
    FIELDS: ClassVar[tuple[TaskField, ...]] = (
        TaskField.ID, TaskField.STATE, TaskField.ATTEMPTS, TaskField.MAX_ATTEMPTS,
        TaskField.HANDLER, TaskField.QUEUE, TaskField.CREATED_AT, TaskField.QUEUED_AT,
        TaskField.STARTED_AT, TaskField.FINISHED_AT, TaskField.UPDATED_AT, TaskField.ERROR,
        TaskField.PROGRESS, TaskField.WAITING_FOR, TaskField.GATE_WAIT, TaskField.LIMITS,
        TaskField.PAYLOAD, TaskField.RESULT, TaskField.MAP_INSTANCES, TaskField.AWAIT,
        TaskField.AWAIT_JOB,
    )  # fmt: skip

    id: str | None  # its id in the spec; None until its leader wrote it
    state: str | None
    attempts: int
    max_attempts: int | None
    handler: str | None
    queue: str | None  # None: the job's
    created_at: int | None
    queued_at: int | None
    started_at: int | None
    finished_at: int | None
    updated_at: int | None
    error: str | None
    progress: str | None
    waiting_for: str | None  # "<since ms>|<task name>" (TaskField.WAITING_FOR)
    gate_wait: str | None  # "<since ms>|<gate>" (TaskField.GATE_WAIT)
    limited: bool  # it takes slots of a pool or limit while it runs
    payload: bytes | None  # packed (TaskPayload; a succeeded job's keeps name and arguments)
    result: bytes | None  # packed
    map_instances: str | None  # a mapped task, once expanded: "<first index>|<count>"
    awaits: str | None  # an awaiting task's "<kind letter>|<name>" (TaskField.AWAIT)
    await_job: str | None  # the job a schedule wait was bound to, once found

    @classmethod
    def from_fields(cls, raw: Mapping[str, bytes | None]) -> TaskRecord:
        """The record of one task's fields keyed by their TaskField (without its index)."""
        return cls(
            id=_text(raw, TaskField.ID),
            state=_text(raw, TaskField.STATE),
            attempts=_int(raw, TaskField.ATTEMPTS, 0),
            max_attempts=_int_or_none(raw, TaskField.MAX_ATTEMPTS),
            handler=_text(raw, TaskField.HANDLER),
            queue=_text(raw, TaskField.QUEUE),
            created_at=_int_or_none(raw, TaskField.CREATED_AT),
            queued_at=_int_or_none(raw, TaskField.QUEUED_AT),
            started_at=_int_or_none(raw, TaskField.STARTED_AT),
            finished_at=_int_or_none(raw, TaskField.FINISHED_AT),
            updated_at=_int_or_none(raw, TaskField.UPDATED_AT),
            error=_text(raw, TaskField.ERROR),
            progress=_text(raw, TaskField.PROGRESS),
            waiting_for=_text(raw, TaskField.WAITING_FOR),
            gate_wait=_text(raw, TaskField.GATE_WAIT),
            limited=raw.get(TaskField.LIMITS) is not None,
            payload=raw.get(TaskField.PAYLOAD),
            result=raw.get(TaskField.RESULT),
            map_instances=_text(raw, TaskField.MAP_INSTANCES),
            awaits=_text(raw, TaskField.AWAIT),
            await_job=_text(raw, TaskField.AWAIT_JOB),
        )

    @classmethod
    def of_every_task(cls, raw: Mapping[str, bytes]) -> dict[str, TaskRecord]:
        """task index -> its record, of a job's task fields read whole ("s:3", ...)."""
        by_index: dict[str, dict[str, bytes]] = {}
        for name, value in raw.items():
            cut = name.index(":") + 1  # every TaskField ends at its first colon
            by_index.setdefault(name[cut:], {})[name[:cut]] = value
        return {index: cls.from_fields(fields) for index, fields in by_index.items()}
