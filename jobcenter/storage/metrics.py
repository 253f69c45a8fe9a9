"""The metric counters read back. The transitions keep them in each shard's metrics hash
(keys.metrics, count() and observe() in lua/_job.lua), and workers add the few only they can
see (`count`: attempts they had to stop); this module reads every shard's hash and sums
them. Nothing here scans: one HGETALL per shard, its size bounded by the labels (queues x
task names x states), not by the number of jobs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from .keyspace.schema import HISTOGRAM_BUCKETS_MS, MetricField
from .store import Store


@dataclass
class Histogram:
    """Observations (ms) per bucket (not cumulative: one count per bound of
    HISTOGRAM_BUCKETS_MS, then the rest), and their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_BUCKETS_MS) + 1))
    sum_ms: int = 0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus's buckets: (upper bound in seconds, observations <= it), '+Inf' last."""
        out, total = [], 0
        bounds = [str(ms / 1000) for ms in HISTOGRAM_BUCKETS_MS] + ["+Inf"]
        for bound, n in zip(bounds, self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


Labels = tuple[str, ...]


@dataclass
class Counters:
    """Every shard's counters, summed; each keyed by its labels' values."""

    finished: dict[Labels, int] = field(default_factory=dict)  # queue, task name, final state
    jobs: dict[Labels, int] = field(default_factory=dict)  # final state
    retries: dict[Labels, int] = field(default_factory=dict)  # queue, task name
    repairs: dict[Labels, int] = field(default_factory=dict)  # rule
    expired: dict[Labels, int] = field(default_factory=dict)  # outcome
    gate_waits: dict[Labels, int] = field(default_factory=dict)  # gate
    stopped: dict[Labels, int] = field(default_factory=dict)  # reason, runner
    stop_overdue: dict[Labels, int] = field(default_factory=dict)  # reason, runner
    unknown_attempts: dict[Labels, int] = field(default_factory=dict)  # report
    archived: dict[Labels, int] = field(default_factory=dict)  # no labels
    archive_failures: dict[Labels, int] = field(default_factory=dict)  # no labels
    wait: dict[Labels, Histogram] = field(default_factory=dict)  # queue
    run: dict[Labels, Histogram] = field(default_factory=dict)  # queue, task name


# Each counter: its field's prefix, its labels' count, where it goes.
COUNTERS = {
    MetricField.FINISHED: (3, "finished"),
    MetricField.JOBS: (1, "jobs"),
    MetricField.RETRIES: (2, "retries"),
    MetricField.REPAIRS: (1, "repairs"),
    MetricField.EXPIRED: (1, "expired"),
    MetricField.GATE_WAITS: (1, "gate_waits"),
    MetricField.STOPPED: (2, "stopped"),
    MetricField.STOP_OVERDUE: (2, "stop_overdue"),
    MetricField.UNKNOWN_ATTEMPTS: (1, "unknown_attempts"),
    MetricField.ARCHIVED: (0, "archived"),
    MetricField.ARCHIVE_FAILURES: (0, "archive_failures"),
}
# Each histogram: its buckets' prefix, its sum's prefix, its labels' count, where it goes.
HISTOGRAMS = (
    (MetricField.WAIT, MetricField.WAIT_SUM, 1, "wait"),
    (MetricField.RUN, MetricField.RUN_SUM, 2, "run"),
)


def count(store: Store, counts: Mapping[tuple[int, str], int]) -> None:
    """Add `counts` ((shard, field) -> n) to the shards' counters, in one round trip; nothing
    when the namespace counts no metrics (JOBCENTER_METRICS=0)."""
    if not store.settings.metrics or not counts:
        return
    pipe = store.redis.pipeline(transaction=False)
    for (shard, name), n in counts.items():
        pipe.hincrby(store.keys.metrics(shard), name, n)
    pipe.execute()


def read_counters(store: Store) -> Counters:
    """The counters of every shard, summed (one round trip)."""
    pipe = store.redis.pipeline(transaction=False)
    for shard in range(store.keys.shards):
        pipe.hgetall(store.keys.metrics(shard))
    totals: dict[str, int] = defaultdict(int)
    for raw in pipe.execute():
        for name, value in raw.items():
            totals[name.decode(errors="replace")] += int(value)
    counters = Counters()
    for name, value in totals.items():
        _add(counters, name.split("\t"), value)
    return counters


def _add(c: Counters, parts: list[str], value: int) -> None:
    kind, labels = parts[0], tuple(parts[1:])
    if kind in COUNTERS:
        width, attr = COUNTERS[MetricField(kind)]
        if len(labels) == width:
            getattr(c, attr)[labels] = value
        return
    for buckets, sums, width, attr in HISTOGRAMS:
        histograms: dict[Labels, Histogram] = getattr(c, attr)
        if kind == buckets and len(labels) == width + 1:
            _bucket(histograms.setdefault(labels[:-1], Histogram()), labels[-1], value)
        elif kind == sums and len(labels) == width:
            histograms.setdefault(labels, Histogram()).sum_ms = value


def _bucket(histogram: Histogram, bucket: str, value: int) -> None:
    """Lua numbers its buckets from 1."""
    index = int(bucket) - 1
    if 0 <= index < len(histogram.counts):
        histogram.counts[index] = value


def live_workers(store: Store) -> tuple[int, int]:
    """Workers registered, and those that heartbeated within the worker timeout."""
    keys = store.keys
    since = store.now_ms() - int(store.settings.worker_timeout_seconds * 1000)
    pipe = store.redis.pipeline(transaction=False)
    pipe.zcard(keys.workers())
    pipe.zcount(keys.workers(), since, "+inf")
    registered, alive = pipe.execute()
    return int(registered), int(alive)
