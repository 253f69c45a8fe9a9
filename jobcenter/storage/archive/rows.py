"""The archive's rows of one finished job, built from what Redis holds of it once compacted:
its hash and its packed record (keyspace/packed.py). The job row keeps both as they are (the
reader decodes them with the same code as a compacted job's); the task and attempt rows
spell them out for SQL."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from jobcenter.model import codec

from ..keyspace.packed import decode
from ..keyspace.schema import HistoryColumn, JobField, PayloadKey, TaskField

TEXT_MAX = 100_000  # characters of an error or progress kept in a row (a runaway traceback)


@dataclass
class ArchivedJob:
    """One job's rows: `job` for archived_jobs, `tasks` and `attempts` for theirs."""

    job_id: str
    job: dict[str, Any]
    tasks: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)


def _int(value: bytes | None) -> int | None:
    return int(value) if value else None


def _text(value: bytes | None) -> str | None:
    return value.decode(errors="replace")[:TEXT_MAX] if value else None


def archived_job(
    job_id: str, fields: dict[str, bytes], record: bytes | None, now_ms: int, result_max: int
) -> ArchivedJob:
    """The rows of job `job_id` from its hash `fields` and packed `record`; a task's result
    over `result_max` bytes keeps only its size."""
    packed = decode(record)
    attempts = _attempts(job_id, packed.history)
    job = {
        "job_id": job_id,
        "name": _text(fields.get(JobField.NAME)) or "",
        "owner": _text(fields.get(JobField.OWNER)) or "",
        "state": _text(fields.get(JobField.STATE)) or "",
        "priority": _int(fields.get(JobField.PRIORITY)) or 0,
        "queue": _text(fields.get(JobField.QUEUE)),
        "schedule_id": _text(fields.get(JobField.SCHEDULE_ID)),
        "fire_time": _int(fields.get(JobField.FIRE_TIME)),
        "created_at": _int(fields.get(JobField.CREATED_AT)) or 0,
        "started_at": _int(fields.get(JobField.STARTED_AT)),
        "finished_at": _int(fields.get(JobField.FINISHED_AT)),
        "error": _text(fields.get(JobField.ERROR)),
        "tasks": _int(fields.get(JobField.TASKS)) or 0,
        "failed": _int(fields.get(JobField.FAILED)) or 0,
        "cancelled": _int(fields.get(JobField.CANCELLED)) or 0,
        "tags": None,
        # the events summary: how its attempts ended, by state
        "events": json.dumps(dict(sorted(Counter(a["state"] for a in attempts).items()))),
        "archived_at": now_ms,
        "fields": codec.pack(fields, what="job fields"),
        "packed": record or b"",
    }
    last_worker = {a["idx"]: a["worker"] for a in attempts}  # history is oldest first
    state = TaskField.STATE.value
    indexes = sorted(int(name[len(state) :]) for name in packed.fields if name.startswith(state))
    tasks = [
        _task(job_id, index, packed.fields, last_worker.get(index), result_max)
        for index in indexes  # every task written: a map's instances too
    ]
    return ArchivedJob(job_id, job, tasks, attempts)


def _task(
    job_id: str, index: int, f: dict[str, bytes], worker: str | None, result_max: int
) -> dict[str, Any]:
    result = f.get(TaskField.RESULT.of(index))
    payload = f.get(TaskField.PAYLOAD.of(index))
    name = ""
    if payload is not None:
        unpacked = codec.unpack(payload)
        if isinstance(unpacked, dict):
            name = str(unpacked.get(PayloadKey.TASK.value, ""))
    return {
        "job_id": job_id,
        "idx": index,
        "task_id": _text(f.get(TaskField.ID.of(index))) or str(index),
        "name": name,
        "state": _text(f.get(TaskField.STATE.of(index))) or "",
        "attempts": _int(f.get(TaskField.ATTEMPTS.of(index))) or 0,
        "started_at": _int(f.get(TaskField.STARTED_AT.of(index))),
        "finished_at": _int(f.get(TaskField.FINISHED_AT.of(index))),
        "worker": _text(f.get(TaskField.HANDLER.of(index))) or worker,
        "error": _text(f.get(TaskField.ERROR.of(index))),
        "result": result if result is not None and len(result) <= result_max else None,
        "result_size": len(result) if result is not None else None,
        "progress": _text(f.get(TaskField.PROGRESS.of(index))),
    }


def _attempts(job_id: str, history: list[bytes]) -> list[dict[str, Any]]:
    """One row per (task, attempt) of the history, the last entry of each (a released
    attempt is written again under the same number when it runs)."""
    names = [c for c in HistoryColumn]
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for line in history:
        entry = dict(zip(names, line.split(b"\t", len(names) - 1), strict=False))
        index, attempt = (
            _int(entry.get(HistoryColumn.INDEX)),
            _int(entry.get(HistoryColumn.ATTEMPT)),
        )
        if index is None or attempt is None:
            continue
        rows[(index, attempt)] = {
            "job_id": job_id,
            "idx": index,
            "attempt": attempt,
            "state": _text(entry.get(HistoryColumn.STATE)) or "",
            "worker": _text(entry.get(HistoryColumn.HANDLER)),
            "started_at": _int(entry.get(HistoryColumn.STARTED_AT)),
            "finished_at": _int(entry.get(HistoryColumn.FINISHED_AT)),
            "error": _text(entry.get(HistoryColumn.ERROR)),
        }
    return list(rows.values())
