"""/metrics in the Prometheus text format (prometheus_client): a collector that reads Redis at
scrape time. Counters and histograms are those the Lua transitions keep per shard
(storage/metrics.py), summed; gauges are short reads of the queues, leases, dead letters and
the worker registry. No scrape walks jobs or tasks."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobcenter.runtime.stopping import STOP_BOUND_SECONDS
from jobcenter.storage import limits, views
from jobcenter.storage.metrics import Histogram, Labels, live_workers, read_counters
from jobcenter.storage.store import Store

from .pages import client


class JobcenterCollector(Collector):
    """Every figure of one namespace, read when scraped."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        yield from self._counters()
        yield from self._gauges()

    def _counters(self) -> Iterator[Metric]:
        c = read_counters(self.store)
        yield _counter(
            "jobcenter_tasks_finished",
            "Tasks that ended, by queue, task name and final state.",
            ["queue", "task", "state"],
            c.finished,
        )
        yield _counter(
            "jobcenter_jobs_finished", "Jobs finalized, by final state.", ["state"], c.jobs
        )
        yield _counter(
            "jobcenter_task_retries",
            "Attempts that failed or timed out and will be retried.",
            ["queue", "task"],
            c.retries,
        )
        yield _counter(
            "jobcenter_recovery_repairs",
            "What recovery repaired, by rule (requeue, release, abandon, lease, resubmit_*).",
            ["rule"],
            c.repairs,
        )
        yield _counter(
            "jobcenter_lease_expiries",
            "Expired leases acted on, by outcome (requeued, timed_out, retried, failed, ...).",
            ["outcome"],
            c.expired,
        )
        yield _counter(
            "jobcenter_gate_waits",
            "Attempts sent back unused because a gate the task requires said no, by gate.",
            ["gate"],
            c.gate_waits,
        )
        yield _counter(
            "jobcenter_attempts_stopped",
            "Attempts a worker stopped before they returned, by reason (cancelled, taken_over, "
            "not_running, gone, timed_out) and runner (thread, async, process).",
            ["reason", "runner"],
            c.stopped,
        )
        yield _counter(
            "jobcenter_attempts_stop_overdue",
            f"Stopped attempts still running {STOP_BOUND_SECONDS:g} s after they were stopped (a "
            "thread that never looks, a coroutine that swallows its cancel), by reason and "
            "runner.",
            ["reason", "runner"],
            c.stop_overdue,
        )
        yield _counter(
            "jobcenter_unknown_attempts",
            "Reports refused because Redis does not know their attempt: it lost writes (a "
            "restart from an older snapshot, a failover to a replica that lagged), by report.",
            ["report"],
            c.unknown_attempts,
        )
        yield _counter("jobcenter_jobs_archived", "Jobs written to the archive.", [], c.archived)
        yield _counter(
            "jobcenter_archive_write_failures",
            "Archive writes that failed (the database down or refusing); the jobs wait in Redis.",
            [],
            c.archive_failures,
        )
        yield _histogram(
            "jobcenter_queue_wait_seconds",
            "From queued (for a retry: from its last attempt's end) to started.",
            ["queue"],
            c.wait,
        )
        yield _histogram(
            "jobcenter_task_run_seconds",
            "Run time of attempts that succeeded or failed.",
            ["queue", "task"],
            c.run,
        )

    def _gauges(self) -> Iterator[Metric]:
        q = views.queues(self.store)
        ready = GaugeMetricFamily(
            "jobcenter_queue_ready", "Tasks ready in a queue.", labels=["queue"]
        )
        retry = GaugeMetricFamily(
            "jobcenter_queue_retry_wait", "Tasks waiting out a retry backoff.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "jobcenter_queue_oldest_ready_seconds",
            "How long the longest-waiting next-in-line task of a queue has been ready.",
            labels=["queue"],
        )
        for queue in q.queues:
            ready.add_metric([queue.name], queue.ready)
            retry.add_metric([queue.name], queue.retry_wait)
            oldest.add_metric([queue.name], queue.head_wait or 0.0)
        yield from (ready, retry, oldest)
        yield GaugeMetricFamily(
            "jobcenter_tasks_running", "Attempts holding a lease.", value=q.running
        )
        yield GaugeMetricFamily(
            "jobcenter_dead_letters", "Tasks that failed for good, kept.", value=q.dead_letters
        )
        registered, alive = live_workers(self.store)
        yield GaugeMetricFamily(
            "jobcenter_workers_alive", "Workers heartbeating within the timeout.", value=alive
        )
        yield GaugeMetricFamily(
            "jobcenter_workers_registered", "Workers in the registry.", value=registered
        )
        yield from _pool_gauges(limits.pools(self.store))
        yield from _archive_gauges(self.store)


def _archive_gauges(store: Store) -> Iterator[Metric]:
    """The finished jobs waiting for the archive (JOBCENTER_ARCHIVE_URL): 0 without one."""
    backlog, oldest = store.archive_backlog()
    age = max(0.0, (store.now_ms() - oldest) / 1000) if oldest is not None else 0.0
    yield GaugeMetricFamily(
        "jobcenter_archive_backlog",
        "Finished jobs waiting for the archive (their keys do not expire until it has them).",
        value=backlog,
    )
    yield GaugeMetricFamily(
        "jobcenter_archive_backlog_oldest_seconds",
        "How long the oldest finished job waiting for the archive has waited.",
        value=age,
    )


def _pool_gauges(pools: list[limits.PoolView]) -> Iterator[Metric]:
    """Each pool's slots: in use, set (a pool tasks name but nobody set has none), and the
    tasks parked until one frees."""
    used = GaugeMetricFamily("jobcenter_pool_used", "Pool slots in use.", labels=["pool"])
    total = GaugeMetricFamily("jobcenter_pool_slots", "Pool slots set.", labels=["pool"])
    waiting = GaugeMetricFamily(
        "jobcenter_pool_waiting", "Tasks waiting for a slot of the pool.", labels=["pool"]
    )
    for pool in pools:
        used.add_metric([pool.name], pool.used)
        if pool.total is not None:
            total.add_metric([pool.name], pool.total)
        waiting.add_metric([pool.name], pool.waiting)
    yield from (used, total, waiting)


def _counter(
    name: str, doc: str, labels: list[str], values: dict[Labels, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


def _histogram(
    name: str,
    doc: str,
    labels: list[str],
    values: dict[Labels, Histogram],
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for key, h in sorted(values.items(), key=lambda item: item[0]):
        family.add_metric(
            list(key),
            buckets=h.cumulative(),
            sum_value=h.sum_ms / 1000,
        )
    return family


def exposition(store: Store) -> bytes:
    """The namespace's figures in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobcenterCollector(store))
    return generate_latest(registry)


def metrics(request: Request) -> Response:
    return Response(exposition(client(request).store), media_type=CONTENT_TYPE_LATEST)


PATH = "/metrics"
ROUTES = [Route(PATH, metrics)]
