"""Notification deliveries in Redis: take due ones (leased), start and end an attempt, and
the reads that a delivery's payload and `status` need.

A job whose spec has `notify:` gets one delivery per channel and notice, recorded by the
script that finalizes it, marks it late or fails a task (_job.lua, queue_notice) in its
shard's due zset as "<delivery>|<job id>"; a delivery is named "<channel>" for the job's
end, "<channel>:late" and "<channel>:task_failed:<task index>" for the events
(jobcenter.model.notify.parse_delivery), and its record's fields are suffixed with that
name, so each notice has its own attempts and outcome. The notifier
(jobcenter/runtime/notifier.py) drives it through notify_claim, notify_attempt and
notify_done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobcenter.model.notify import LATE, TASK_FAILED, DeliveryState
from jobcenter.model.states import TaskState

from .keyspace import schema
from .keyspace.schema import DeliveryField, JobField, TaskField
from .server.replies import seconds, text

if TYPE_CHECKING:
    from redis import Redis

    from .jobs.base import StoreBase
    from .keyspace.keys import Keys

OK = schema.code("OK")
FAILED_TASKS_LISTED = 20  # failed tasks a payload names (their count is always given)
SCAN_PAGE = 1_000  # task fields per HSCAN when looking for the failed ones
LOG_SHOWN = 20  # attempts `status` shows per job, the latest


def claim_due(store: StoreBase, shard: int, lease_ms: int, limit: int) -> list[tuple[str, str]]:
    """Up to `limit` (delivery, job id) deliveries of `shard` due now, each leased to the
    caller for `lease_ms`."""
    members = store.scripts.run("notify_claim", [store.keys.notify_due(shard)], [lease_ms, limit])
    out = []
    for member in members:
        delivery, _, job_id = text(member).partition("|")
        out.append((delivery, job_id))
    return out


def begin(store: StoreBase, channel: str, job_id: str, handler: str, lease_ms: int) -> int | None:
    """Start an attempt at a claimed delivery: its number, or None when there is nothing to
    deliver any more (delivered by another worker meanwhile, or the job is gone)."""
    keys = store.keys.notify_keys(job_id)
    reply = store.scripts.run("notify_attempt", keys, [channel, job_id, handler, lease_ms])
    return int(reply[1]) if reply[0] == OK else None


def finish(
    store: StoreBase,
    channel: str,
    job_id: str,
    attempt: int,
    handler: str,
    *,
    delivered: bool,
    detail: str,
    retry_ms: int,
) -> DeliveryState | None:
    """Record an attempt's outcome; `retry_ms` < 0 gives up after a failure. The delivery's
    state after it, or None when the attempt was taken over meanwhile (nothing recorded)."""
    keys = store.keys.notify_keys(job_id)
    args = [channel, job_id, attempt, handler, int(delivered), detail, retry_ms]
    reply = store.scripts.run("notify_done", keys, args)
    return DeliveryState(text(reply[1])) if reply[0] == OK else None


# The job fields a notification carries, and the names it gives them.
_NOTICE_FIELDS = {
    "name": JobField.NAME,
    "owner": JobField.OWNER,
    "state": JobField.STATE,
    "schedule_id": JobField.SCHEDULE_ID,
}
_NOTICE_TIMES = {
    "created_at": JobField.CREATED_AT,
    "started_at": JobField.STARTED_AT,
    "finished_at": JobField.FINISHED_AT,
}
_NOTICE_COUNTS = {
    "tasks": JobField.TASKS,
    "tasks_failed": JobField.FAILED,
    "tasks_cancelled": JobField.CANCELLED,
}


def job_notice(store: StoreBase, job_id: str) -> dict[str, Any] | None:
    """What a notification says about a finished job: its id, name, owner, final state,
    times (epoch seconds), task counts and its first failed tasks with their errors; plus
    the webhook URL to send it to (`webhook`, not part of the payload). None if it is gone."""
    names = [*_NOTICE_FIELDS.values(), *_NOTICE_TIMES.values(), *_NOTICE_COUNTS.values()]
    values = store.redis.hmget(store.keys.job(job_id).job, [*names, JobField.WEBHOOK])
    found = dict(zip(names, values[:-1], strict=True))
    if found[JobField.STATE] is None:
        return None
    notice: dict[str, Any] = {"job_id": job_id}
    notice |= {name: text(found[field]) for name, field in _NOTICE_FIELDS.items()}
    notice |= {name: seconds(found[field]) for name, field in _NOTICE_TIMES.items()}
    notice |= {name: int(found[field] or 0) for name, field in _NOTICE_COUNTS.items()}
    notice["failed_tasks"] = _failed_tasks(store, job_id) if notice["tasks_failed"] else []
    notice["webhook"] = text(values[-1])
    return notice


def task_failure(store: StoreBase, job_id: str, index: int) -> dict[str, Any]:
    """What a task_failed notice adds: the task's id, error and attempts."""
    fields = [f.of(index) for f in (TaskField.ID, TaskField.ERROR, TaskField.ATTEMPTS)]
    task_id, error, attempts = store.records(job_id).values(fields)
    return {"task": text(task_id), "error": text(error), "attempts": int(attempts or 0)}


