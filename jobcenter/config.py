"""Settings, read from the environment; CLI flags override them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from jobcenter.model.durations import parse_seconds
from jobcenter.model.spec import check_name

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_NAMESPACE = "default"
# What a submit waits for before it returns: Redis's acknowledgement (`acked`), or also the
# local AOF fsync confirmed by WAITAOF (`fsynced`, on Redis >= 7.2 with AOF on; elsewhere
# the same as acked), or one replica's acknowledgement confirmed by WAIT (`replicated`: the
# job survives losing the primary to a Sentinel failover). README: Durability.
ACKED, FSYNCED, REPLICATED = "acked", "fsynced", "replicated"
DURABILITY_MODES = (ACKED, FSYNCED, REPLICATED)

# Results are for handing data to the next task, not for bulk data (keep that elsewhere).
DEFAULT_RESULT_MAX_BYTES = 1024 * 1024
IDLE_WAIT_SECONDS = 1.0  # an idle worker claims its shards at least this often: lease sweeps

N = TypeVar("N", int, float)


def _env_float(name: str, default: float) -> float:
    """A duration > 0, in any form a spec takes (model.durations: 30, 30s, 15m, PT1H)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return parse_seconds(raw, name, low_open=True)


def _env_int(name: str, default: int) -> int:
    return _env_positive(name, default, int, "a whole number")


def _env_positive(name: str, default: N, parse: Callable[[str], N], what: str) -> N:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {raw!r}")
    return value


def _env_count(name: str, default: int) -> int:
    """A whole number >= 0 (0 turns something off)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value


SWITCH_VALUES = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}


def _env_switch(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return SWITCH_VALUES[raw.strip().lower()]
    except KeyError:
        raise ValueError(f"{name} must be one of 1, 0, true, false, on, off; got {raw!r}") from None


def redacted_url(url: str) -> str:
    """The URL with its password replaced by ***: fit for a log line."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***" if parts.username else ":***"
    host = parts.hostname or ""
    netloc = f"{user}@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Settings:
    """Everything a client, worker or recovery run needs to know about its deployment."""

    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = DEFAULT_NAMESPACE
    # A running attempt must heartbeat within this; seeds: ~30 s, like BullMQ's lock.
    lease_seconds: float = 30.0
    # A handler silent this long is gone (seed 000 rule "handler no longer running").
    worker_timeout_seconds: float = 60.0
    # How often the singleton recovery job runs (seed 000: every minute).
    recovery_interval_seconds: float = 60.0
    # How long a finished job is kept (ARCHITECTURE.md, the flow of a job: 7 days by default).
    retention_seconds: float = 7 * 24 * 3600.0
    # A task whose name no live worker serving its queue has registered fails after waiting
    # this long for one (a rolling deploy or a late worker start has this long to arrive).
    unknown_task_timeout_seconds: float = 600.0
    # Number of hash-tag shards; 1 on a single Redis, more on Redis Cluster. Fixed per namespace.
    shards: int = 1
    # A worker's lease on the shards it polls (owned segments): a dead worker's shards are
    # taken over within this; each worker renews its leases every third of it.
    segment_lease_seconds: float = 10.0
    # An idle worker claims its shards at least this often even without a wake-up token (lease
    # sweeps, due retries); a wake-up token ends the wait at once.
    idle_wait_seconds: float = IDLE_WAIT_SECONDS
    # acked | fsynced | replicated: see DURABILITY_MODES.
    durability: str = FSYNCED
    # Events kept per shard's stream (about: trimmed by whole stream nodes); 0 turns them off.
    events_maxlen: int = 100_000
    # Whether the transitions keep the metric counters /metrics reads.
    metrics: bool = True
    # A task's return value is stored in Redis with its job: a bound keeps one task from
    # filling memory; a larger value fails the task (it is never truncated).
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES
    # Notifications (spec `notify:`): the key webhooks are signed with (HMAC-SHA256; unsigned
    # without one), how long one attempt may take, how many attempts, the first retry's delay.
    webhook_secret: str | None = field(default=None, repr=False)
    notify_timeout_seconds: float = 5.0
    notify_attempts: int = 8
    notify_backoff_seconds: float = 2.0

    def __post_init__(self) -> None:
        # both end up inside every key name and hash tag
        check_name(self.namespace, "the namespace")
        if not isinstance(self.shards, int) or self.shards < 1:
            raise ValueError(f"the shard count must be a whole number >= 1, got {self.shards!r}")
        if not isinstance(self.events_maxlen, int) or self.events_maxlen < 0:
            raise ValueError(
                f"events_maxlen must be a whole number >= 0, got {self.events_maxlen!r}"
            )
        if self.durability not in DURABILITY_MODES:
            raise ValueError(
                f"durability (JOBCENTER_DURABILITY) must be one of "
                f"{', '.join(DURABILITY_MODES)}, got {self.durability!r}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from JOBCENTER_* variables, then `overrides` (None values are ignored)."""
        values: dict[str, Any] = {
            "redis_url": os.environ.get("JOBCENTER_REDIS_URL") or DEFAULT_REDIS_URL,
            "namespace": os.environ.get("JOBCENTER_NAMESPACE") or DEFAULT_NAMESPACE,
            "lease_seconds": _env_float("JOBCENTER_LEASE_SECONDS", 30.0),
            "worker_timeout_seconds": _env_float("JOBCENTER_WORKER_TIMEOUT_SECONDS", 60.0),
            "recovery_interval_seconds": _env_float("JOBCENTER_RECOVERY_INTERVAL_SECONDS", 60.0),
            "retention_seconds": _env_float("JOBCENTER_RETENTION_SECONDS", 7 * 24 * 3600.0),
            "unknown_task_timeout_seconds": _env_float(
                "JOBCENTER_UNKNOWN_TASK_TIMEOUT_SECONDS", 600.0
            ),
            "shards": _env_int("JOBCENTER_SHARDS", 1),
            "segment_lease_seconds": _env_float("JOBCENTER_SEGMENT_LEASE_SECONDS", 10.0),
            "idle_wait_seconds": _env_float("JOBCENTER_IDLE_WAIT_SECONDS", IDLE_WAIT_SECONDS),
            "durability": os.environ.get("JOBCENTER_DURABILITY") or FSYNCED,
            "events_maxlen": _env_count("JOBCENTER_EVENTS_MAXLEN", 100_000),
            "metrics": _env_switch("JOBCENTER_METRICS", True),
            "result_max_bytes": _env_int("JOBCENTER_RESULT_MAX_BYTES", DEFAULT_RESULT_MAX_BYTES),
            "webhook_secret": os.environ.get("JOBCENTER_WEBHOOK_SECRET") or None,
            "notify_timeout_seconds": _env_float("JOBCENTER_NOTIFY_TIMEOUT_SECONDS", 5.0),
            "notify_attempts": _env_int("JOBCENTER_NOTIFY_ATTEMPTS", 8),
            "notify_backoff_seconds": _env_float("JOBCENTER_NOTIFY_BACKOFF_SECONDS", 2.0),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def segment_lease_ms(self) -> int:
        return int(self.segment_lease_seconds * 1000)
