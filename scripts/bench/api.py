"""`make bench BENCH_ARGS=--only=api`: the HTTP API's throughput, on the bench's own Redis.

Starts `jobcenter serve` on a free loopback port (tokens of the submit and work scopes made
with jobcenter.storage.tokens), then measures, interleaved --repeats times:

  submit   HTTP submits/s of one-task jobs and of the example DAG, CLIENTS concurrent
           clients (threads, an httpx.Client each); the jobs go to a queue no worker serves,
           so only the submit is measured (they are cancelled and purged after)
  tasks/s  one job of N no-op tasks run through the worker protocol by the reference
           executor (examples/executor/executor.sh, a few processes, each task a command),
           by a Python client of the protocol (claim max=32, complete each, a few threads),
           and by the bench's native Python workers (bench.noop), on the same Redis

with the CPU microseconds per submit or task of the server, of redis-server and of whoever
runs the tasks. Every submit must answer 201 with a new id; every task must succeed on its
first attempt and be reported once (native: the bench list; protocol: the job's status and,
for the Python client, its own count of completions).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from jobcenter.storage import tokens

from .common import (
    IDLE_QUEUE,
    ROOT,
    Bench,
    flat_spec,
    job_timeout,
    process_cpu_seconds,
    run_one_job,
    seed000_spec,
    wait_job,
)
from .report import cpu_per_task

CLIENTS = 16  # concurrent HTTP submitters
ONE_TASK_JOBS = 2_000
SEED_JOBS = 500
PROTOCOL_TASKS = 2_000  # tasks of the job each runner runs
QUICK = {"one_task": 400, "seed": 100, "tasks": 400}
EXECUTORS = 4  # reference executor processes
PY_THREADS = 4  # threads of the Python protocol client
PY_CLAIM_MAX = 32
CLAIM_WAIT_S = 1  # an idle claim's long poll: short, so runners stop soon after a run
PROTOCOL_QUEUE = "bench-api"  # the native workers do not serve it
PROTOCOL_TASK = "bench.api_noop"  # the executor's command of that name does nothing
SERVER_START_SECONDS = 30.0
STOP_SECONDS = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and of its children it has waited for (a shell's commands)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Server:
    """`jobcenter serve` on a free loopback port of the bench's Redis, with its tokens."""

    def __init__(self, bench: Bench) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/api/v1"
        store = bench.client.store
        self.submit_token = tokens.create(store, "submit", name="bench submit")[0]
        self.work_token = tokens.create(store, "work", name="bench work")[0]
        command = [sys.executable, "-m", "jobcenter", "serve", "--port", str(self.port)]
        self.log = open(bench.data_dir / "serve.log", "ab")  # noqa: SIM115 (kept for the run)
        self.process = subprocess.Popen(
            command, env=bench.worker_env(), stdout=self.log, stderr=self.log
        )
        deadline = time.monotonic() + SERVER_START_SECONDS
        while True:
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"jobcenter serve did not start; see {self.log.name}")
            time.sleep(0.1)

    def cpu(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# -- submits ---------------------------------------------------------------------------


def submit_run(bench: Bench, server: Server, spec: dict[str, Any], count: int) -> dict:
    """`count` jobs of `spec` POSTed by CLIENTS threads; submits/s and CPU per submit."""
    spec = {**spec, "queue": IDLE_QUEUE}  # nobody runs them: the submit alone is measured
    headers = {"Authorization": f"Bearer {server.submit_token}"}
    ids: list[str] = []
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    per_client = [count // CLIENTS + (i < count % CLIENTS) for i in range(CLIENTS)]

    def client(n: int) -> None:
        with httpx.Client(base_url=server.base, headers=headers, timeout=60) as http:
            for _ in range(n):
                reply = http.post("/jobs", json=spec)
                with lock:
                    statuses[reply.status_code] += 1
                    if reply.status_code == 201:
                        ids.append(reply.json()["id"])

    cpu0 = server.cpu(), process_cpu_seconds(bench.server.pid or 0)
    w0 = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client, per_client))
    wall = time.perf_counter() - w0
    server_cpu, redis_cpu = server.cpu() - cpu0[0], process_cpu_seconds(bench.server.pid) - cpu0[1]
    problems = []
    if statuses[201] != count or len(set(ids)) != count:
        problems.append(f"{count} submits: answers {dict(statuses)}, {len(set(ids))} distinct ids")
    for job_id in ids:
        bench.client.cancel(job_id)
    bench.purge(ids)
    return {
        "per_s": count / wall,
        "server_us": server_cpu * 1e6 / count,
        "redis_us": redis_cpu * 1e6 / count,
        "runner_us": None,
        "problems": problems,
    }


# -- tasks through the worker protocol --------------------------------------------------