def _failed_tasks(store: StoreBase, job_id: str) -> list[dict[str, Any]]:
    """The job's tasks that failed themselves (not upstream_failed), the first few, with
    their errors; read in HSCAN pages, off the task path."""
    records = store.records(job_id)  # the tasks hash, or the finished job's packed record
    states = records.field_of_every_task(TaskField.STATE)
    indexes = sorted(int(i) for i, state in states.items() if state == TaskState.FAILED)
    indexes = indexes[:FAILED_TASKS_LISTED]
    if not indexes:
        return []
    fields = [f.of(i) for i in indexes for f in (TaskField.ID, TaskField.ERROR, TaskField.ATTEMPTS)]
    values = records.values(fields)
    out = []
    for n in range(len(indexes)):
        task_id, error, attempts = values[3 * n : 3 * n + 3]
        out.append({"task": text(task_id), "error": text(error), "attempts": int(attempts or 0)})
    return out


def view(redis: Redis, keys: Keys, job_id: str, job: dict[str, bytes]) -> dict[str, Any] | None:
    """The `notifications` part of `status`: what the job asked for, each channel's delivery
    (state, attempts, last error, times) and the latest attempts; None without `notify:`.
    `job` is the job hash already read."""
    channels = (text(job.get(JobField.NOTIFY_TO)) or "").split(",")
    channels = [c for c in channels if c]
    if not channels:
        return None
    on = (text(job.get(JobField.NOTIFY_ON)) or "").split(",")
    names = [*channels, *(f"{c}:{LATE}" for c in channels if LATE in on)]
    due_key = keys.notify_due(keys.job_shard(job_id))
    pipe: Any = redis.pipeline(transaction=False)
    pipe.hgetall(keys.notifications(job_id))
    pipe.lrange(keys.deliveries(job_id), -LOG_SHOWN, -1)
    for name in names:
        pipe.zscore(due_key, f"{name}|{job_id}")
    record, log, *due = pipe.execute()
    fields = {text(k): text(v) for k, v in record.items()}
    deliveries = {}
    for name, due_ms in zip(names, due, strict=True):
        deliveries[name] = _delivery(fields, name, due_ms)
    # a task_failed notice shows once tried ("<channel>:task_failed:<task index>")
    tried = DeliveryField.ATTEMPTS.value
    for field in sorted(fields):
        name = field.removeprefix(tried)
        if field.startswith(tried) and f":{TASK_FAILED}:" in name:
            deliveries[name] = _delivery(fields, name, None)
    return {
        "on": on,
        "webhook": text(job.get(JobField.WEBHOOK)),
        "deliveries": deliveries,
        "attempts": [_attempt(text(entry)) for entry in log],
    }


def _delivery(fields: dict[str, str], channel: str, due_ms: float | None) -> dict[str, Any]:
    def get(field: DeliveryField) -> str | None:
        return fields.get(field.of(channel))

    state = get(DeliveryField.STATE)
    if state is None:  # not tried yet: pending if the job's outcome asked for it
        state = DeliveryState.PENDING if due_ms is not None else None
    return {
        "state": state,
        "attempts": int(get(DeliveryField.ATTEMPTS) or 0),
        "error": get(DeliveryField.ERROR),
        "handler": get(DeliveryField.HANDLER),
        "tried_at": seconds(get(DeliveryField.TRIED_AT)),
        "next_at": seconds(get(DeliveryField.NEXT_AT))
        if state == DeliveryState.RETRYING
        else (due_ms / 1000 if state == DeliveryState.PENDING and due_ms else None),
        "done_at": seconds(get(DeliveryField.DONE_AT)),
    }


def _attempt(entry: str) -> dict[str, Any]:
    channel, attempt, outcome, handler, started, finished, detail = entry.split("\t", 6)
    return {
        "channel": channel,
        "attempt": int(attempt),
        "outcome": outcome,
        "handler": handler or None,
        "started_at": seconds(started or None),
        "finished_at": seconds(finished or None),
        "detail": detail or None,
    }
