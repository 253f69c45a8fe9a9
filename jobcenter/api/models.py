"""The API's request and response bodies: pydantic models, from which FastAPI validates
each request and writes the OpenAPI document. Their shapes are the CLI's `--json` ones."""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobcenter.model.states import JobState, TaskState
from jobcenter.runtime.context import PROGRESS_MAX
from jobcenter.runtime.execution.outcome import ERROR_TEXT_MAX as ERROR_MAX
from jobcenter.runtime.worker.state import CLAIM_BATCH_MAX

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"  # queues, nodes, owners (model/spec.py)
TASK_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$"
CLAIM_MAX = CLAIM_BATCH_MAX  # attempts one claim hands out (the worker's claim batch)
CLAIM_WAIT_MAX = 60.0  # seconds a claim may wait for work: under common proxy timeouts

SEED000 = {
    "name": "seed000",
    "tasks": [
        {"id": "t1", "task": "jobcenter.demo.step", "args": [1]},
        {"id": "t2", "task": "jobcenter.demo.step", "args": [2]},
        {"id": "t4", "task": "jobcenter.demo.step", "args": [4], "depends_on": ["t1", "t2"]},
    ],
}


def jsonable(value: Any) -> Any:
    """A stored value as JSON: bytes (the one msgpack type JSON lacks) as base64 text, as
    the CLI prints them."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- jobs ----------------------------------------------------------------------------------


class JobCreated(BaseModel):
    id: str = Field(description="The job's id (a ULID).")


class TaskStatus(BaseModel):
    state: TaskState
    attempts: int
    handler: str | None
    queued_at: float | None
    started_at: float | None
    finished_at: float | None
    error: str | None
    progress: str | None
    created_at: float | None
    updated_at: float | None
    completed_at: float | None
    waiting_for: dict[str, Any] | None = None
    waiting_for_limit: str | None = None
    waiting_for_gate: dict[str, Any] | None = None
    awaiting: dict[str, Any] | None = Field(
        default=None, description="An awaiting task: what it waits for (signal, job, child)."
    )


class JobStatus(BaseModel):
    """A job and each of its tasks, as `jobcenter status --json` prints it."""

    id: str
    name: str | None
    owner: str | None
    state: JobState
    created_at: float | None
    finished_at: float | None
    error: str | None = Field(
        default=None, description="Why the job itself ended, when it says: a cancel, lost keys."
    )
    schedule_id: str | None = Field(default=None, description="The schedule that submitted it.")
    fire_time: float | None = Field(
        default=None,
        description="When it was due (epoch seconds): its schedule's fire time, or the one "
        "given at submit; null when it has none.",
    )
    tags: dict[str, str] = Field(default_factory=dict, description="The spec's `tags:`.")
    paused_at: float | None = Field(default=None, description="Paused since (epoch s).")
    late_at: float | None = Field(default=None, description="Found past its sla at (epoch s).")
    tasks: dict[str, TaskStatus]
    notifications: dict[str, Any] | None = None


class JobSummary(BaseModel):
    id: str
    name: str | None
    owner: str | None
    state: JobState
    created_at: float | None
    finished_at: float | None
    schedule_id: str | None
    fire_time: float | None
    tags: dict[str, str] = Field(default_factory=dict, description="The spec's `tags:`.")
    paused_at: float | None = Field(default=None, description="Paused since (epoch s).")
    late_at: float | None = Field(default=None, description="Found past its sla at (epoch s).")


class JobPage(BaseModel):
    jobs: list[JobSummary]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page (older jobs); null on the last page."
    )


class AttemptRecord(BaseModel):
    task: str
    attempt: int
    state: str
    handler: str | None
    started_at: float | None
    finished_at: float | None
    error: str | None


class HistoryPage(BaseModel):
    attempts: list[AttemptRecord]
    next_start: int | None = Field(description="`start` of the next page; null on the last.")


class TaskResult(BaseModel):
    job: str
    task: str
    result: Any = Field(description="What the task returned (bytes as base64 text).")


class TaskLog(BaseModel):
    job: str
    task: str
    state: str = Field(description="The task's state now.")
    attempt: int | None = Field(description="The attempt shown (none: the task has not run).")
    attempts: int = Field(description="Attempts the task has had.")
    logged_attempts: list[int] = Field(description="The attempts that have a log.")
    running: bool = Field(description="The attempt was running: its output so far.")
    log: str | None = Field(
        description="What the attempt printed and logged (INFO and above), its last 64 KiB "
        "after a line saying how much was dropped, and the worker's line on how it ended; "
        "none when it wrote nothing."
    )


class EventRecord(BaseModel):
    id: str = Field(description="The event's id in its shard's stream: a cursor.")
    time: float
    kind: str
    job: str
    index: int | None
    task: str | None
    attempt: int | None
    handler: str | None
    error: str | None
    detail: str | None


class EventPage(BaseModel):
    events: list[EventRecord]
    after: str = Field(description="Pass as `after` to read what happens next.")


class JobAction(BaseModel):
    id: str
    state: JobState
    message: str


REASON_MAX = 1_000  # characters of a reason kept in the history


class ClearRequest(Strict):
    tasks: list[str] = Field(
        default=[], max_length=1_000, description="More tasks to clear with the one in the path."
    )
    downstream: bool = Field(default=False, description="Also every task below them.")
    upstream: bool = Field(default=False, description="Also every task above them.")
    reason: str = Field(default="", max_length=REASON_MAX, description="Why, for the history.")


class MarkRequest(Strict):
    state: Literal["succeeded", "failed", "skipped"] = Field(
        description="What the task is settled as."
    )
    result: Any = Field(default=None, description="With `succeeded`: its result (JSON).")
    reason: str = Field(default="", max_length=REASON_MAX, description="Why, for the history.")


BULK_LIMIT_MAX = 1_000  # jobs one bulk call acts on: its time stays within a request's


class BulkRequest(Strict):
    """Which jobs (the list's filters; at least one) and how many at most."""

    state: JobState | None = None
    owner: str | None = Field(default=None, max_length=128)
    name: str | None = Field(default=None, max_length=200, description="A part of the name.")
    schedule: str | None = Field(default=None, max_length=128, description="Fired by it.")
    tag: str | None = Field(default=None, max_length=200, description="`key=value`.")
    since: float | None = Field(default=None, ge=0, description="Created since (epoch s).")
    until: float | None = Field(default=None, ge=0, description="Created before (epoch s).")
    dry_run: bool = Field(default=False, description="List the jobs, change nothing.")
    limit: int = Field(default=BULK_LIMIT_MAX, ge=1, le=BULK_LIMIT_MAX)


class BulkOutcome(BaseModel):
    id: str
    message: str | None = Field(description="What was done; null on a dry run or a skip.")
    error: str | None = Field(default=None, description="Why the job was skipped.")


class BulkResult(BaseModel):
    action: str
    dry_run: bool
    count: int = Field(description="Jobs acted on (a dry run: that it would act on).")
    jobs: list[BulkOutcome]
    more: bool = Field(default=False, description="The limit was reached: call again for more.")


class SignalRequest(Strict):
    payload: Any = Field(
        default=None, description="Plain JSON: the result of each task the signal releases."
    )


class SignalSent(BaseModel):
    id: str
    signal: str
    released: int = Field(description="Tasks that were waiting for it and succeeded now.")
    kept: int = Field(description="Tasks not at their wait yet: they take it when they get there.")
    message: str


# -- the worker protocol -------------------------------------------------------------------


class ClaimRequest(Strict):
    queues: list[str] = Field(
        default=["default"],
        min_length=1,
        max_length=100,
        description="Queues to take tasks from, in this order.",
    )
    tasks: list[str] = Field(
        min_length=1, max_length=1_000, description="The task names this executor can run."
    )
    node: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="Also serve this node's private queue (tasks pinned to the node).",
    )
    max: int = Field(default=1, ge=1, le=CLAIM_MAX, description="Attempts to take at most.")
    wait: float = Field(
        default=0.0,
        ge=0,
        le=CLAIM_WAIT_MAX,
        description="Seconds to wait for work when none is ready (a long poll).",
    )
    worker: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="This executor's id, kept across its claims (the reply gives a new one "
        "when none is sent): it shows among the workers.",
    )


