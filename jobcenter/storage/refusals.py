"""Why Redis refused an attempt's heartbeat, result or failure, in words for the worker's
log: its job cancelled or abandoned, its job gone, another attempt that took the task over,
or the task ended another way. A refusal is final, so what Redis holds right after it tells
its cause: the job's stop field (complete.lua answers a cancelled job's attempt "not
running", or "stale" once the job is packed), the task's state and current attempt."""

from __future__ import annotations

from . import schema
from .errors import REDIS_TROUBLE
from .replies import text
from .schema import JobField, TaskField
from .store import Store

STALE_TOKEN = schema.code("STALE_TOKEN")  # = ITEM_STALE_TOKEN
NOT_RUNNING = schema.code("ITEM_NOT_RUNNING")  # = WRONG_STATE of fail.lua
JOB_GONE = schema.code("JOB_GONE")
STOPPED = (schema.code("ITEM_CANCELLED"), schema.code("JOB_STOPPED"))  # heartbeat, fail

STOP_WORDS = {
    "cancel": "its job was cancelled",
    "abandon": "recovery abandoned its job (its split stalled): its tasks failed",
}
MEANINGS = {
    STALE_TOKEN: "another attempt took the task over (this one's lease ran out)",
    NOT_RUNNING: "the task is not running any more",
    JOB_GONE: "its job is gone (deleted, or expired)",
    **{code: STOP_WORDS["cancel"] for code in STOPPED},
}


def why_refused(store: Store, job_id: str, index: int, attempt: int, code: int) -> str:
    """The cause of refusal `code` (< 0) of attempt `attempt` of task `index`. Never raises:
    when Redis cannot say, the code's meaning."""
    try:
        return _cause(store, job_id, index, attempt, code)
    except REDIS_TROUBLE:
        return MEANINGS.get(code, f"refused with code {code}")


def _cause(store: Store, job_id: str, index: int, attempt: int, code: int) -> str:
    jk = store.keys.job(job_id)
    state, stop = store.redis.hmget(jk.job, JobField.STATE, JobField.STOP)
    if code == JOB_GONE or state is None:
        return MEANINGS[JOB_GONE]
    if stop is not None:
        return STOP_WORDS.get(stop.decode(), f"its job was stopped ({stop.decode()})")
    task_state, current, handler = (
        text(v)
        for v in store.records(job_id).values(
            [TaskField.STATE.of(index), TaskField.ATTEMPTS.of(index), TaskField.HANDLER.of(index)]
        )
    )
    if current is not None and int(current) != attempt:
        return f"attempt {current} (handler {handler}) took the task over: this one's lease ran out"
    ended = f"the task is {task_state} now"
    if code == STALE_TOKEN:  # its job was packed: finished
        return f"its job {state.decode()} meanwhile: {ended}"
    return f"{ended}, not running: this worker reported it already, or its lease ran out"
