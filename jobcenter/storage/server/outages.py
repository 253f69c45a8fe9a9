"""Waiting out a Redis outage (a restart, a failover, a dropped link): the pauses between
tries (Backoff), and the reads of a wait, such as a job's end or the next events, tried again
until Redis answers or the wait's own deadline passes (ride_out).

A wait that meets an outage has not failed: what it waits for goes on in Redis and in the
workers meanwhile, so it reconnects instead of saying "unreachable" (which a caller would
take for "nothing happened: submit again")."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import UNREACHABLE, trouble

log = logging.getLogger(__name__)

RECONNECT_MAX_SECONDS = 5.0  # longest pause between tries while Redis is unreachable
BACKOFF_FIRST_SECONDS = 0.1  # first pause after a Redis error

T = TypeVar("T")


class Backoff:
    """Pauses between tries while Redis is unreachable or refuses commands: 0.1 s doubling
    to a cap."""

    def __init__(self, cap: float = RECONNECT_MAX_SECONDS) -> None:
        self.cap = cap
        self.pause = min(BACKOFF_FIRST_SECONDS, cap)

    def reset(self) -> None:
        self.pause = min(BACKOFF_FIRST_SECONDS, self.cap)

    def wait(self, stop: threading.Event | None, why: str, at_most: float | None = None) -> None:
        """Log `why` and pause (less if `stop` is set, or `at_most` seconds are left)."""
        pause = self.pause if at_most is None else max(0.0, min(self.pause, at_most))
        log.warning("%s; retrying in %.2fs", why, pause)
        if stop is None:
            time.sleep(pause)
        else:
            stop.wait(pause)
        self.pause = min(self.pause * 2, self.cap)


def ride_out(read: Callable[[], T], deadline: float | None, what: str) -> T:
    """`read()`, tried again with backoff while Redis cannot be reached (restarting, loading
    its data, failing over) until it answers. Past `deadline` (time.monotonic(); None: no
    end) a builtin TimeoutError saying so, as for a wait that timed out: the caller's wait
    gave up, nothing it waits for was lost. `what` names the wait in the log and the error."""
    backoff = Backoff()
    while True:
        try:
            return read()
        except UNREACHABLE as exc:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"{what}: {trouble(exc)} until the wait's deadline") from exc
            backoff.wait(None, f"{what}: {trouble(exc)}", at_most=left)