def protocol_job(bench: Bench, n: int) -> dict:
    """Submit one job of n protocol no-op tasks, wait for it; the checks of its status."""
    spec = flat_spec(n, queue=PROTOCOL_QUEUE, task=PROTOCOL_TASK)
    t0 = bench.now_ms() / 1000
    job_id = bench.client.submit(spec)
    state = wait_job(bench, job_id, job_timeout(n))
    status = bench.client.status(job_id)
    problems = []
    if state != "succeeded":
        problems.append(f"job {job_id} ended {state}")
    bad = {t: v["state"] for t, v in status["tasks"].items() if v["state"] != "succeeded"}
    if bad or len(status["tasks"]) != n:
        problems.append(
            f"job {job_id}: {len(bad)} of {n} tasks not succeeded: {Counter(bad.values())}"
        )
    retried = [t for t, v in status["tasks"].items() if v.get("attempt", 1) != 1]
    if retried:
        problems.append(f"job {job_id}: {len(retried)} tasks ran more than one attempt")
    seconds = status["finished_at"] - t0 if status.get("finished_at") else float("nan")
    bench.purge([job_id])
    return {"tasks": n, "seconds": seconds, "job_id": job_id, "problems": problems}


def timed(
    bench: Bench, server: Server, runner_cpu: Callable[[], float], run: Callable[[], dict]
) -> dict:
    """One protocol run with the CPU of the server, redis-server and the runner around it."""
    cpu0 = server.cpu(), process_cpu_seconds(bench.server.pid or 0), runner_cpu()
    one = run()
    n = one["tasks"]
    return {
        **one,
        "per_s": n / one["seconds"],
        "server_us": (server.cpu() - cpu0[0]) * 1e6 / n,
        "redis_us": (process_cpu_seconds(bench.server.pid or 0) - cpu0[1]) * 1e6 / n,
        "runner_us": (runner_cpu() - cpu0[2]) * 1e6 / n,
    }


def executor_run(bench: Bench, server: Server, tasks_dir: Path, n: int) -> dict:
    """The reference executor, EXECUTORS processes, started for the run and stopped after."""
    env = {
        **os.environ,
        "JOBCENTER_API": server.base,
        "JOBCENTER_TOKEN": server.work_token,
        "JOBCENTER_QUEUES": PROTOCOL_QUEUE,
        "JOBCENTER_WAIT": str(CLAIM_WAIT_S),
    }
    script = str(ROOT / "examples" / "executor" / "executor.sh")
    log = open(bench.data_dir / "executor.log", "ab")  # noqa: SIM115 (closed below)
    shells = [
        subprocess.Popen(["sh", script, str(tasks_dir)], env=env, stdout=log, stderr=log)
        for _ in range(EXECUTORS)
    ]
    try:
        return timed(
            bench,
            server,
            lambda: sum(tree_cpu_seconds(s.pid) for s in shells),
            lambda: protocol_job(bench, n),
        )
    finally:
        for s in shells:
            s.terminate()  # it finishes its claim (CLAIM_WAIT_S at most), then exits
        for s in shells:
            try:
                s.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()
        log.close()


def python_client_run(bench: Bench, server: Server, n: int) -> dict:
    """PY_THREADS threads, each an httpx.Client: claim up to PY_CLAIM_MAX, complete each."""
    stopping = threading.Event()
    done: Counter[tuple[str, str]] = Counter()
    firsts: list[bool] = []
    lock = threading.Lock()
    claim = {
        "queues": [PROTOCOL_QUEUE],
        "tasks": [PROTOCOL_TASK],
        "max": PY_CLAIM_MAX,
        "wait": CLAIM_WAIT_S,
    }
    headers = {"Authorization": f"Bearer {server.work_token}"}

    errors: list[str] = []

    def serve() -> None:
        try:
            work()
        except httpx.HTTPError as exc:  # reported with the run's problems
            errors.append(f"python client: {exc!r}")

    def work() -> None:
        with httpx.Client(base_url=server.base, headers=headers, timeout=60) as http:
            body = dict(claim)
            while not stopping.is_set():
                reply = http.post("/worker/claim", json=body).raise_for_status().json()
                body["worker"] = reply["worker"]
                for a in reply["attempts"]:
                    http.post(
                        f"/worker/attempts/{a['token']}/complete", json={"result": None}
                    ).raise_for_status()
                    with lock:
                        done[a["job_id"], a["task_id"]] += 1
                        firsts.append(a["attempt"] == 1)

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(PY_THREADS)]
    for t in threads:
        t.start()
    try:
        one = timed(
            bench,
            server,
            lambda: process_cpu_seconds(os.getpid()),  # the client's threads (and the poll)
            lambda: protocol_job(bench, n),
        )
    finally:
        stopping.set()
        for t in threads:
            t.join(STOP_SECONDS)
    one["problems"] += errors[:3]
    mine = [k for k in done if k[0] == one["job_id"]]
    if len(mine) != n or any(done[k] != 1 for k in mine) or not all(firsts):
        one["problems"].append(
            f"python client: {len(mine)} of {n} tasks completed, "
            f"{sum(done[k] > 1 for k in mine)} more than once"
        )
    return one


