"""Settings, read from the environment; CLI flags override them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from jobcenter.model.durations import MAX_SECONDS, parse_seconds
from jobcenter.model.spec import check_name
from jobcenter.model.webhook_targets import parse_allow

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
# A worker's task slots and where its tasks run, unless told (`jobcenter worker -c --pool`).
DEFAULT_CONCURRENCY = 4
THREAD_POOL, PROCESS_POOL = "thread", "process"  # process: for CPU-bound tasks
POOLS = (THREAD_POOL, PROCESS_POOL)
LIST_LIMIT = 50  # jobs or dead letters a listing shows unless told (CLI --limit, API ?limit)
IDLE_WAIT_SECONDS = 1.0  # an idle worker claims its shards at least this often: lease sweeps

N = TypeVar("N", int, float)


def _env_float(name: str, default: float, high: float = MAX_SECONDS) -> float:
    """A duration > 0, in any form a spec takes (model.durations: 30, 30s, 15m, PT1H); its
    range is checked with every other setting's (Settings)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return parse_seconds(raw, name, low_open=True, high=high)


def _env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "a whole number")


def _env_number(name: str, default: N, parse: Callable[[str], N], what: str) -> N:
    """The variable parsed; its range is checked with every other setting's (Settings)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError:
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None


@dataclass(frozen=True)
class Bounds:
    """The sane range of a numeric setting: outside it (nan, inf, 1e-9, a few digits too
    many) a value would kill a worker later or fail every task, so it is refused at once."""

    low: float
    high: float
    what: str  # what the value counts, for the error
    whole: bool = False  # an int, not a float

    def check(self, name: str, value: object) -> None:
        """ValueError naming the setting, its variable and the value, if out of bounds."""
        sane = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (isinstance(value, int) or not self.whole)
            and self.low <= value <= self.high  # false for nan too
        )
        if not sane:
            raise ValueError(
                f"{name} ({env_name(name)}) must be {self.what} from {_plain(self.low)} "
                f"to {_plain(self.high)}, got {value!r}"
            )


# Durations are kept in whole milliseconds (leases, expiries) and a worker heartbeats every
# third of a lease: below 10 ms they round to nothing or spin. Above a year they are typos
# (and past what a thread wait and a Redis expiry take), as in a spec.
SECONDS = Bounds(0.01, MAX_SECONDS, "a number of seconds")
MAX_SHARDS = 16_384  # Redis Cluster's hash slots: more shards could not be spread over them
MAX_EVENTS_KEPT = 1_000_000_000  # more events than the memory of any Redis holds: a typo
MAX_RESULT_BYTES = 512 * 1024 * 1024  # the largest string Redis stores
# The databases an archive may be in (storage/archive/engine.py).
ARCHIVE_SCHEMES = ("sqlite:///", "postgresql://", "postgres://", "postgresql+psycopg://")
# The archive may keep jobs for years (an audit trail), unlike Redis.
MAX_ARCHIVE_RETENTION_SECONDS = 100 * MAX_SECONDS
MAX_NOTIFY_ATTEMPTS = 100  # each retry waits twice as long, up to 10 min: 100 span most of a day
# Every numeric field of Settings has its bounds here (a test fails a new one without them).
BOUNDS = {
    "lease_seconds": SECONDS,
    "worker_timeout_seconds": SECONDS,
    "recovery_interval_seconds": SECONDS,
    "retention_seconds": SECONDS,
    "unknown_task_timeout_seconds": SECONDS,
    "shards": Bounds(1, MAX_SHARDS, "a whole number", whole=True),
    "segment_lease_seconds": SECONDS,
    "idle_wait_seconds": SECONDS,
    "events_maxlen": Bounds(0, MAX_EVENTS_KEPT, "a whole number", whole=True),
    "result_max_bytes": Bounds(1, MAX_RESULT_BYTES, "a number of bytes", whole=True),
    "notify_timeout_seconds": SECONDS,
    "notify_attempts": Bounds(1, MAX_NOTIFY_ATTEMPTS, "a whole number", whole=True),
    "notify_backoff_seconds": SECONDS,
    "archive_hot_seconds": SECONDS,
    "archive_retention_seconds": Bounds(0.01, MAX_ARCHIVE_RETENTION_SECONDS, "a number of seconds"),
    "archive_result_max_bytes": Bounds(0, MAX_RESULT_BYTES, "a number of bytes", whole=True),
    "archive_stale_seconds": SECONDS,
}


def _plain(bound: float) -> str:
    """A bound as a person writes it: 31622400, 0.01."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


# The settings whose variable is not JOBCENTER_ and their name in capitals.
ENV_NAMES = {"archive_retention_seconds": "JOBCENTER_ARCHIVE_RETENTION"}


