"""`make bench BENCH_ARGS=--only=floor`: how close jobcenter runs to what this machine allows.

The floor is the least any Python worker of jobcenter's shape can do per task: worker processes
of task threads, each task's body the bench's own (one redis-py RPUSH, as bench.noop), and per
task one Lua call that marks it done and hands the thread its next task (the one round trip
jobcenter's complete.lua makes, with nothing else in it: no lease, attempt, event, history,
estimate, priority order or dependency count). Measured in one run on one Redis, interleaved
with jobcenter's W1 and W3 on the same workers x slots:

  flat   20,000 independent tasks     tasks/s    (jobcenter: W1)
  chain  a chain of 1,000             ms a hop   (jobcenter: W3)

with the CPU microseconds per task of the workers and of redis-server. A target above the
floor's figure cannot be met by any worker of this shape on this machine, whatever it skips.

The bare workers are this module run on its own: `python -m bench.floor REDIS_URL THREADS`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from .common import chain_spec, flat_spec, process_cpu_seconds, run_one_job
from .report import cpu_per_task

FLAT = 20_000
CHAIN = 1_000
QUEUE = "floor:queue"  # the bare workers' ready tasks
DONE = "floor:done"  # task -> done: the bare scheduler's one record per task
RAN = "floor:ran"  # the bodies' RPUSHes (as bench.noop's list), counted to end a run
STOP = b"stop"  # one per thread ends a bare worker
POP_TIMEOUT_S = 1  # an idle bare thread's BLPOP
# Done, then the next task: the chain's child ("c<i+1>") when there is one, else the
# queue's head. ARGV: the task, the chain's length.
STEP = """
redis.call('HSET', KEYS[1], ARGV[1], 'done')
local hop = tonumber(string.match(ARGV[1], '^c(%d+)$'))
if hop and hop + 1 < tonumber(ARGV[2]) then return 'c' .. (hop + 1) end
return redis.call('LPOP', KEYS[2])
"""


def bare_worker(url: str, threads: int) -> None:
    """A worker process of the floor: `threads` threads, each running tasks until STOP."""
    r = redis.Redis.from_url(url, max_connections=4096)  # one connection per thread
    step = r.register_script(STEP)

    def serve() -> None:
        task = None
        while True:
            if task is None:
                popped = r.blpop([QUEUE], timeout=POP_TIMEOUT_S)
                task = popped[1] if popped else None
                continue
            if task == STOP:
                return
            r.rpush(RAN, task)  # the body, as bench.noop's
            task = step(keys=[DONE, QUEUE], args=[task, CHAIN])

    pool = [threading.Thread(target=serve) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def _bare_run(
    bench: Any, workers: list[subprocess.Popen[bytes]], first: list[str], expect: int
) -> dict:
    """Push `first`, wait until `expect` bodies ran; the run's figures."""
    r = bench.redis
    r.delete(RAN, DONE)
    cpu0 = [process_cpu_seconds(w.pid) for w in workers], process_cpu_seconds(bench.server.pid)
    w0 = time.perf_counter()
    for k in range(0, len(first), 1000):
        r.rpush(QUEUE, *first[k : k + 1000])
    while r.llen(RAN) < expect:
        time.sleep(0.001)
    wall = time.perf_counter() - w0
    workers_cpu = sum(process_cpu_seconds(w.pid) for w in workers) - sum(cpu0[0])
    redis_cpu = process_cpu_seconds(bench.server.pid) - cpu0[1]
    ran = r.lrange(RAN, 0, -1)
    problems = []
    if len(ran) != expect or len(set(ran)) != expect:
        problems.append(f"bare run: {len(ran)} bodies ran, {len(set(ran))} distinct, of {expect}")
    if expect == CHAIN and ran != [f"c{i}".encode() for i in range(CHAIN)]:
        problems.append("bare chain: the bodies ran out of order")
    return {
        "tasks_per_s": expect / wall,
        "hop_ms": wall * 1000 / expect,
        "worker_us": workers_cpu * 1e6 / expect,
        "redis_us": redis_cpu * 1e6 / expect,
        "problems": problems,
    }


