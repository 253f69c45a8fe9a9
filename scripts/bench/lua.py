"""Redis CPU per task of the task path's Lua scripts (claim, start, complete): a micro-bench.

No workers: this process plays one worker through the Store API on a private Redis, so
every script call is the one a worker would make, and Redis's commandstats (EVALSHA usec)
give what Redis spent per task. Cases:

  flat B=n   one job of N independent tasks: complete n, take the next n queued (one call)
  chain      a chain of N tasks: each completion releases its child and takes it (W3's hop)
  seed000    200 jobs of the example 9-task DAG, 16 slots, completions of up to two tasks
             of a job per call, claims for the free slots (W4's shape)
  seed000 x2 the same, each completion call carrying two jobs' tasks (as a worker's does
             when tasks of several jobs end together)

Events and metrics are on, as a worker's defaults. Prints per task: Redis's EVALSHA usec
(all script calls of the timed loop: claims, starts, completions, leader messages),
redis-server's CPU (user + system: steadier when the machine is busy, and it counts the
network and parsing too), script calls, and this process's CPU. Not part of the test
suite; the machine is noisy, so compare figures of one run, or the best of --repeats.

With --callgrind, redis-server runs under valgrind's callgrind and each case also prints
the instructions Redis executed per task in its timed loop (thousands, kIr): a count the
machine's load does not change, so it compares two versions where times cannot (slow: use
a few hundred tasks, e.g. --tasks 300 --jobs 30 --repeats 1).

    PYTHONPATH=scripts .venv/bin/python -m bench.lua [--tasks N] [--batches 1,8,32] [--repeats 3]
                                          [--callgrind]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jobcenter.config import Settings
from jobcenter.model.spec import spec_from_any
from jobcenter.runtime.leader import Leader
from jobcenter.storage.lua import ALL_SCRIPTS
from jobcenter.storage.server.connection import connect
from jobcenter.storage.server.embedded import BINARY_ENV_VAR, RedisServer, find_redis_server
from jobcenter.storage.store import StartedTask, Store

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "bench-lua"
QUEUES = ["default"]


def flat(n: int) -> dict[str, Any]:
    return {"name": "lua-flat", "tasks": [{"id": f"t{i}", "task": "x.noop"} for i in range(n)]}


def chain(n: int) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "c0", "task": "x.noop"}]
    tasks += [{"id": f"c{i}", "task": "x.noop", "depends_on": [f"c{i - 1}"]} for i in range(1, n)]
    return {"name": "lua-chain", "tasks": tasks}


def seed000() -> dict[str, Any]:
    spec = yaml.safe_load((ROOT / "examples" / "seed000.yaml").read_text())
    tasks = [
        {"id": t["id"], "task": "x.noop", "depends_on": t.get("depends_on", [])}
        for t in spec["tasks"]
    ]
    return {"name": "lua-seed000", "tasks": tasks}


def lead(store: Store) -> None:
    """Run the leader messages due now (a big job's split, compactions)."""
    leader = Leader(store, "bench-lua-leader")
    while True:
        messages = store.claim("bench-lua-leader", [], max_tasks=0, max_leader=64).leader
        if not messages:
            return
        for kind, job_id in messages:
            leader.handle(kind, job_id)


def evalsha(store: Store) -> tuple[float, int, float]:
    """Script calls' usec and count so far (EVALSHA, and FCALL on a server with functions),
    and redis-server's CPU seconds (user + system): the steadier figure on a busy machine,
    where a call's usec counts time it was preempted."""
    stats = store.redis.info("commandstats")
    calls = [stats.get(f"cmdstat_{c}", {"usec": 0, "calls": 0}) for c in ("evalsha", "fcall")]
    cpu = store.redis.info("cpu")
    return (
        sum(c["usec"] for c in calls),
        sum(c["calls"] for c in calls),
        cpu["used_cpu_user"] + cpu["used_cpu_sys"],
    )


def run_batches(store: Store, batch: int) -> int:
    """Claim `batch`, then complete what is held `batch` at a time, taking as many."""
    tasks = store.claim(HANDLER, QUEUES, max_tasks=batch, max_leader=0).tasks
    n = 0
    while tasks:
        done = [(t.job_id, t.index, t.token) for t in tasks]
        _, tasks = store.complete(HANDLER, done, take_queues=QUEUES, take_max=batch)
        n += len(done)
    return n


def run_slots(store: Store, slots: int, per_call: int = 2, jobs: int = 1) -> int:
    """A worker with `slots` slots whose completions come a job's one or two at a time:
    complete the oldest held tasks (at most `per_call` of each of `jobs` jobs: one call
    carries them all), taking as many as that frees; claim for the slots still free; leader
    messages in between."""
    held: list[StartedTask] = []
    n = 0
    while True:
        if len(held) < slots:
            res = store.claim(HANDLER, QUEUES, max_tasks=slots - len(held), max_leader=64)
            held += res.tasks
            leader = Leader(store, HANDLER)
            for kind, job_id in res.leader:
                leader.handle(kind, job_id)
            if not held and not res.leader:
                return n
        if not held:
            continue
        done = []
        for job in list(dict.fromkeys(t.job_id for t in held))[:jobs]:
            done += [t for t in held if t.job_id == job][:per_call]
        held = [t for t in held if t not in done]
        _, taken = store.complete(
            HANDLER,
            [(t.job_id, t.index, t.token) for t in done],
            take_queues=QUEUES,
            take_max=len(done),
        )
        held += taken
        n += len(done)


def callgrind_wrapper(directory: str) -> str:
    """An executable that runs redis-server under callgrind, counting nothing until asked
    (callgrind_control -i on), its dumps in `directory`."""
    real = find_redis_server()
    wrapper = Path(directory) / "redis-server-callgrind"
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && exec {real} "$@"\n'
        f"exec valgrind --tool=callgrind --instr-atstart=no -q "
        f'--callgrind-out-file={directory}/callgrind.%p {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


class Instructions:
    """Instructions redis-server executes between start() and stop() (callgrind), or None
    when it does not run under callgrind."""

    def __init__(self, store: Store, directory: str | None) -> None:
        self.directory = directory
        self.pid = str(store.redis.info("server")["process_id"])

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, self.pid], capture_output=True, check=True)

    def start(self) -> None:
        if self.directory:
            self.control("--zero")
            self.control("--instr=on")

    def stop(self) -> float | None:
        if not self.directory:
            return None
        self.control("--instr=off")
        self.control("--dump")
        dumps = sorted(Path(self.directory).glob(f"callgrind.{self.pid}.*"), key=os.path.getmtime)
        totals = [line for line in dumps[-1].read_text().splitlines() if line.startswith("totals:")]
        for dump in dumps:
            dump.unlink()
        return float(totals[-1].split()[1])