def native_run(bench: Bench, n: int) -> dict:
    """The bench's own Python workers running bench.noop (run_one_job checks its list)."""
    before = bench.cpu_seconds()
    run = run_one_job(bench, flat_spec(n))
    after = bench.cpu_seconds()
    run["cpu_s"] = {k: after[k] - before[k] for k in before}
    cpu = cpu_per_task(run)
    return {
        "per_s": run["tasks_per_s"],
        "server_us": None,
        "redis_us": cpu["redis_cpu_us_per_task"],
        "runner_us": cpu["worker_cpu_us_per_task"],
        "problems": run["problems"],
    }


# -- the bench ---------------------------------------------------------------------------


def run(bench: Bench, quick: bool, repeats: int, say: Callable[[str], None]) -> list[dict]:
    """Every measurement interleaved `repeats` times; one row each (medians)."""
    sizes = (
        QUICK if quick else {"one_task": ONE_TASK_JOBS, "seed": SEED_JOBS, "tasks": PROTOCOL_TASKS}
    )
    n = sizes["tasks"]
    tasks_dir = bench.data_dir / "executor-tasks"
    tasks_dir.mkdir(exist_ok=True)
    command = tasks_dir / PROTOCOL_TASK
    command.write_text("#!/bin/sh\n# the bench's no-op: its attempt on stdin is ignored\n")
    command.chmod(0o755)
    server = Server(bench)
    one_task = flat_spec(1)
    seed = seed000_spec()
    shapes: dict[str, tuple[str, str, Callable[[], dict]]] = {
        "submit-one": (
            f"HTTP submit, one-task jobs ({sizes['one_task']:,}, {CLIENTS} clients)",
            "jobs/s",
            lambda: submit_run(bench, server, one_task, sizes["one_task"]),
        ),
        "submit-seed": (
            f"HTTP submit, example-DAG jobs ({sizes['seed']:,}, {CLIENTS} clients)",
            "jobs/s",
            lambda: submit_run(bench, server, seed, sizes["seed"]),
        ),
        "executor": (
            f"{n:,} tasks: reference executor (sh x {EXECUTORS})",
            "tasks/s",
            lambda: executor_run(bench, server, tasks_dir, n),
        ),
        "python-client": (
            f"{n:,} tasks: Python protocol client ({PY_THREADS} threads, max {PY_CLAIM_MAX})",
            "tasks/s",
            lambda: python_client_run(bench, server, n),
        ),
        "native": (
            f"{n:,} tasks: native Python workers (bench.noop)",
            "tasks/s",
            lambda: native_run(bench, n),
        ),
    }
    runs: dict[str, list[dict]] = {k: [] for k in shapes}
    try:
        submit_run(bench, server, one_task, CLIENTS)  # warm-up: connections, scripts
        for rep in range(repeats):
            for key, (_, unit, fn) in shapes.items():
                bench.check_workers()
                one = fn()
                runs[key].append(one)
                note = "; ".join(one["problems"][:3]) or "ok"
                say(f"  run {rep + 1} {key}: {one['per_s']:,.0f} {unit} {note}")
    finally:
        server.stop()
    rows = []
    for key, (label, unit, _) in shapes.items():
        med: dict[str, Any] = {}
        for figure in ("per_s", "server_us", "redis_us", "runner_us"):
            values = [r[figure] for r in runs[key] if r[figure] is not None]
            med[figure] = statistics.median(values) if values else None
        rows.append(
            {
                "label": label,
                "unit": unit,
                **med,
                "problems": [p for r in runs[key] for p in r["problems"]],
            }
        )
    return rows


def render(rows: list[dict]) -> str:
    def us(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    head = f"{'measurement':62s} {'per second':>16s} {'server':>7s} {'redis':>7s} {'runner':>7s}"
    lines = [head, "-" * len(head)]
    for row in rows:
        rate = f"{row['per_s']:,.0f} {row['unit']}"
        lines.append(
            f"{row['label']:62s} {rate:>16s} {us(row['server_us']):>7s} "
            f"{us(row['redis_us']):>7s} {us(row['runner_us']):>7s}"
        )
    lines.append(
        "(CPU microseconds per job or task of `jobcenter serve`, of redis-server, and of who "
        "ran the tasks: the executors' shells with their commands and curls, the bench process "
        "for the Python client, the workers' threads for the native run)"
    )
    return "\n".join(lines)
