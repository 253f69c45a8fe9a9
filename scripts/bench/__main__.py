"""`make bench`: throughput and latency of jobcenter on a private Redis with two workers.

Starts a redis-server of its own (jobcenter.storage.server.embedded.RedisServer) and two
`jobcenter worker bench.tasks` processes (each with its rq recovery child), then measures:

  W1  one job of 20,000 independent tasks               tasks/s
  W1-async  the same with a coroutine-function task (an asyncio RPUSH), run on each worker's
      event loop: what I/O-bound tasks cost without a thread each
  W1-pool  the same with every task in a pool of 64 slots  tasks/s (what the claim-time
      pool check and the slot give-back cost; 64 of the workers' slots run at once)
  W1-observe  W1 with events and metrics off, events on, both on (workers restarted for
      each, interleaved): what the event stream and the metric counters cost
  W2  root -> 5,000 -> join                             wall time
  W3  a chain of 1,000                                  ms per hop
  W4  200 jobs of the example 9-task DAG                wall time
  W5  20,000 one-task jobs submitted through the client jobs/s; then 200 example-DAG jobs
      submitted one at a time: client.submit's round trip p50/p99
  wake 200 one-task jobs submitted one at a time to idle workers: ready -> started
      (the idle wake-up path: each owned shard's listener, then a claim)
  W1r W1 with each task returning 100 bytes (stored results): tasks/s, against W1's
  map a 10,000-way map: the time from its source's success to its last instance written
  big a 100,000-task DAG: submit + split time, and the failure of its root cascading to
      every descendant (fan and chain shapes); the longest Lua call from SLOWLOG for both
  big-follow  `submit --wait` following a 100,000-task job: the longest Redis command it sent
      and the longest of anyone meanwhile (SLOWLOG at threshold 0)
  the Redis ceiling (EVALSHA of a trivial script, one per round trip and pipelined) and
  Redis bytes per live task (a published 20,000-task job no worker serves)

Beside each workload's figures it prints the CPU microseconds per task of the workers (their
threads, from /proc utime + stime) and of redis-server: far steadier than wall time on a
shared machine, so compare those between runs.

Each task RPUSHes its fencing token to a per-job bench list (bench/tasks.py): the
count proves every task ran once, the order proves no dependency order was broken; task
times from `client.status` are checked against their parents' too. Workload times come
from Redis TIME (submit to the job's finished_at) and the wall clock. Every workload runs
--repeats times (interleaved); the table shows medians. The machine is noisy: compare
figures within one run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from jobcenter import Client
from jobcenter.storage.server.embedded import RedisServer

from . import api, archive, burst, cluster, floor, memory, order
from .common import (
    BURST_SLOTS,
    CEILING_SETTLE_SECONDS,
    DEFAULT_SLOTS,
    FLOOR_SLOTS,
    FULL,
    NAMESPACE,
    QUICK,
    REPEAT_BUDGET_SECONDS,
    SLOWLOG_LEN,
    SLOWLOG_LEN_PROFILE,
    Bench,
    Sizes,
    flat_spec,
    redis_load,
    run_one_job,
    script_shas,
)
from .report import cpu_per_task, fmt, machine, median_of, render, table_rows
from .workloads import measure_memory, redis_ceiling, workloads


@contextlib.contextmanager
def bench_on_own_server(workers: int, slots: int) -> Iterator[Bench]:
    """A Bench on a redis-server of its own, `workers` workers of `slots` slots started;
    all stopped after (what the one-topic benches `--only=order|memory|...` run on)."""
    with tempfile.TemporaryDirectory(prefix="jobcenter-bench-") as tmp:
        server = RedisServer(tmp).start()
        r = redis.Redis.from_url(server.url)
        bench = Bench(server, r, Client.from_url(server.url, NAMESPACE), Path(tmp), slots)
        try:
            bench.start_workers(workers)
            yield bench
        finally:
            bench.stop_workers()
            server.stop()


def order_bench(slots: int, say: Callable[[str], None]) -> int:
    """`--only=order`: each task-order rule on each shape of bench/order.py."""
    say(f"task order: one worker x {slots} slots, durations in units of {order.UNIT_S} s")
    with bench_on_own_server(1, slots) as bench:
        rows = order.run(bench, slots, say)
    say()
    say(order.render(rows))
    return 0


def memory_bench(jobs: int, workers: int, concurrency: int, say: Callable[[str], None]) -> int:
    """`--only=memory`: the Redis bytes a finished task keeps (bench/memory.py)."""
    say(f"memory of finished jobs: {workers} workers x {concurrency} threads")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = memory.run(bench, jobs, say)
    say()
    say(memory.render(rows))
    return 0


def floor_bench(workers: int, concurrency: int, repeats: int, say: Callable[[str], None]) -> int:
    """`--only=floor`: jobcenter beside the least any Python worker can do (bench/floor.py)."""
    say(f"the floor beside jobcenter: {workers} workers x {concurrency} slots, {repeats} runs")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = floor.run(bench, workers, repeats, say)
    say()
    say(floor.render(rows, f"{workers} x {concurrency}"))
    problems = [p for row in rows for p in row["problems"]]
    for p in problems[:10]:
        say("PROBLEM: " + p)
    return 1 if problems else 0


def burst_bench(workers: int, concurrency: int, repeats: int, say: Callable[[str], None]) -> int:
    """`--only=burst`: ready -> started of tasks that had a free slot (bench/burst.py)."""
    say(f"bursts and small deep DAGs: {workers} workers x {concurrency} slots, {repeats} runs")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = burst.run(bench, workers * concurrency, repeats, say)
    say()
    say(burst.render(rows))
    problems = [p for row in rows for p in row["problems"]]
    for p in problems[:10]:
        say("PROBLEM: " + p)
    return 1 if problems else 0


def api_bench(
    workers: int, concurrency: int, quick: bool, repeats: int, say: Callable[[str], None]
) -> int:
    """`--only=api`: HTTP submits and the worker protocol's tasks/s (bench/api.py)."""
    say(f"the HTTP API: `jobcenter serve`, native {workers} workers x {concurrency} slots, "
        f"{repeats} runs")  # fmt: skip
    with bench_on_own_server(workers, concurrency) as bench:
        rows = api.run(bench, quick, repeats, say)
    say()
    say(api.render(rows))
    problems = [p for row in rows for p in row["problems"]]
    for p in problems[:10]:
        say("PROBLEM: " + p)
    if not problems:
        say("checks: every submit answered 201 with a new id; every task succeeded, run once")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run (smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per workload (median)")
    parser.add_argument("--big-repeats", type=int, default=1, help="runs of each big-DAG test")
    parser.add_argument(
        "--repeat-budget",
        type=float,
        default=REPEAT_BUDGET_SECONDS,
        metavar="SECONDS",
        help="a workload whose first run took longer than this runs only once",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated: W1,W1-async,W1-pool,W1-observe,W2,W3,W4,W5,wake,big-fan,big-chain,"
        "big-follow; or `order` alone: the task-order rules on DAGs where order matters (one "
        "worker, --concurrency slots); "
        "or `cluster` alone: W1 and W4 on one Redis and on a local 3-master Redis Cluster; "
        "or `memory` alone: the Redis bytes a finished task keeps (--seed-jobs jobs per shape); "
        "or `burst` alone: ready -> started of tasks released in bursts while a slot was free "
        "(2 workers x 32 slots unless --concurrency says); "
        "or `api` alone: HTTP submits/s (16 clients) and tasks/s through the worker protocol "
        "(reference executor, a Python client) beside the native worker; "
        "or `floor` alone: W1 and W3 beside a bare Python worker doing nothing but the task's "
        "body and one Lua call a task (2 workers x 8 slots unless --concurrency says); "
        "or `archive` alone: the SQL archive in SQLite and PostgreSQL (list's first page over "
        "--archive-rows jobs, write throughput, Redis memory with an hour hot)",
    )
    parser.add_argument(
        "--archive-rows",
        type=int,
        default=None,
        help="--only=archive: archived jobs the list is timed over (10,000,000; quick 100,000)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--concurrency", type=int, default=None, help="task threads per worker (default 64)"
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="write the results as JSON to PATH ('-': stdout, table to stderr)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="py-spy each worker and log every Redis call per workload, into DIR (py-spy's "
        "samples per second: BENCH_SPY_RATE, default 200)",
    )
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="with --profile: py-spy samples only the thread holding the GIL (Python CPU time)",
    )
    for name, default in vars(FULL).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=None,
            help=f"size (default {default:,}; quick {getattr(QUICK, name):,})",
        )
    args = parser.parse_args()
    burst_slots = args.concurrency or BURST_SLOTS  # the bursts are measured at 2 x 32
    floor_slots = args.concurrency or FLOOR_SLOTS
    args.concurrency = args.concurrency or DEFAULT_SLOTS
    base = QUICK if args.quick else FULL
    sizes = Sizes(**{k: getattr(args, k) or v for k, v in vars(base).items()})
    repeats = args.repeats or (1 if args.quick else 3)
    out = sys.stderr if args.json == "-" else sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    if args.only == "burst":
        return burst_bench(args.workers, burst_slots, repeats, say)
    if args.only == "api":
        return api_bench(args.workers, args.concurrency, args.quick, repeats, say)
    if args.only == "floor":
        return floor_bench(args.workers, floor_slots, repeats, say)
    if args.only == "order":
        return order_bench(args.concurrency, say)
    if args.only == "memory":
        return memory_bench(sizes.seed_jobs, args.workers, args.concurrency, say)
    if args.only == "archive":
        return archive.main(args.quick, args.archive_rows, say)
    if args.only == "cluster":
        return cluster.main(sizes, repeats, args.workers, args.concurrency, say)
    chosen = workloads(sizes)
    if args.only:
        wanted = [k.strip() for k in args.only.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in chosen]
        if unknown:
            parser.error(f"unknown workload(s) {unknown}; choose from {list(chosen)}")
        chosen = {k: v for k, v in chosen.items() if k in wanted}

    results: dict[str, Any] = {
        "sizes": vars(sizes),
        "repeats": repeats,
        "quick": args.quick,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "machine_start": machine(),
        "workloads": {},
    }
    say(
        f"jobcenter bench{' (quick sizes)' if args.quick else ''}: {repeats} run(s) per workload, "
        f"{args.workers} workers x {args.concurrency} threads"
    )
    say(
        f"machine at start: load {results['machine_start']['loadavg']}, "
        f"nproc {results['machine_start']['nproc']}"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jobcenter-bench-") as tmp:
        server = RedisServer(tmp).start()
        r = redis.Redis.from_url(server.url)
        r.config_set("slowlog-max-len", SLOWLOG_LEN_PROFILE if args.profile else SLOWLOG_LEN)
        bench = Bench(
            server,
            r,
            Client.from_url(server.url, NAMESPACE),
            Path(tmp),
            args.concurrency,
            sha_names=script_shas(),
            profile_dir=args.profile,
            profile_gil=args.profile_gil,
        )
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            say(f"PROFILING into {args.profile}: MONITOR and py-spy slow everything down; these")
            say("figures are for finding where time goes, not for the targets")
        info = r.info("server")
        results["redis"] = {
            "version": info["redis_version"],
            "binary": server.binary,
            "appendonly": r.config_get("appendonly").get("appendonly"),
        }
        say(
            f"redis {info['redis_version']} at {server.url} (appendonly "
            f"{results['redis']['appendonly']}), data in {tmp}"
        )
        try:
            bench.start_workers(args.workers)
            say(f"workers: pids {', '.join(str(w.pid) for w in bench.workers)}")
            run_one_job(bench, flat_spec(200))  # warm-up: scripts loaded, pools filled
            time.sleep(CEILING_SETTLE_SECONDS)
            ceilings = [redis_ceiling(bench, sizes.ceiling)]
            say(
                f"redis ceiling: {ceilings[0]['single_per_s']:,.0f} EVALSHA/s one per round trip,"
                f" {ceilings[0]['pipelined_per_s']:,.0f}/s pipelined"
            )
            results["memory"] = measure_memory(bench, sizes.memory)
            say(f"memory: {results['memory']['bytes_per_task']:,.0f} bytes per live task")
            runs: dict[str, list[dict[str, Any]]] = {k: [] for k in chosen}
            for rep in range(repeats):
                for key, (label, fn) in chosen.items():
                    if key.startswith("big") and rep >= args.big_repeats:
                        continue
                    if rep and runs[key][0]["wall_s"] > args.repeat_budget:
                        continue  # one run of a slow workload: keeps the bench under 5 min
                    bench.check_workers()
                    stats_before = bench.commandstats()
                    cpu_before = bench.cpu_seconds()
                    bench.profile_start(f"{key}-{rep}")
                    run = fn(bench)
                    scripts = bench.profile_stop(f"{key}-{rep}")
                    run["redis_load"] = redis_load(
                        stats_before, bench.commandstats(), run["wall_s"]
                    )
                    cpu_after = bench.cpu_seconds()
                    run["cpu_s"] = {k: cpu_after[k] - cpu_before[k] for k in cpu_before}
                    run.update(cpu_per_task(run))
                    if scripts is not None:
                        run["redis_scripts"] = scripts
                    runs[key].append(run)
                    note = "; ".join(run["problems"][:3]) or "ok"
                    say(
                        f"  run {rep + 1} {key} {label}: {run.get('redis_s', run['wall_s']):.3f} s"
                        f" (CPU s: workers {run['cpu_s']['workers']:.2f}, redis "
                        f"{run['cpu_s']['redis']:.2f}, bench {run['cpu_s']['bench']:.2f}; "
                        f"{run['redis_load']['evalsha_calls']:,} EVALSHA at "
                        f"{fmt(run['redis_load']['evalsha_us_per_call'], ' us', 1)}, "
                        f"load {os.getloadavg()[0]:.1f}) {note}"
                    )
            for key, (label, _) in chosen.items():
                results["workloads"][key] = {
                    "label": label,
                    "runs": runs[key],
                    "median": median_of(runs[key]),
                }
            ceilings.append(redis_ceiling(bench, sizes.ceiling))
            results["redis_ceiling"] = {
                k: statistics.median(c[k] for c in ceilings) for k in ceilings[0]
            }
            results["redis_ceiling_runs"] = ceilings
        finally:
            bench.stop_workers()
            server.stop()
    results["machine_end"] = machine()
    results["elapsed_s"] = time.monotonic() - started
    say()
    if args.quick:
        say("quick sizes: the targets are for the full sizes; pass/fail here is only indicative")
    say(render(table_rows(results)))
    problems = [
        f"{k}: {p}" for k, v in results["workloads"].items() for p in v["median"]["problems"]
    ]
    say()
    if problems:
        say("PROBLEMS (a workload with problems fails):")
        for p in problems:
            say("  " + p)
    else:
        say("checks: every task ran exactly once; no dependency order broken")
    say(
        f"machine at end: load {results['machine_end']['loadavg']}, "
        f"nproc {results['machine_end']['nproc']}; bench took {results['elapsed_s']:.0f} s"
    )
    if args.json == "-":
        print(json.dumps(results, indent=2, default=str))
    elif args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        say(f"JSON written to {args.json}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