class AttemptModel(BaseModel):
    token: str = Field(description="The attempt token: opaque; every report names it.")
    job_id: str
    task_id: str
    index: int
    attempt: int
    task: str = Field(description="The task name.")
    args: list[Any]
    kwargs: dict[str, Any] = Field(description="Keyword arguments, the inputs joined in.")
    inputs: dict[str, Any] = Field(description="The parents' results, by keyword.")
    timeout: float | None = Field(description="Seconds; past them the attempt fails.")
    lease_seconds: float = Field(description="Heartbeat at least every third of this.")
    fire_time: float | None = Field(
        default=None,
        description="When its job was due (epoch seconds): the fire time of the schedule "
        "that submitted it, or the one given at submit; null when it has none.",
    )
    schedule_id: str | None = Field(
        default=None, description="The schedule that submitted its job, if one did."
    )


class ClaimResponse(BaseModel):
    worker: str = Field(description="The executor's id: send it with the next claims.")
    attempts: list[AttemptModel]


REPORTED_LOG_MAX = 1_000_000  # characters of output a report may carry (its last 64 KiB kept)


def _log_field(what: str) -> Any:
    return Field(
        default=None,
        max_length=REPORTED_LOG_MAX,
        description=f"{what} (stdout, stderr, log lines): its last 64 KiB are kept, shown by "
        "`jobcenter logs`, the dashboard's task panel and GET .../tasks/{task}/logs.",
    )