@dataclasses.dataclass
class Case:
    name: str
    specs: Callable[[], list[dict[str, Any]]]
    run: Callable[[Store], int]


def measure(
    url: str, settings: Settings, case: Case, run: int, callgrind: str | None
) -> dict[str, float]:
    namespace = f"lua{run}-{case.name.replace(' ', '').replace('=', '')}"
    store = Store(connect(url), dataclasses.replace(settings, namespace=namespace))
    for name in ALL_SCRIPTS:  # loaded before the timed loop: a first call's load is no task's
        store.scripts.load(name)
    for spec in case.specs():
        store.submit(spec_from_any(spec))
    lead(store)
    instructions = Instructions(store, callgrind)
    usec0, calls0, redis_cpu0 = evalsha(store)
    instructions.start()
    cpu0 = time.process_time()
    n = case.run(store)
    cpu = time.process_time() - cpu0
    counted = instructions.stop()
    usec, calls, redis_cpu = evalsha(store)
    return {
        "kir": 0.0 if counted is None else counted / n / 1000,
        "tasks": n,
        "redis_us": (usec - usec0) / n,
        "redis_cpu_us": (redis_cpu - redis_cpu0) * 1e6 / n,
        "calls": (calls - calls0) / n,
        "client_us": cpu * 1e6 / n,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000, help="tasks of the flat and chain jobs")
    parser.add_argument("--batches", default="1,8,32", help="flat job batch sizes")
    parser.add_argument("--jobs", type=int, default=200, help="example-DAG jobs")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case: the best is shown")
    parser.add_argument("--only", default="", help="comma-separated case names to run")
    parser.add_argument(
        "--callgrind", action="store_true", help="count Redis's instructions per task (valgrind)"
    )
    args = parser.parse_args()
    n = args.tasks
    cases = [
        Case(f"flat B={b}", lambda: [flat(n)], functools.partial(run_batches, batch=b))
        for b in map(int, args.batches.split(","))
    ]
    cases.append(Case("chain", lambda: [chain(n)], lambda s: run_batches(s, 1)))
    cases.append(Case("seed000", lambda: [seed000()] * args.jobs, lambda s: run_slots(s, 16)))
    cases.append(
        Case("seed000 x2", lambda: [seed000()] * args.jobs, lambda s: run_slots(s, 16, jobs=2))
    )
    if args.only:
        cases = [c for c in cases if c.name in args.only.split(",")]
    settings = Settings.from_env()
    with tempfile.TemporaryDirectory() as d:
        callgrind = d if args.callgrind else None
        if callgrind:
            os.environ[BINARY_ENV_VAR] = callgrind_wrapper(d)
        server = RedisServer(d, appendonly=False).start()
        try:
            print(
                f"{'case':12s} {'tasks':>6s} {'evalsha us/task':>16s} {'redis cpu us/task':>18s}"
                f" {'calls/task':>11s} {'client us/task':>15s}"
                + (f" {'redis kIr/task':>15s}" if callgrind else "")
            )
            for case in cases:
                runs = [
                    measure(server.url, settings, case, k, callgrind) for k in range(args.repeats)
                ]
                best = min(runs, key=lambda r: r["redis_cpu_us"])
                print(
                    f"{case.name:12s} {best['tasks']:6.0f} {best['redis_us']:16.1f}"
                    f" {best['redis_cpu_us']:18.1f} {best['calls']:11.2f}"
                    f" {best['client_us']:15.1f}" + (f" {best['kir']:15.1f}" if callgrind else ""),
                    flush=True,
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
