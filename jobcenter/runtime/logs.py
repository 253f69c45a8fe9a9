"""Log lines for people (`text`) or for log collectors (`json`: one object a line).

A JSON line always has the same keys: time (UTC, ISO 8601), level, logger, worker, job,
task, attempt, event (the message), and `exception` when there is one. `worker` is the
handler id of the process's worker; job, task and attempt come from the record's `extra`
when a caller passes them, else from the task running in the logging thread, else null.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from jobcenter.errors import JobcenterError

from .context import current_task

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMAT_ENV = "JOBCENTER_LOG_FORMAT"  # child processes (the rq recovery worker) follow it


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the job center's fields."""

    def __init__(self, worker: str | None = None) -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        job, task, attempt = _task_fields(record)
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "worker": getattr(record, "worker", None) or self.worker,
            "job": job,
            "task": task,
            "attempt": attempt,
            "event": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _task_fields(record: logging.LogRecord) -> tuple[Any, Any, Any]:
    """(job, task, attempt): what the caller passed in `extra`, else the running task's."""
    job = getattr(record, "job", None)
    if job is not None:
        return job, getattr(record, "task", None), getattr(record, "attempt", None)
    try:
        ctx = current_task()
    except JobcenterError:  # not logged from inside a task
        return None, None, None
    return ctx.job_id, ctx.task_id, ctx.attempt


def configure(fmt: str, level: int | None = None) -> None:
    """Format every root handler's lines as `fmt` ('text' or 'json'), adding a stderr
    handler when there is none; `level` sets the root level when given."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    for handler in root.handlers:
        handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    if level is not None:
        root.setLevel(level)


def set_worker(handler_id: str) -> None:
    """Name this process's worker on every JSON line from now on."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.worker = handler_id
