"""Delivers job notifications (spec `notify:`: the job's end, and the events it asks for: late,
a task failed) off the task path: a poller thread takes due
deliveries (leased, so a worker that dies mid-delivery leaves them to another), and a few
delivery threads POST the webhook (HMAC-signed, to a checked address: runtime/webhook.py) or
call the job-finished hooks, each attempt bounded by a short timeout; a failed attempt is
retried with exponential backoff up to JOBCENTER_NOTIFY_ATTEMPTS. A dead or slow endpoint
holds at most the delivery threads of the workers that try it, never a task slot nor a job.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import random
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from jobcenter.model.notify import FINAL_STATES, Channel, NoticeKind, parse_delivery
from jobcenter.storage import notifications
from jobcenter.storage.server.errors import RedisError
from jobcenter.storage.store import Store

from . import hooks, webhook

log = logging.getLogger(__name__)

DELIVERY_THREADS = 4  # deliveries in flight per worker: what a dead endpoint can hold up
POLL_SECONDS = 0.5  # an idle notifier looks for due deliveries this often
REDIS_RETRY_SECONDS = 1.0  # pause after a Redis error (the lease brings a delivery back)
BACKOFF_MAX_SECONDS = 600.0  # the longest wait between two attempts
# A delivery is leased for this many attempt timeouts (and at least one task lease): long
# enough for the attempt, short enough that a dead deliverer's work comes back soon.
LEASE_TIMEOUTS = 3
DETAIL_MAX = 300  # characters of an error or answer kept per attempt
SIGNATURE_HEADER = "X-Jobcenter-Signature"  # "sha256=<hex HMAC of '<timestamp>.<body>'>"
TIMESTAMP_HEADER = "X-Jobcenter-Timestamp"  # Redis time, epoch seconds, signed with the body
SUPERSEDED = "the job was retried before this went out: its next end is told instead"
DELIVERY_HEADER = "X-Jobcenter-Delivery"  # "<job id>:<delivery>": the same on every attempt


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value: HMAC-SHA256 of '<timestamp>.<body>' keyed by `secret`."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class Notifier:
    """One worker's notification delivery: `poll_loop` on one thread, `deliver_loop` on
    DELIVERY_THREADS others (the worker starts them, and dies if one fails on a bug)."""

    def __init__(
        self,
        store: Store,
        handler: str,
        stopped: threading.Event,
        shards: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        self.stopped = stopped
        # the shards to look for due deliveries in: a worker's owned leader shards (owned
        # segments), every shard by default
        self.shards = shards or (lambda: range(store.keys.shards))
        settings = store.settings
        self.timeout = settings.notify_timeout_seconds
        self.lease_ms = max(settings.lease_ms, int(LEASE_TIMEOUTS * self.timeout * 1000))
        self.slots = threading.Semaphore(DELIVERY_THREADS)
        self.work: queue.Queue[tuple[str, str]] = queue.Queue()
        self.rules = webhook.delivery_rules(store.webhook_rules)
        if settings.webhook_secret is None:
            log.info("JOBCENTER_WEBHOOK_SECRET is not set: webhooks go out unsigned")

    # -- threads ---------------------------------------------------------------------------

    def poll_loop(self) -> None:
        """Take due deliveries while a delivery thread is free."""
        while not self.stopped.is_set():
            if not self.slots.acquire(timeout=POLL_SECONDS):
                continue
            free = 1
            while free < DELIVERY_THREADS and self.slots.acquire(blocking=False):
                free += 1
            try:
                due = self._claim(free)
            except RedisError as exc:
                due = []
                log.warning("notifier: redis error (%s); retrying", exc)
                self.stopped.wait(REDIS_RETRY_SECONDS)
            for item in due:
                self.work.put(item)
            for _ in range(free - len(due)):
                self.slots.release()
            if not due:
                self.stopped.wait(POLL_SECONDS)

    def _claim(self, limit: int) -> list[tuple[str, str]]:
        due: list[tuple[str, str]] = []
        for shard in self.shards():
            if len(due) < limit:
                due += notifications.claim_due(self.store, shard, self.lease_ms, limit - len(due))
        return due

    def deliver_loop(self) -> None:
        while True:
            channel, job_id = self.work.get()
            try:
                self.deliver(channel, job_id)
            except RedisError as exc:  # its lease brings the delivery back
                log.warning("notification %s of job %s: redis error (%s)", channel, job_id, exc)
            finally:
                self.slots.release()

    # -- one attempt -----------------------------------------------------------------------

    def deliver(self, delivery: str, job_id: str) -> None:
        """Make one attempt at a claimed delivery ("<channel>[:<kind>[:<task index>]]") and
        record its outcome."""
        try:
            channel, kind, task = parse_delivery(delivery)
        except ValueError:  # its lease brings it back, for a worker of the newer release
            log.warning("notification %s of job %s: unknown to this release", delivery, job_id)
            return
        attempt = notifications.begin(self.store, delivery, job_id, self.handler, self.lease_ms)
        if attempt is None:
            return
        notice = notifications.job_notice(self.store, job_id)
        if notice is None:
            return  # deleted meanwhile: its entry goes with the next claim
        url = notice.pop("webhook")
        if kind == NoticeKind.FINISHED and notice["state"] not in FINAL_STATES:
            # retried (revived) before it was told
            notifications.finish(
                self.store,
                delivery,
                job_id,
                attempt,
                self.handler,
                delivered=False,
                detail=SUPERSEDED,
                retry_ms=-1,
            )
            return
        notice["kind"] = kind.value
        if task is not None:
            notice |= notifications.task_failure(self.store, job_id, task)
        if channel == Channel.WEBHOOK:
            delivered, detail = self.post(url, notice, f"{job_id}:{delivery}", attempt)
        else:
            delivered, detail = self.call_hooks(notice)
        retry_ms = -1
        if not delivered and attempt < self.store.settings.notify_attempts:
            retry_ms = self.backoff_ms(attempt)
        state = notifications.finish(
            self.store,
            delivery,
            job_id,
            attempt,
            self.handler,
            delivered=delivered,
            detail=detail[:DETAIL_MAX],
            retry_ms=retry_ms,
        )
        if not delivered:
            log.warning(
                "notification %s of job %s, attempt %d: %s (%s)",
                delivery,
                job_id,
                attempt,
                detail,
                state or "taken over",
            )

    def backoff_ms(self, attempt: int) -> int:
        """Exponential from the setting, capped, with jitter so retries spread out."""
        base = self.store.settings.notify_backoff_seconds * 2 ** (attempt - 1)
        delay = min(base, BACKOFF_MAX_SECONDS)
        return int(delay * random.uniform(0.5, 1.0) * 1000)

    def post(
        self, url: str | None, notice: dict[str, Any], delivery_id: str, attempt: int
    ) -> tuple[bool, str]:
        """POST the notice as JSON; (delivered, what happened). Any 2xx answer delivers."""
        if not url:
            return False, "the job has no webhook URL"
        body = json.dumps({**notice, "attempt": attempt}, sort_keys=True).encode()
        timestamp = str(self.store.now_ms() // 1000)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "jobcenter-notifier",
            TIMESTAMP_HEADER: timestamp,
            DELIVERY_HEADER: delivery_id,
        }
        secret = self.store.settings.webhook_secret
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
        return webhook.post(url, body, headers, self.timeout, self.rules)

    def call_hooks(self, notice: dict[str, Any]) -> tuple[bool, str]:
        """Call every job-finished hook of this worker; a hook that raises fails the attempt
        (all of them run again on the next one)."""
        registered = hooks.registered()
        if not registered:
            return False, f"no job-finished hook is registered on worker {self.handler}"
        for hook in registered:
            try:
                hook(dict(notice))
            except Exception as exc:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                name = getattr(hook, "__qualname__", repr(hook))
                return False, f"hook {name} raised {exc!r} at {where.filename}:{where.lineno}"
        return True, f"{len(registered)} hook(s) called"
