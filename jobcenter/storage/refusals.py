"""Why Redis refused an attempt's heartbeat, result or failure, in words for the worker's
log: its job cancelled or abandoned, its job gone, another attempt that took the task over,
the task ended another way, or an attempt Redis does not know. A refusal is final, so what
Redis holds right after it tells its cause: the job's stop field (complete.lua answers a
cancelled job's attempt "not running", or "stale" once the job is packed), the task's state
and current attempt.

An attempt Redis does not know (the script's own verdict, _job.lua refusal_of) means Redis
lost writes since the attempt started: a restart from an older snapshot, a failover to a
replica that lagged. The task may run again meanwhile, so what the attempt reported is kept
nowhere but in the worker's log, and each such report is counted in the shard's metrics."""

from __future__ import annotations

from jobcenter.model import codec

from .keyspace import schema
from .keyspace.schema import JobField, MetricField, TaskField
from .server.errors import REDIS_TROUBLE
from .server.replies import text
from .store import Store

STALE_TOKEN = schema.code("STALE_TOKEN")  # = ITEM_STALE_TOKEN
NOT_RUNNING = schema.code("ITEM_WRONG_STATE")  # = WRONG_STATE of fail.lua
JOB_GONE = schema.code("JOB_GONE")
STOPPED = (schema.code("ITEM_JOB_STOPPED"), schema.code("JOB_STOPPED"))  # heartbeat, fail
UNKNOWN_ATTEMPT = schema.code("ITEM_UNKNOWN_ATTEMPT")  # = UNKNOWN_ATTEMPT of fail.lua
REPORTED_MAX = 1_000  # characters of a refused attempt's result or error kept in the log line

STOP_WORDS = {
    "cancel": "its job was cancelled",
    "abandon": "recovery abandoned its job (its split stalled): its tasks failed",
}
LOST_WRITES = (
    "Redis lost writes made since the attempt started (a restart from an older snapshot, or a "
    "failover to a replica that lagged), and the task may run again meanwhile"
)
MEANINGS = {
    STALE_TOKEN: "another attempt took the task over (this one's lease ran out)",
    NOT_RUNNING: "the task is not running any more",
    JOB_GONE: "its job is gone (deleted, or expired)",
    UNKNOWN_ATTEMPT: f"Redis does not know this attempt: {LOST_WRITES}",
    **{code: STOP_WORDS["cancel"] for code in STOPPED},
}


def why_refused(store: Store, job_id: str, index: int, token: str, code: int) -> str:
    """The cause of refusal `code` (< 0) of the attempt of fencing token `token` of task
    `index`. Never raises: when Redis cannot say, the code's meaning."""
    try:
        return _cause(store, job_id, index, token, code)
    except REDIS_TROUBLE:
        return MEANINGS.get(code, f"refused with code {code}")


def _cause(store: Store, job_id: str, index: int, token: str, code: int) -> str:
    jk = store.keys.job(job_id)
    state, stop = store.redis.hmget(jk.job, JobField.STATE, JobField.STOP)
    if code == JOB_GONE or state is None:
        return MEANINGS[JOB_GONE]
    task_id, task_state, current, handler = (
        text(v)
        for v in store.records(job_id).values(
            [
                TaskField.ID.of(index),
                TaskField.STATE.of(index),
                TaskField.ATTEMPTS.of(index),
                TaskField.HANDLER.of(index),
            ]
        )
    )
    if code == UNKNOWN_ATTEMPT:
        holds = f"attempt {current} (handler {handler})" if handler else f"{current or 0} attempts"
        return (
            f"Redis does not know attempt {token.partition(':')[0]} of task {task_id!r} "
            f"(token {token}; it holds {holds}, the task {task_state}): {LOST_WRITES}"
        )
    if stop is not None:
        return STOP_WORDS.get(stop.decode(), f"its job was stopped ({stop.decode()})")
    if current is not None and current != token.partition(":")[0]:
        return f"attempt {current} (handler {handler}) took the task over: this one's lease ran out"
    ended = f"the task is {task_state} now"
    if code == STALE_TOKEN:  # its job was packed: finished
        return f"its job {state.decode()} meanwhile: {ended}"
    return f"{ended}, not running: this worker reported it already, or its lease ran out"


def what_it_returned(result: bytes) -> str:
    """A refused result in words, for the log line that is its only trace."""
    if not result:
        return "it returned None"
    try:
        shown = repr(codec.unpack(result))
    except Exception:  # what a task returned was packed by its worker: unpack it or show bytes
        shown = repr(result)
    cut = f" ... ({len(shown) - REPORTED_MAX} characters more)" if len(shown) > REPORTED_MAX else ""
    return f"it returned {shown[:REPORTED_MAX]}{cut}"


def count_unknown(store: Store, job_id: str, report: str) -> None:
    """Count a report of an attempt Redis does not know in the job's shard's metrics hash
    (/metrics: jobcenter_unknown_attempts), by what was reported (result, failure, ...)."""
    if store.settings.metrics:
        shard = store.keys.job_shard(job_id)
        store.redis.hincrby(store.keys.metrics(shard), f"{MetricField.UNKNOWN_ATTEMPTS}\t{report}")
