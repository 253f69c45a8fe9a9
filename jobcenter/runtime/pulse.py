"""The worker's heartbeat as its health checks see it: when its heartbeat thread last went
round, and when it last reached Redis (monotonic times of this process)."""

from __future__ import annotations

import time


class Pulse:
    """The worker's heartbeat as its health checks see it (monotonic times of this process)."""

    def __init__(self) -> None:
        self.round_at = time.monotonic()  # the heartbeat thread last went round (ok or not)
        self.ok_at: float | None = None  # ... and last reached Redis and registered
        self.redis_ok = False  # the last round did

    def beat(self, ok: bool) -> None:
        now = time.monotonic()
        self.round_at = now
        self.redis_ok = ok
        if ok:
            self.ok_at = now