class HeartbeatRequest(Strict):
    progress: str | None = Field(
        default=None, max_length=PROGRESS_MAX, description="Shown by status."
    )
    log: str | None = _log_field("The attempt's output so far")


class HeartbeatResponse(BaseModel):
    lease_seconds: float


class CompleteRequest(Strict):
    result: Any = Field(default=None, description="The task's result (JSON), stored as is.")
    log: str | None = _log_field("The attempt's output")


class FailRequest(Strict):
    error: str = Field(max_length=ERROR_MAX, description="What went wrong (status shows it).")
    retryable: bool = Field(
        default=True, description="false: fail for good now, whatever retries are left."
    )
    retry_in: float | None = Field(
        default=None, ge=0, le=86_400, description="Seconds before the retry (default: backoff)."
    )
    log: str | None = _log_field("The attempt's output")


class ReportResponse(BaseModel):
    state: TaskState = Field(description="The task's state after the report.")
    repeated: bool = Field(description="This attempt was reported already: nothing changed.")


# -- tokens, schedules, dead letters, pools, rates ----------------------------------------


class TokenCreate(Strict):
    scope: Literal["read", "submit", "operate", "work", "admin"]
    owner: str | None = Field(default=None, pattern=NAME_PATTERN)
    name: str | None = Field(default=None, min_length=1, max_length=200)


class TokenInfo(BaseModel):
    id: str
    scope: str
    owner: str | None
    name: str | None
    created_at: float


class TokenCreated(TokenInfo):
    token: str = Field(description="Shown this once: only its hash is kept.")


class ScheduleCreate(Strict):
    spec: dict[str, Any] = Field(description="The job spec each fire submits.")
    at: str | None = Field(default=None, description="One time (ISO 8601).")
    every: str | None = Field(default=None, description="An ISO 8601 duration, e.g. PT15M.")
    cron: str | None = Field(default=None, description="A cron expression.")
    tz: str | None = Field(default=None, description="The cron's time zone.")
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    overlap: Literal["skip", "allow", "buffer-one"] = "skip"
    catchup: Literal["none", "one", "all"] = "one"


class BackfillCreate(Strict):
    start: str = Field(
        alias="from",
        description="The first fire time to run (included): ISO 8601, UTC when no zone.",
    )
    to: str = Field(description="The end of the window (excluded): ISO 8601, UTC when no zone.")
    max_running: int = Field(default=1, ge=1, description="At most this many runs unfinished.")
    rerun: Literal["failed", "all"] | None = Field(
        default=None,
        description="Run again the fires whose run failed (retried in place) or was "
        "cancelled, or every fire that ran already; by default a fire that ran is kept.",
    )
    wait: bool = Field(default=False, description="Stream until every run has ended.")


class DeadLetter(BaseModel):
    job: str
    job_name: str | None
    task: str | None
    attempts: int
    handler: str | None
    failed_at: float | None
    error: str | None
    history: list[AttemptRecord] | None = None


class PoolSet(Strict):
    slots: int = Field(ge=0, le=1_000_000)


class PoolView(BaseModel):
    name: str
    slots: int | None
    used: int
    waiting: int


class RateSet(Strict):
    rate: str = Field(description="Starts per period, e.g. 100/1s or 10/1m.", max_length=64)


class RateView(BaseModel):
    target: str
    starts: int
    period: float


class Message(BaseModel):
    message: str


class Health(BaseModel):
    status: Literal["ok"]
