"""`make bench BENCH_ARGS=--only=memory`: the Redis bytes a finished task keeps.

Real workers run N jobs of the example DAG's shape (9 tasks), a batch with one failing task
each, and one job of 1,000 independent tasks, all kept for the default retention. Each
shape reports the bytes Redis keeps for data after minus before (MEMORY USAGE of every key,
plus the keyspace tables), per finished task: everything a finished job keeps (its keys, its
entries in the job indexes and the expiring zset, new learned estimates); and MEMORY USAGE
of one job's own keys. The bench's own per-job lists are deleted before the second reading.
The capacity table (docs/operations/capacity.md) is computed from the `bytes per finished
task` column.

Then the bytes a live task takes in a small job (the example DAG's 9 tasks, and one task): jobs
submitted to a queue no worker serves, so they stay queued, then cancelled and dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .common import IDLE_QUEUE, Bench, ran_key, seed000_spec

FINISH_TIMEOUT_S = 300.0  # every job of a shape ends within this, or the bench gives up
POLL_S = 0.05
TASKS_PER_DAY = 50_000_000  # the capacity the capacity table is about
RETENTION_DAYS = (1, 7)
FLAT_JOBS = 5  # jobs of 1,000 tasks: one alone is within the noise of the keyspace tables


def _failing_seed000() -> dict[str, Any]:
    """The example DAG with its second task failing for good: a failed job with a cascade."""
    spec = seed000_spec()
    spec["name"] = "bench-seed000-failing"
    spec["tasks"][1]["task"] = "bench.fail"
    return spec


def _flat(n: int) -> dict[str, Any]:
    return {
        "name": f"bench-flat-{n}",
        "tasks": [{"id": f"t{i}", "task": "bench.noop"} for i in range(n)],
    }


def _settled(bench: Bench, job_ids: list[str]) -> bool:
    """Every job finished and no leader step (compaction) of theirs left to do."""
    store = bench.client.store
    if bench.active_jobs():
        return False
    for shard in range(store.keys.shards):
        if bench.redis.zcard(store.keys.leader(shard)):
            return False
    pipe = bench.redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.exists(store.keys.job(job_id).frontier)
    return not any(pipe.execute())


def _kept_bytes(bench: Bench) -> int:
    """What Redis keeps for data: MEMORY USAGE of every key (exact: samples=0), plus the
    keyspace's own tables (MEMORY STATS). Allocator totals are no use here: client buffers
    and the Lua heap's garbage swing by megabytes between two readings."""
    total = 0
    for key in bench.redis.scan_iter(count=10_000):
        total += int(bench.redis.memory_usage(key, samples=0) or 0)
    for name, value in bench.redis.memory_stats().items():
        if name.startswith("db.") and isinstance(value, dict):
            total += sum(int(v) for k, v in value.items() if k.startswith("overhead.hashtable"))
    return total


def _key_usage(bench: Bench, job_id: str) -> dict[str, int]:
    jk = bench.client.store.keys.job(job_id)
    names = {"job hash": jk.job, "tasks hash": jk.tasks, "history": jk.history}
    packed = getattr(jk, "packed", None)
    if packed is not None:
        names["packed record"] = packed
    return {
        label: int(bench.redis.memory_usage(key, samples=0) or 0) for label, key in names.items()
    }


def measure(bench: Bench, spec: dict[str, Any], count: int) -> dict[str, Any]:
    """Run `count` jobs of `spec` to their end; the memory they keep, per finished task."""
    tasks = len(spec["tasks"]) * count
    before = _kept_bytes(bench)
    job_ids = bench.client.submit_many([spec] * count)
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while not _settled(bench, job_ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{spec['name']}: jobs not finished in {FINISH_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)
    bench.redis.delete(*[ran_key(j) for j in job_ids])
    after = _kept_bytes(bench)
    states = {bench.job_fields(j, "state")[0] for j in job_ids}
    usage = _key_usage(bench, job_ids[0])
    n = len(spec["tasks"])
    return {
        "shape": spec["name"],
        "jobs": count,
        "tasks": tasks,
        "states": sorted(s or "gone" for s in states),
        "bytes_per_task": (after - before) / tasks,
        "key_bytes_per_task": {k: v / n for k, v in usage.items()},
    }


def measure_live(bench: Bench, spec: dict[str, Any], count: int) -> dict[str, Any]:
    """Submit `count` jobs of `spec` to a queue no worker serves: the memory they take while
    live (queued), per task; then they are cancelled and dropped."""
    spec = {**spec, "queue": IDLE_QUEUE}
    tasks = len(spec["tasks"]) * count
    before = _kept_bytes(bench)
    job_ids = bench.client.submit_many([spec] * count)
    after = _kept_bytes(bench)
    usage = _key_usage(bench, job_ids[0])
    for job_id in job_ids:
        bench.client.cancel(job_id)
    bench.purge(job_ids)
    n = len(spec["tasks"])
    return {
        "shape": spec["name"],
        "jobs": count,
        "bytes_per_task": (after - before) / tasks,
        "key_bytes_per_task": {k: v / n for k, v in usage.items()},
    }


def capacity(bytes_per_task: float) -> dict[int, float]:
    """GiB of Redis memory that TASKS_PER_DAY finished tasks take, per retention in days."""
    return {days: bytes_per_task * TASKS_PER_DAY * days / 2**30 for days in RETENTION_DAYS}


def run(bench: Bench, jobs: int, say: Callable[[str], None]) -> list[dict[str, Any]]:
    measure(bench, seed000_spec(), 20)  # warm-up: scripts loaded, estimates hash created
    rows = []
    for spec, count in (
        (seed000_spec(), jobs),
        (_failing_seed000(), jobs),
        (_flat(1_000), FLAT_JOBS),
    ):
        row = measure(bench, spec, count)
        rows.append(row)
        keys = ", ".join(f"{k} {v:,.0f}" for k, v in row["key_bytes_per_task"].items())
        say(
            f"  {row['shape']} x {count} ({', '.join(row['states'])}): "
            f"{row['bytes_per_task']:,.0f} B per finished task (one job's keys per task: {keys})"
        )
    for spec in (seed000_spec(), _flat(1)):
        live = measure_live(bench, spec, jobs)
        keys = ", ".join(f"{k} {v:,.0f}" for k, v in live["key_bytes_per_task"].items())
        say(
            f"  live {live['shape']} x {jobs}: {live['bytes_per_task']:,.0f} B per live task "
            f"(one job's keys per task: {keys})"
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| shape | bytes per finished task | 50M tasks/day, 1 day | 7 days |",
        "|---|---|---|---|",
    ]
    for row in rows:
        gib = capacity(row["bytes_per_task"])
        lines.append(
            f"| {row['shape']} | {row['bytes_per_task']:,.0f} B | {gib[1]:,.1f} GiB "
            f"| {gib[7]:,.1f} GiB |"
        )
    return "\n".join(lines)
