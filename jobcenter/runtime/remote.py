"""The worker protocol's server side: attempts run by executors outside this process (any
language, over HTTP), on the same store calls as the Python worker. A claim reserves and
starts attempts with claim.lua and start.lua and sweeps expired leases; a heartbeat renews
the lease (heartbeat.lua); a report goes through complete.lua or fail.lua with the attempt's
fencing token, so a late or taken-over attempt changes nothing, and an executor that dies is
recovered like a worker that dies: its leases run out.

An executor holds each attempt as an opaque *attempt token*: the attempt's identity (job,
task index, attempt, handler) and what the server needs to report it (task name, retry
backoff, timeout, start time), signed with the namespace's key so none can be forged."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from jobcenter.errors import NotFound, Refused, SpecError
from jobcenter.storage import task_logs, tokens
from jobcenter.storage.keyspace.records import TaskPayload
from jobcenter.storage.keyspace.schema import PayloadKey
from jobcenter.storage.refusals import why_refused
from jobcenter.storage.store import SWEEP_MAX, StartedTask, Store
from jobcenter.storage.task_logs import LogEntry

from .execution.outcome import (
    ERROR_TEXT_MAX,
    ResultRefused,
    decode,
    pack_result,
    retry_delay,
    timed_out,
)
from .tasklogs import AttemptLog, ended_line
from .worker.reporting import GIVE_BACK_DELAY_MAX_MS, GIVE_BACK_DELAY_MIN_MS
from .worker.state import CLAIM_BATCH_MAX

log = logging.getLogger(__name__)

SIGNATURE_BYTES = 16  # 128 bits of HMAC-SHA256: no forgery by guessing
# How often an executor's registration is renewed (its claims and heartbeats renew it): well
# within the worker timeout, after which the registry drops a silent worker.
REGISTER_EVERY_SECONDS = 5.0


def carried(payload: TaskPayload) -> dict[str, Any]:
    """The payload fields an attempt token carries: the task name, its retry backoff and cap,
    its timeout: what a report needs without reading the task again."""
    return {
        PayloadKey.TASK: payload.task,
        PayloadKey.RETRY_BACKOFF: payload.retry_backoff,
        PayloadKey.RETRY_BACKOFF_MAX: payload.retry_backoff_max,
        PayloadKey.TIMEOUT: payload.timeout,
    }


class AttemptTaken(Refused):
    """The attempt may not go on: taken over, cancelled, ended, or past its timeout. Its
    executor stops it; its report changes nothing."""


@dataclass(frozen=True)
class Attempt:
    """One attempt an executor runs, as a claim hands it out."""

    token: str
    job_id: str
    task_id: str
    index: int
    attempt: int
    task: str  # the task name
    args: list[Any]
    kwargs: dict[str, Any]  # with the inputs (parents' results) joined in, as a @task gets them
    inputs: dict[str, Any]  # the parents' results alone, by kwarg
    timeout: float | None  # seconds; the server fails the attempt once past it
    lease_seconds: float  # heartbeat well within this (a third of it, as workers do)
    fire_time: float | None = None  # its job's fire time (epoch seconds), when it has one
    schedule_id: str | None = None  # the schedule that submitted its job


@dataclass(frozen=True)
class AttemptRef:
    """What an attempt token holds."""

    job_id: str
    index: int
    attempt: int
    fence: str  # the attempt's fencing token (StartedTask.token): every report carries it
    handler: str
    carried: dict[str, Any]  # carried(): the fields of the task's payload a report needs
    started_ms: int

    @property
    def payload(self) -> TaskPayload:
        return TaskPayload.from_dict(self.carried)

    @property
    def task(self) -> StartedTask:
        return StartedTask(self.job_id, self.index, self.attempt, b"", token=self.fence)


@dataclass(frozen=True)
class Outcome:
    """What a report did: the task's state afterwards, and whether it was a repeat."""

    state: str
    repeated: bool = False


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Executors:
    """The attempts of one namespace's external executors (one per server process)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._key: bytes | None = None
        self._registered: dict[str, float] = {}  # handler -> monotonic time of its last renewal
        self._infos: dict[str, tuple[dict[str, Any], list[str], list[str], str | None]] = {}
        self._lock = threading.Lock()

    # -- attempt tokens ---------------------------------------------------------------------

    def _signing_key(self) -> bytes:
        if self._key is None:
            self._key = tokens.signing_key(self.store)
        return self._key

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._signing_key(), body, hashlib.sha256).digest()[:SIGNATURE_BYTES]

    def encode(self, ref: AttemptRef) -> str:
        fields = [
            ref.job_id, ref.index, ref.attempt, ref.fence, ref.handler, ref.carried,
            ref.started_ms,
        ]  # fmt: skip
        body = json.dumps(fields, separators=(",", ":")).encode()
        return f"{_b64(body)}.{_b64(self._sign(body))}"

    def decode(self, token: str) -> AttemptRef:
        """The attempt a token names; NotFound for anything this namespace did not sign
        (the same answer as for an attempt that is gone: nothing to learn from guessing)."""
        unknown = NotFound("no such attempt: the attempt token was not issued here")
        body_text, _, signature = token.partition(".")
        try:
            body, given = _unb64(body_text), _unb64(signature)
        except (binascii.Error, ValueError):
            raise unknown from None
        if not hmac.compare_digest(given, self._sign(body)):
            raise unknown
        job_id, index, attempt, fence, handler, payload, started_ms = json.loads(body)
        return AttemptRef(job_id, index, attempt, fence, handler, payload, started_ms)

    # -- claiming ---------------------------------------------------------------------------

    def claim(self, handler: str, queues: list[str], names: set[str], most: int) -> list[Attempt]:
        """Start up to `most` attempts from `queues` (in their order), every shard's; the
        tasks whose names are not in `names` go back to their queue unused, for a worker
        that has them (give_back.lua), as do tasks requiring gates (only a Python worker
        can ask its gates). Expired leases found on the way are acted on (expire.lua)."""
        most = max(1, min(most, CLAIM_BATCH_MAX))
        attempts: list[Attempt] = []
        for shard in range(self.store.keys.shards):
            if len(attempts) >= most:
                break
            result = self.store.claim(
                handler, queues, max_tasks=most - len(attempts), max_leader=0, shard=shard,
                sweep=SWEEP_MAX,
            )  # fmt: skip
            if result.expired:
                self.store.expire(result.expired)
            if result.tasks:
                attempts += self._hand_out(handler, result.tasks, names)
        return attempts

    def _hand_out(self, handler: str, started: list[StartedTask], names: set[str]) -> list[Attempt]:
        now_ms = self.store.now_ms()
        out: list[Attempt] = []
        back: list[tuple[str, int, str, str]] = []
        for task in started:
            payload = decode(task)
            name = payload.task
            if name not in names or payload.gates:
                back.append((task.job_id, task.index, task.token, name))
                continue
            ref = AttemptRef(
                task.job_id, task.index, task.attempt, task.token, handler, carried(payload), now_ms
            )
            timeout = payload.timeout
            out.append(
                Attempt(
                    token=self.encode(ref),
                    job_id=task.job_id,
                    task_id=payload.id if payload.id is not None else str(task.index),
                    index=task.index,
                    attempt=task.attempt,
                    task=name,
                    args=list(payload.args),
                    kwargs=dict(payload.kwargs),
                    inputs=task.input_kwargs(),
                    timeout=None if timeout is None else float(timeout),
                    lease_seconds=self.store.settings.lease_seconds,
                    fire_time=payload.fire_time,
                    schedule_id=payload.schedule_id,
                )
            )
        if back:
            self._give_back(handler, back)
        return out

    def _give_back(self, handler: str, attempts: list[tuple[str, int, str, str]]) -> None:
        """As a worker without a task's code does (Worker._give_back): a live worker that
        serves the task takes it after the shortest delay."""
        settings = self.store.settings
        live_since = self.store.now_ms() - int(settings.worker_timeout_seconds * 1000)
        served = self.store.served_since(live_since)
        self.store.give_back(
            handler, attempts, GIVE_BACK_DELAY_MIN_MS, GIVE_BACK_DELAY_MAX_MS, served
        )

    def release(self, attempts: list[Attempt]) -> None:
        """Give back attempts a claim started but could not hand to its executor (it went
        away): release.lua queues them again without using up an attempt."""
        by_handler: dict[str, list[tuple[str, int, str]]] = {}
        for a in attempts:
            ref = self.decode(a.token)
            by_handler.setdefault(ref.handler, []).append((ref.job_id, ref.index, ref.fence))
        for handler, running in by_handler.items():
            self.store.release(handler, running)

    # -- registration -----------------------------------------------------------------------

    def register(
        self,
        handler: str,
        *,
        host: str,
        queues: list[str],
        names: list[str],
        node: str | None,
        slots: int,
    ) -> None:
        """Show the executor among the workers (the dashboard's Workers page) and say which
        task names it serves on its queues (recovery rule 8 reads that), at most every
        REGISTER_EVERY_SECONDS."""
        info = {"host": host, "queues": ",".join(queues), "node": node or "", "concurrency": slots}
        with self._lock:
            self._infos[handler] = (info, queues, names, node)
        self._renew(handler)

    def _renew(self, handler: str) -> None:
        now = time.monotonic()
        with self._lock:
            known = self._infos.get(handler)
            if known is None or now - self._registered.get(handler, -1e9) < REGISTER_EVERY_SECONDS:
                return
            self._registered[handler] = now
        info, queues, names, node = known
        keep_ms = int(self.store.settings.unknown_task_timeout_seconds * 1000)
        self.store.publish_served(queues, names, keep_ms)
        self.store.register_worker(handler, info, node)

    # -- reports ----------------------------------------------------------------------------

    def _save_log(
        self, ref: AttemptRef, log: str, final: bool = True, ended: str | None = None
    ) -> None:
        """Store the output an executor sent, cut to its last 64 KiB as a worker's is (and
        its end, `ended`, in the worker's words), before the report that may end the job."""
        output = AttemptLog()
        output.write_text(log)
        if ended is not None:
            output.note(ended)
        entry = LogEntry(ref.job_id, ref.index, ref.attempt, output.render(), final)
        task_logs.save(self.store, [entry])

    def _refused(self, ref: AttemptRef, code: int) -> AttemptTaken:
        why = why_refused(self.store, ref.job_id, ref.index, ref.fence, code)
        return AttemptTaken(f"job {ref.job_id} task {ref.index} attempt {ref.attempt}: {why}")

    def heartbeat(self, token: str, progress: str | None = None, log: str | None = None) -> None:
        """Renew the attempt's lease (and store its progress). AttemptTaken once it was
        taken over, cancelled or ended, or ran past its timeout (then it fails here, as
        the Python worker fails an attempt past its timeout): its executor stops it."""
        ref = self.decode(token)
        timeout = ref.payload.timeout
        if timeout is not None and self.store.now_ms() > ref.started_ms + float(timeout) * 1000:
            outcome = timed_out(ref.task, ref.payload, "its executor was told to stop it")
            self._fail(ref, outcome.error, outcome.retry_delay_ms)
            raise AttemptTaken(
                f"job {ref.job_id} task {ref.index} attempt {ref.attempt} ran past its "
                f"timeout of {timeout}s: it failed"
            )
        entry = (ref.job_id, ref.index, ref.fence, progress or "")
        code = self.store.heartbeat(ref.handler, [entry]).get((ref.job_id, ref.index), 0)
        if code < 0:
            raise self._refused(ref, code)
        if log is not None:
            self._save_log(ref, log, final=False)
        self._renew(ref.handler)

    def complete(self, token: str, result: Any, log: str | None = None) -> Outcome:
        """Report success with `result` (stored as a @task's return value). A result that
        cannot be stored fails the task, as a Python task's does (SpecError says why)."""
        ref = self.decode(token)
        try:
            packed = pack_result(ref.payload.task, result, self.store.settings.result_max_bytes)
        except ResultRefused as exc:
            self._fail(ref, str(exc), -1, log)
            raise SpecError(f"{exc}; the attempt failed") from None
        if log:
            self._save_log(ref, log, ended=ended_line(True, "", ref.attempt, ref.handler))
        done = [(ref.job_id, ref.index, ref.fence, packed)]
        codes, _ = self.store.complete(ref.handler, done)
        code = codes.get((ref.job_id, ref.index), 0)
        if code < 0:
            raise self._refused(ref, code)
        return Outcome("succeeded", repeated=code > 0)

    def fail(
        self,
        token: str,
        error: str,
        retryable: bool = True,
        retry_in: float | None = None,
        log: str | None = None,
    ) -> Outcome:
        """Report failure: retried after the task's backoff (or `retry_in` seconds) while
        attempts remain and `retryable`, else failed for good (dead-lettered, cascaded)."""
        ref = self.decode(token)
        delay = -1
        if retryable:
            delay = retry_delay(ref.task, ref.payload) if retry_in is None else int(retry_in * 1000)
        return self._fail(ref, error, delay, log)

    def _fail(self, ref: AttemptRef, error: str, delay_ms: int, log: str | None = None) -> Outcome:
        text = error[:ERROR_TEXT_MAX] or "failed (its executor gave no error)"
        self._save_log(ref, log or "", ended=ended_line(False, text, ref.attempt, ref.handler))
        code, state = self.store.fail(ref.handler, ref.job_id, ref.index, ref.fence, text, delay_ms)
        if code < 0:
            raise self._refused(ref, code)
        return Outcome(state or "failed", repeated=code > 0)