def env_name(setting: str) -> str:
    """The environment variable a setting is read from."""
    return ENV_NAMES.get(setting) or f"JOBCENTER_{setting.upper()}"


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
    # The hosts, addresses and networks (each with an optional :port) a webhook may go to
    # beyond public addresses: loopback, private and link-local ones are refused otherwise
    # (jobcenter/model/webhook_targets.py). A string is split at commas.
    webhook_allow: tuple[str, ...] = ()
    # The archive (storage/archive): finished jobs go to this SQL database (sqlite:///PATH or
    # postgresql://...); Redis then keeps them `archive_hot_seconds` after the archive
    # confirmed them, the archive `archive_retention_seconds`. A task's result over
    # `archive_result_max_bytes` is archived as its size alone. A job waiting this long for
    # its archive step is archived by the recovery pass (its archiver died, or the database
    # was down). None: no archive, finished jobs live `retention_seconds` in Redis as before.
    archive_url: str | None = field(default=None, repr=False)
    archive_hot_seconds: float = 3600.0
    archive_retention_seconds: float = 180 * 24 * 3600.0
    archive_result_max_bytes: int = 64 * 1024
    archive_stale_seconds: float = 120.0

    def __post_init__(self) -> None:
        # both end up inside every key name and hash tag
        check_name(self.namespace, "the namespace")
        for name, bounds in BOUNDS.items():
            bounds.check(name, getattr(self, name))
        if self.durability not in DURABILITY_MODES:
            raise ValueError(
                f"durability (JOBCENTER_DURABILITY) must be one of "
                f"{', '.join(DURABILITY_MODES)}, got {self.durability!r}"
            )
        allow: Any = self.webhook_allow  # a string too, as the variable has it
        entries = allow.split(",") if isinstance(allow, str) else allow
        object.__setattr__(self, "webhook_allow", tuple(e.strip() for e in entries if e.strip()))
        parse_allow(self.webhook_allow)  # a ValueError names a bad entry
        if self.archive_url and not self.archive_url.startswith(ARCHIVE_SCHEMES):
            raise ValueError(
                f"archive_url (JOBCENTER_ARCHIVE_URL) must be sqlite:///PATH or "
                f"postgresql://USER@HOST/DATABASE, got {redacted_url(self.archive_url)!r}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from JOBCENTER_* variables, then `overrides` (None values are ignored);
        a variable unset or empty keeps the field's default."""
        values: dict[str, Any] = {
            "redis_url": os.environ.get("JOBCENTER_REDIS_URL") or DEFAULT_REDIS_URL,
            "namespace": os.environ.get("JOBCENTER_NAMESPACE") or DEFAULT_NAMESPACE,
            "lease_seconds": _env_float("JOBCENTER_LEASE_SECONDS", cls.lease_seconds),
            "worker_timeout_seconds": _env_float(
                "JOBCENTER_WORKER_TIMEOUT_SECONDS", cls.worker_timeout_seconds
            ),
            "recovery_interval_seconds": _env_float(
                "JOBCENTER_RECOVERY_INTERVAL_SECONDS", cls.recovery_interval_seconds
            ),
            "retention_seconds": _env_float("JOBCENTER_RETENTION_SECONDS", cls.retention_seconds),
            "unknown_task_timeout_seconds": _env_float(
                "JOBCENTER_UNKNOWN_TASK_TIMEOUT_SECONDS", cls.unknown_task_timeout_seconds
            ),
            "shards": _env_int("JOBCENTER_SHARDS", cls.shards),
            "segment_lease_seconds": _env_float(
                "JOBCENTER_SEGMENT_LEASE_SECONDS", cls.segment_lease_seconds
            ),
            "idle_wait_seconds": _env_float("JOBCENTER_IDLE_WAIT_SECONDS", cls.idle_wait_seconds),
            "durability": os.environ.get("JOBCENTER_DURABILITY") or cls.durability,
            "events_maxlen": _env_int("JOBCENTER_EVENTS_MAXLEN", cls.events_maxlen),
            "metrics": _env_switch("JOBCENTER_METRICS", cls.metrics),
            "result_max_bytes": _env_int("JOBCENTER_RESULT_MAX_BYTES", cls.result_max_bytes),
            "webhook_secret": os.environ.get("JOBCENTER_WEBHOOK_SECRET") or None,
            "notify_timeout_seconds": _env_float(
                "JOBCENTER_NOTIFY_TIMEOUT_SECONDS", cls.notify_timeout_seconds
            ),
            "notify_attempts": _env_int("JOBCENTER_NOTIFY_ATTEMPTS", cls.notify_attempts),
            "notify_backoff_seconds": _env_float(
                "JOBCENTER_NOTIFY_BACKOFF_SECONDS", cls.notify_backoff_seconds
            ),
            "webhook_allow": os.environ.get("JOBCENTER_WEBHOOK_ALLOW", ""),
            "archive_url": os.environ.get("JOBCENTER_ARCHIVE_URL") or None,
            "archive_hot_seconds": _env_float(
                "JOBCENTER_ARCHIVE_HOT_SECONDS", cls.archive_hot_seconds
            ),
            "archive_retention_seconds": _env_float(
                "JOBCENTER_ARCHIVE_RETENTION",
                cls.archive_retention_seconds,
                MAX_ARCHIVE_RETENTION_SECONDS,
            ),
            "archive_result_max_bytes": _env_int(
                "JOBCENTER_ARCHIVE_RESULT_MAX_BYTES", cls.archive_result_max_bytes
            ),
            "archive_stale_seconds": _env_float(
                "JOBCENTER_ARCHIVE_STALE_SECONDS", cls.archive_stale_seconds
            ),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def segment_lease_ms(self) -> int:
        return int(self.segment_lease_seconds * 1000)
