"""The worker's heartbeats: every lease renewed (with the progress of its task), the attempts
whose heartbeat Redis refused stopped at once, and the worker's presence (registered, its
task names published, its rq recovery child kept alive)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time

from jobcenter.storage.refusals import JOB_GONE, STALE_TOKEN, STOPPED, UNKNOWN_ATTEMPT, why_refused
from jobcenter.storage.server.errors import RedisError, trouble
from jobcenter.storage.server.outages import Backoff
from jobcenter.storage.store import StartedTask

from .. import registry, rq_runner
from ..archive_guard import ARCHIVE_INFO, archive_info
from ..execution.outcome import task_label
from ..stopping import Stop, StopReason, StopStep, log_stop
from .state import WorkerState

log = logging.getLogger(__name__)

# A refused heartbeat is tried again this many times per heartbeat interval, so once Redis
# takes writes again each lease is renewed well within the grace a timed-out attempt gets.
HEARTBEAT_RETRIES_PER_INTERVAL = 4
PROGRESS_MIN_INTERVAL_SECONDS = 1.0  # a task's progress goes out at once at most this often
# Why an attempt whose heartbeat Redis refused is no longer live, by the refusal's code (any
# other refusal: the task is not running any more).
STOP_REASONS = {
    **{code: StopReason.CANCELLED for code in STOPPED},
    STALE_TOKEN: StopReason.TAKEN_OVER,
    UNKNOWN_ATTEMPT: StopReason.TAKEN_OVER,  # Redis lost its start: the task runs again
    JOB_GONE: StopReason.GONE,
}


class Heartbeats(WorkerState):
    """A worker's heartbeats, and its presence in Redis."""

    def _heartbeat_loop(self) -> None:
        """Renew leases every lease/3; a heartbeat Redis refuses is tried again soon, since
        the leases it renews may be running out."""
        interval = self.store.settings.lease_seconds / 3
        backoff = Backoff(interval / HEARTBEAT_RETRIES_PER_INTERVAL)
        while not self.stopped.wait(interval):
            while not self.stopped.is_set():
                try:
                    self._heartbeat()
                    self.pulse.beat(ok=True)
                    break
                except RedisError as exc:
                    self.pulse.beat(ok=False)
                    backoff.wait(self.stopped, f"heartbeat: {trouble(exc)}")
            backoff.reset()

    def _heartbeat(self) -> None:
        with self.lock:
            running = [
                (r.task.job_id, r.task.index, r.task.token, r.progress)
                for r in self.running.values()
            ]
        tokens = {(job_id, index): token for job_id, index, token, _ in running}
        for (job_id, index), code in self.store.heartbeat(self.handler, running).items():
            if code < 0:
                self._stop_attempt(job_id, index, tokens[(job_id, index)], code)
        self.stop_counts.flush(self.store)
        self._register()
        self._supervise_recovery()
        self.eviction.check()

    def _report_progress(self, task: StartedTask, message: str) -> None:
        """Store the message; send it at once unless this task sent one under a second ago
        (the next heartbeat carries it then), so a chatty task cannot flood Redis."""
        now = time.monotonic()
        with self.lock:
            running = self.running.get((task.job_id, task.index))
            if running is None:
                return
            running.progress = message
            if now - running.progress_sent_at < PROGRESS_MIN_INTERVAL_SECONDS:
                return
            running.progress_sent_at = now
        try:
            codes = self.store.heartbeat(
                self.handler, [(task.job_id, task.index, task.token, message)]
            )
        except RedisError as exc:  # the heartbeat loop carries it, and logs the trouble
            log.debug("progress of job %s task %s not sent: %s", task.job_id, task_label(task), exc)
            return
        code = codes.get((task.job_id, task.index), 0)
        if code < 0:
            self._stop_attempt(task.job_id, task.index, task.token, code)

    def _stop_attempt(self, job_id: str, index: int, token: str, code: int) -> None:
        """Redis refused the attempt's heartbeat (`code`): it is no longer live (its job was
        cancelled or is gone, another attempt took the task over, the task was queued again
        or failed when its lease ran out, or Redis lost the writes that started it). Stop it
        now, whatever the cause, so it never runs beside the task's next attempt, and free its
        slot. Nothing is reported: Redis would refuse its outcome."""
        name = self._label(job_id, index)
        stopped = self.runner.stop(
            (job_id, index, token), STOP_REASONS.get(code, StopReason.NOT_RUNNING)
        )
        if code == UNKNOWN_ATTEMPT:  # an error of its own, counted: Redis lost writes
            self._refused("heartbeat", job_id, index, token, code)
        why = why_refused(self.store, job_id, index, token, code)
        attempt = token.partition(":")[0]
        if not stopped:  # it ended meanwhile: the reporter has its outcome
            log.info("job %s task %s attempt %s: heartbeat refused: %s (code %d)",
                     job_id, name, attempt, why, code)  # fmt: skip
            return
        level = logging.INFO if code in STOPPED or code == JOB_GONE else logging.WARNING
        log.log(level, "job %s task %s attempt %s stopped: %s (code %d)",
                job_id, name, attempt, why, code)  # fmt: skip
        with self.lock:
            running = self.running.get((job_id, index))
            if running is not None and running.task.token == token:
                del self.running[(job_id, index)]
            self.lock.notify_all()

    def _attempt_stopped(self, stop: Stop) -> None:
        """A runner's word on an attempt it stopped (told, still running, ended): logged,
        and counted for the metrics."""
        job_id, index, _ = stop.key
        if stop.step is StopStep.TOLD:  # the attempt still counts as running: its id is known
            task = self.stop_labels[stop.key] = self._label(job_id, index)
        elif stop.step is StopStep.ENDED:
            task = self.stop_labels.pop(stop.key, f"#{index}")
        else:
            task = self.stop_labels.get(stop.key, f"#{index}")
        log_stop(stop, task)
        self.stop_counts.add(stop)

    def _supervise_recovery(self) -> None:
        """Keep the rq child alive and enqueue this round's recovery job (once per round,
        whichever worker gets there first)."""
        if not self.options.recovery or self.stopping.is_set():
            return
        if self.rq_child is None or self.rq_child.poll() is not None:
            if self.rq_child is not None:
                log.warning(
                    "rq recovery worker exited (%s); restarting it", self.rq_child.returncode
                )
            self.rq_child = rq_runner.spawn_rq_worker(self.store.settings, self.options.node)
        try:
            rq_runner.enqueue_recovery(self.store)
        except RedisError as exc:
            log.warning("cannot enqueue the recovery job (%s); next heartbeat tries again", exc)

    def _register(self) -> None:
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": ",".join(self.queues),
            "node": self.options.node or "",
            "concurrency": self.options.concurrency,
            ARCHIVE_INFO: archive_info(self.store),
        }
        keep_ms = int(self.store.settings.unknown_task_timeout_seconds * 1000)
        self.store.publish_served(self.queues, registry.names(), keep_ms)
        self.store.register_worker(self.handler, info, self.options.node)

    def _deregister(self) -> None:
        with contextlib.suppress(RedisError):
            self.store.deregister_worker(self.handler)
