"""Store, the one door to Redis for jobs and tasks: typed methods over the Lua transitions,
and the reads that status, list and history need.

Every transition is one script call; batches of calls for different jobs go in one pipeline
(one round trip). The methods live in `jobs/`, one module per concern, each a class over
StoreBase (the client, keys, scripts and the job scripts' shared KEYS); Store composes them.
Mixins rather than a facade: every public method keeps its one definition and signature, with
no forwarding layer to keep in step.
"""

from __future__ import annotations

from redis import Redis

from jobcenter.config import Settings

from .jobs.archiving import Archiving, PendingJob
from .jobs.attempts import NO_RESULT, SWEEP_MAX, Attempts, RefusedInPart, StartedTask
from .jobs.lifecycle import CURSOR_MOVED, Lifecycle
from .jobs.presence import Presence, served_member
from .jobs.reads import JobProgress, JobQuery, Reads, waiting_for, waiting_for_gate
from .jobs.submit import Submits
from .keyspace.upgrade import ensure_schema
from .server.connection import connect

# The door's values: what callers pass to Store or get back from it.
__all__ = [
    "CURSOR_MOVED",
    "NO_RESULT",
    "PendingJob",
    "SWEEP_MAX",
    "JobProgress",
    "JobQuery",
    "RefusedInPart",
    "StartedTask",
    "Store",
    "connect",
    "served_member",
    "waiting_for",
    "waiting_for_gate",
]


class Store(Submits, Attempts, Lifecycle, Presence, Reads, Archiving):
    """Jobs and tasks in Redis for one namespace."""

    def __init__(self, client: Redis, settings: Settings) -> None:
        super().__init__(client, settings)
        ensure_schema(self)

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls(connect(settings.redis_url), settings)
