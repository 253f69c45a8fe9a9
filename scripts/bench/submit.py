"""The submit path alone: client CPU, Redis CPU and rate, no worker running.

On a private redis-server (appendonly, everysec, as `make bench`), it measures:

  many    `client.submit_many` of --jobs one-task jobs (W5's submit half): jobs/s, client
          CPU us per job (this process, the sender thread included), Redis us per job
          (INFO commandstats: the submit scripts, and the whole server's CPU)
  single  `client.submit` of the example 9-task job, --singles times one after another
          (durability as configured: fsynced by default): round trip p50/p99, client CPU
          and Redis us per submit

  bound   `client.submit` of a job of INLINE_SPLIT_MAX tasks (the largest its submit script
          splits itself), flat and as a chain: Redis ms per call, against the 50 ms a Lua
          call may take under load

  split   a job of --split-tasks independent tasks split by a leader (in this process):
          Redis us per task of its publish_tasks and queue_roots calls (commandstats)

`--profile` prints the client's cProfile of each phase (top functions by own time).
`--repeats` runs each phase that often (interleaved) and prints every run: the machine is
noisy, compare figures within one run. Not part of the test suite.

    PYTHONPATH=scripts .venv/bin/python -m bench.submit --jobs 20000 --repeats 3
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis

from jobcenter import Client
from jobcenter.runtime.leader import Leader
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.server.embedded import RedisServer

from .common import seed000_spec

NAMESPACE = "bench-submit"


def one_task_spec() -> dict[str, Any]:
    return {"name": "bench-flat-1", "tasks": [{"id": "t0", "task": "bench.noop"}]}


class RedisMeter:
    """Redis's work between two reads: us per EVALSHA'd script (commandstats counts the
    script's own time, the commands it calls included) and the server's CPU."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def read(self) -> dict[str, float]:
        stats: dict[str, Any] = self.r.info("commandstats")
        out = {name[len("cmdstat_") :]: float(v["usec"]) for name, v in stats.items()}
        cpu: dict[str, Any] = self.r.info("cpu")
        out["@cpu"] = (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6
        return out

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def measured(
    meter: RedisMeter, profile: bool, run: Callable[[], Any]
) -> tuple[float, float, dict[str, float], str]:
    """(wall s, client CPU s, Redis usec deltas, profile text) of run()."""
    profiler = cProfile.Profile() if profile else None
    before = meter.read()
    c0, w0 = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    run()
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    spent = RedisMeter.delta(before, meter.read())
    text = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        text = out.getvalue()
    return wall, cpu, spent, text


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def redis_line(spent: dict[str, float], per: int) -> str:
    scripts = {k: v for k, v in spent.items() if k not in ("@cpu", "info")}
    parts = [f"{k} {v / per:.1f}" for k, v in sorted(scripts.items(), key=lambda kv: -kv[1])]
    return f"Redis CPU {spent.get('@cpu', 0) / per:.1f} us (commandstats: {', '.join(parts)})"


def run_many(client: Client, meter: RedisMeter, jobs: int, profile: bool) -> str:
    spec = one_task_spec()
    wall, cpu, spent, text = measured(meter, profile, lambda: client.submit_many([spec] * jobs))
    client.store.redis.flushdb()
    line = (
        f"many   {jobs / wall:8.0f} jobs/s  client CPU {cpu * 1e6 / jobs:6.1f} us/job  "
        + redis_line(spent, jobs)
    )
    return line + ("\n" + text if text else "")


def run_single(client: Client, meter: RedisMeter, count: int, profile: bool) -> str:
    spec = seed000_spec()
    trips: list[float] = []

    def submits() -> None:
        for _ in range(count):
            t0 = time.perf_counter()
            client.submit(spec)
            trips.append((time.perf_counter() - t0) * 1000)

    _, cpu, spent, text = measured(meter, profile, submits)
    client.store.redis.flushdb()
    line = (
        f"single p50 {pct(trips, 0.5):.2f} ms p99 {pct(trips, 0.99):.2f} ms  "
        f"client CPU {cpu * 1e6 / count:6.1f} us/submit  {redis_line(spent, count)}"
    )
    return line + ("\n" + text if text else "")


def run_bound(client: Client, meter: RedisMeter) -> str:
    n = INLINE_SPLIT_MAX
    flat = {
        "name": "bound-flat",
        "tasks": [{"id": f"t{k}", "task": "bench.noop"} for k in range(n)],
    }
    chain = {"name": "bound-chain", "tasks": [
        {"id": f"t{k}", "task": "bench.noop", **({"depends_on": [f"t{k - 1}"]} if k else {})}
        for k in range(n)
    ]}  # fmt: skip
    out = []
    for name, spec in (("flat", flat), ("chain", chain)):
        _, _, spent, _ = measured(meter, False, lambda spec=spec: client.submit(spec))
        cpu, call = spent.get("@cpu", 0) / 1000, spent.get("evalsha", 0) / 1000
        out.append(f"{name} {call:.1f} ms (Redis CPU {cpu:.1f} ms)")
    client.store.redis.flushdb()
    return f"bound  one submit call of {n} tasks: " + ", ".join(out)


def run_split(client: Client, meter: RedisMeter, n: int) -> str:
    store = client.store
    job_id = client.submit({"name": "split", "tasks": [
        {"id": f"t{k}", "task": "bench.noop"} for k in range(n)
    ]})  # fmt: skip
    spent: dict[str, float] = {}

    def metered(name: str) -> Callable[..., Any]:
        step = getattr(store, name)

        def call(*args: Any) -> Any:
            before = meter.read()
            try:
                return step(*args)
            finally:
                used = RedisMeter.delta(before, meter.read()).get("evalsha", 0.0)
                spent[name] = spent.get(name, 0.0) + used

        return call

    for name in ("publish_tasks", "queue_roots"):  # this store only: the leader's two steps
        setattr(store, name, metered(name))
    try:
        Leader(store, "bench-leader").split(job_id)
    finally:
        for name in ("publish_tasks", "queue_roots"):
            delattr(store, name)
    store.redis.flushdb()
    per_task = ", ".join(f"{name} {us / n:.1f}" for name, us in sorted(spent.items()))
    return f"split  {n} tasks, Redis us per task: {per_task}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="one-task jobs per many run")
    parser.add_argument("--singles", type=int, default=200, help="9-task submits per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split-tasks", type=int, default=20_000, help="tasks of the split job")
    parser.add_argument("--only", choices=["many", "single", "bound", "split"], default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile the client")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jobcenter-bench-submit-") as tmp:
        server = RedisServer(tmp).start()
        try:
            client = Client.from_url(server.url, NAMESPACE)
            meter = RedisMeter(redis.Redis.from_url(server.url))
            client.submit(one_task_spec())  # scripts loaded, durability probed
            client.store.redis.flushdb()
            for _ in range(args.repeats):
                if args.only in (None, "many"):
                    print(run_many(client, meter, args.jobs, args.profile), flush=True)
                if args.only in (None, "single"):
                    print(run_single(client, meter, args.singles, args.profile), flush=True)
                if args.only in (None, "bound"):
                    print(run_bound(client, meter), flush=True)
                if args.only in (None, "split"):
                    print(run_split(client, meter, args.split_tasks), flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
