"""`make bench BENCH_ARGS=--only=cluster`: W1 and W4 on one Redis and on a local Redis
Cluster of 3 masters, in the same run, with the same workers and sizes.

On a machine of two cores the cluster cannot be faster (its three masters share the cores
the workers need): the point is that it works, and what the cluster costs (more round trips:
a claim per shard, calls split by node). The cluster runs without replicas here, which take
CPU without serving requests; the test tier runs it with one replica per master.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobcenter import Client
from jobcenter.storage.server.connection import connect
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.server.embedded_cluster import LocalCluster

from .common import (
    NAMESPACE,
    Bench,
    Sizes,
    flat_spec,
    run_one_job,
    seed000_spec,
)
from .report import fmt
from .tasks import ran_key
from .workloads import run_many_jobs

MASTERS = 3
CLUSTER_SHARDS = 12  # four hash tags per master: the slots of 12 tags spread over 3 masters
WARM_UP_TASKS = 200  # scripts loaded on every master, connection pools filled


@dataclass
class Endpoint:
    """What Bench needs of its server: the URL (and the pid, for CPU figures we skip)."""

    url: str
    pid: int | None = None


class ShardedBench(Bench):
    """A Bench whose workers use the namespace's shard count, and whose purge never sends
    one command for keys of several slots (a cluster refuses that)."""

    shards: int = 1

    def worker_env(self) -> dict[str, str]:
        return {**super().worker_env(), "JOBCENTER_SHARDS": str(self.shards)}

    def purge(self, job_ids: Any) -> None:
        keys = self.client.store.keys
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            jk = keys.job(job_id)
            for key in (jk.job, jk.tasks, jk.history, jk.frontier, ran_key(job_id)):
                pipe.unlink(key)
            pipe.zrem(keys.jobs(keys.job_shard(job_id)), job_id)
        pipe.execute()


def _measure(
    url: str, shards: int, data_dir: Path, sizes: Sizes, repeats: int, workers: int, slots: int
) -> dict[str, dict[str, Any]]:
    bench = ShardedBench(
        Endpoint(url),  # type: ignore[arg-type]
        connect(url),
        Client.from_url(url, NAMESPACE, shards=shards),
        data_dir,
        slots,
    )
    bench.shards = shards
    figures: dict[str, list[dict[str, Any]]] = {"W1": [], "W4": []}
    try:
        bench.start_workers(workers)
        run_one_job(bench, flat_spec(WARM_UP_TASKS))
        for _ in range(repeats):
            figures["W1"].append(run_one_job(bench, flat_spec(sizes.flat)))
            figures["W4"].append(
                run_many_jobs(bench, seed000_spec(), sizes.seed_jobs, full_check=True)
            )
    finally:
        bench.stop_workers()
    return {
        key: {
            "tasks_per_s": statistics.median(r["tasks_per_s"] for r in runs),
            "redis_s": statistics.median(r["redis_s"] for r in runs),
            "problems": [p for r in runs for p in r["problems"]],
        }
        for key, runs in figures.items()
    }


def run(
    sizes: Sizes, repeats: int, workers: int, slots: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Both set-ups one after the other; their figures and the cluster's cost."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jobcenter-bench-cluster-") as tmp:
        with RedisServer(Path(tmp) / "single") as server:
            say(f"one Redis at {server.url}, 1 shard")
            results["single"] = _measure(server.url, 1, Path(tmp), sizes, repeats, workers, slots)
        with LocalCluster(Path(tmp) / "cluster", MASTERS, replicas=0) as cluster:
            say(f"a cluster of {MASTERS} masters, {CLUSTER_SHARDS} shards")
            results["cluster"] = _measure(
                cluster.url, CLUSTER_SHARDS, Path(tmp), sizes, repeats, workers, slots
            )
    return results


def render_results(results: dict[str, Any], sizes: Sizes) -> str:
    single, cluster = results["single"], results["cluster"]
    rows = [("workload", "one Redis", f"cluster ({MASTERS} masters)", "cluster / one")]
    w1 = (single["W1"]["tasks_per_s"], cluster["W1"]["tasks_per_s"])
    rows.append(
        (f"W1 flat {sizes.flat:,} tasks (tasks/s)", fmt(w1[0]), fmt(w1[1]), f"{w1[1] / w1[0]:.2f}")
    )
    w4 = (single["W4"]["redis_s"], cluster["W4"]["redis_s"])
    rows.append(
        (
            f"W4 {sizes.seed_jobs} example-DAG jobs (s)",
            fmt(w4[0], " s", 3),
            fmt(w4[1], " s", 3),
            f"{w4[1] / w4[0]:.2f}",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def main(sizes: Sizes, repeats: int, workers: int, slots: int, say: Callable[[str], None]) -> int:
    say(f"cluster mode: W1 and W4, {workers} workers x {slots} threads, {repeats} run(s) each")
    results = run(sizes, repeats, workers, slots, say)
    say("")
    say(render_results(results, sizes))
    problems = [
        f"{setup} {key}: {p}"
        for setup, figures in results.items()
        for key, figure in figures.items()
        for p in figure["problems"]
    ]
    for p in problems[:20]:
        say("PROBLEM " + p)
    if not problems:
        say("checks: every task ran exactly once; no dependency order broken (both set-ups)")
    return 1 if problems else 0