def _jobcenter_run(bench: Any, spec: dict[str, Any]) -> dict:
    before = bench.cpu_seconds()
    run = run_one_job(bench, spec)
    after = bench.cpu_seconds()
    run["cpu_s"] = {k: after[k] - before[k] for k in before}
    cpu = cpu_per_task(run)
    return {
        **run,
        "worker_us": cpu["worker_cpu_us_per_task"],
        "redis_us": cpu["redis_cpu_us_per_task"],
    }


def run(bench: Any, workers: int, repeats: int, say: Callable[[str], None]) -> list[dict]:
    """Each shape, bare and jobcenter, interleaved `repeats` times; one row per shape."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "bench.floor", bench.server.url, str(bench.concurrency)]
    bare = [subprocess.Popen(command, env=env) for _ in range(workers)]
    shapes = {
        "flat": (
            f"flat {FLAT:,} tasks: tasks/s",
            lambda: _bare_run(bench, bare, [f"f{i}" for i in range(FLAT)], FLAT),
            lambda: _jobcenter_run(bench, flat_spec(FLAT)),
            "tasks_per_s",
        ),
        "chain": (
            f"chain of {CHAIN:,}: ms a hop",
            lambda: _bare_run(bench, bare, ["c0"], CHAIN),
            lambda: _jobcenter_run(bench, chain_spec(CHAIN)),
            "hop_ms",
        ),
    }
    runs: dict[str, dict[str, list[dict]]] = {k: {"bare": [], "jobcenter": []} for k in shapes}
    try:
        _jobcenter_run(bench, flat_spec(200))  # warm-up: scripts loaded, pools filled
        _bare_run(bench, bare, [f"f{i}" for i in range(FLAT)], FLAT)
        for rep in range(repeats):
            for key, (label, bare_fn, jc_fn, figure) in shapes.items():
                for system, fn in (("bare", bare_fn), ("jobcenter", jc_fn)):
                    one = fn()
                    runs[key][system].append(one)
                    say(
                        f"  run {rep + 1} {key} {system}: {one[figure]:,.3f} {label.split(': ')[1]}"
                        f" (CPU per task: workers {one['worker_us']:.0f} us, redis"
                        f" {one['redis_us']:.0f} us)"
                    )
    finally:
        bench.redis.rpush(QUEUE, *[STOP] * (workers * bench.concurrency))
        for w in bare:
            w.wait()
        bench.redis.delete(QUEUE, DONE, RAN)
    rows = []
    for key, (label, _, _, figure) in shapes.items():
        med = {
            system: {
                k: statistics.median(one[k] for one in runs[key][system])
                for k in (figure, "worker_us", "redis_us")
            }
            for system in ("bare", "jobcenter")
        }
        bare_fig, jc_fig = med["bare"][figure], med["jobcenter"][figure]
        rows.append(
            {
                "shape": label,
                "figure": figure,
                "bare": med["bare"],
                "jobcenter": med["jobcenter"],
                # speed of jobcenter over the floor's (a hop: the shorter, the faster)
                "of_floor": jc_fig / bare_fig if figure == "tasks_per_s" else bare_fig / jc_fig,
                "problems": [p for s in runs[key].values() for one in s for p in one["problems"]],
            }
        )
    return rows


def render(rows: list[dict], slots: str) -> str:
    head = f"{'shape (' + slots + ')':34s} {'floor':>22s} {'jobcenter':>22s} {'of floor':>9s}"
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = []
        for system in ("bare", "jobcenter"):
            m = row[system]
            cells.append(
                f"{m[row['figure']]:,.{0 if row['figure'] == 'tasks_per_s' else 3}f} "
                f"({m['worker_us']:.0f}/{m['redis_us']:.0f} us)"
            )
        lines.append(f"{row['shape']:34s} {cells[0]:>22s} {cells[1]:>22s} {row['of_floor']:9.2f}")
    lines.append("(in brackets: CPU microseconds per task of the workers / of redis-server)")
    return "\n".join(lines)


if __name__ == "__main__":
    bare_worker(sys.argv[1], int(sys.argv[2]))
