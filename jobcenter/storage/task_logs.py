"""Task logs in Redis: one hash per job (`Keys.task_logs`), a field per attempt that wrote
something, `<index>:<attempt>`, holding its log (at most 64 KiB and a header line, cut by
the worker: runtime/tasklogs.py), and `<index>:<attempt>:live` for a running attempt's log
so far, which the heartbeat refreshes and the final log replaces. The hash expires with the
job (save_logs.lua) and is deleted with it (delete.lua)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobcenter.errors import NotFound

from .keyspace.schema import TaskField
from .server.replies import text

if TYPE_CHECKING:
    from .store import Store

LIVE_SUFFIX = ":live"
WORKER_MARK = "[jobcenter]"  # starts the worker's own lines in an attempt's log
# The line a cut log starts with (dropped_line).
DROPPED = re.compile(rb"\[jobcenter\] \.\.\. (\d+) bytes dropped: [^\n]*\n")


def dropped_line(dropped: int, kept: int) -> bytes:
    """The line a log cut at its head starts with."""
    return f"{WORKER_MARK} ... {dropped} bytes dropped: the last {kept} kept\n".encode()


@dataclass(frozen=True)
class LogEntry:
    """One attempt's log to store: `final` once the attempt ended, else its log so far."""

    job_id: str
    index: int
    attempt: int
    log: bytes
    final: bool = True


@dataclass(frozen=True)
class TaskLog:
    """An attempt's stored log; `running`: the attempt had not ended when it was written;
    `written`: bytes the attempt wrote in all (those dropped from the log's head and those
    kept), which tells a follower what is new since its last read."""

    attempt: int
    data: bytes
    running: bool
    written: int

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def since(self, written: int) -> bytes:
        """What was written after the first `written` bytes, as far as the log still holds
        it (what it no longer holds is said in a line of its own)."""
        body = self.data.split(b"\n", 1)[1] if DROPPED.match(self.data) else self.data
        new = self.written - written
        if new <= 0:
            return b""
        if new <= len(body):
            return body[len(body) - new :]
        return f"{WORKER_MARK} ... {new - len(body)} bytes not shown\n".encode() + body


def _written(data: bytes) -> int:
    found = DROPPED.match(data)
    if not found:
        return len(data)
    return int(found.group(1)) + len(data) - len(found.group(0))


def field(index: int, attempt: int) -> str:
    return f"{index}:{attempt}"


def save(store: Store, entries: Sequence[LogEntry]) -> None:
    """Store attempts' logs, one call per job, all in one round trip. A job gone (deleted,
    expired) takes none."""
    by_job: dict[str, list[LogEntry]] = defaultdict(list)
    for entry in entries:
        by_job[entry.job_id].append(entry)
    if not by_job:
        return
    batch = store.scripts.batch()
    retention_ms = int(store.settings.retention_seconds * 1000)
    for job_id, logs in by_job.items():
        args: list[str | bytes | int] = [retention_ms]
        for e in logs:
            name = field(e.index, e.attempt)
            args += [name, name + LIVE_SUFFIX, int(e.final), e.log]
        batch.add("save_logs", [store.keys.job(job_id).job, store.keys.task_logs(job_id)], args)
    batch.execute()


def attempts(store: Store, job_id: str, index: int, tried: int) -> list[int]:
    """Which of a task's attempts 1..`tried` have a log (final or so far): one round trip of
    2 x `tried` HEXISTS, never a read of the whole hash (a job's may hold thousands)."""
    key = store.keys.task_logs(job_id)
    pipe = store.redis.pipeline(transaction=False)
    for attempt in range(1, tried + 1):
        pipe.hexists(key, field(index, attempt))
        pipe.hexists(key, field(index, attempt) + LIVE_SUFFIX)
    found = pipe.execute() if tried else []
    return [a for a in range(1, tried + 1) if found[2 * a - 2] or found[2 * a - 1]]


def read(store: Store, job_id: str, index: int, attempt: int) -> TaskLog | None:
    """An attempt's log: its final one, else its log so far; None if it has none."""
    name = field(index, attempt)
    final, live = store.redis.hmget(store.keys.task_logs(job_id), name, name + LIVE_SUFFIX)
    stored = final if final is not None else live
    if stored is None:
        return None
    return TaskLog(attempt, stored, final is None, _written(stored))


def for_task(store: Store, job_id: str, task_id: str, attempt: int | None = None) -> dict[str, Any]:
    """What `logs` shows: the log of the task's attempt `attempt` (default: its latest),
    the attempts that have one, and the task's state. NotFound for an unknown job or task."""
    return for_index(store, job_id, store.task_index(job_id, task_id), attempt, task_id)


def for_index(
    store: Store, job_id: str, index: int, attempt: int | None = None, task_id: str | None = None
) -> dict[str, Any]:
    """for_task of the task at `index` (the dashboard knows tasks by index)."""
    if task_id is None:
        (raw_id,) = store.records(job_id).values([TaskField.ID.of(index)])
        if raw_id is None:
            raise NotFound(f"job {job_id} has no task #{index}")
        task_id = text(raw_id)
    state, tried = store.records(job_id).values(
        [TaskField.STATE.of(index), TaskField.ATTEMPTS.of(index)]
    )
    latest = int(tried or 0)
    chosen = latest if attempt is None else attempt
    if attempt is not None and not 1 <= attempt <= max(latest, 1):
        raise NotFound(f"job {job_id} task {task_id!r} has no attempt {attempt} (it has {latest})")
    found = read(store, job_id, index, chosen) if chosen else None
    return {
        "job": job_id,
        "task": task_id,
        "state": text(state),
        "attempt": chosen or None,
        "attempts": latest,
        "logged_attempts": attempts(store, job_id, index, latest),
        "running": bool(found and found.running),
        "log": found.text if found else None,
    }
