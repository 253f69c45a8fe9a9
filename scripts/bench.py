"""`make bench`: throughput and latency of jobcenter on a private Redis with two workers.

Starts a redis-server of its own (jobcenter.storage.embedded.RedisServer) and two `jobcenter worker
bench_tasks` processes (each with its rq recovery child), then measures:

  W1  one job of 20,000 independent tasks               tasks/s
  W1-async  the same with a coroutine-function task (an asyncio RPUSH), run on each worker's
      event loop: what I/O-bound tasks cost without a thread each
  W1-pool  the same with every task in a pool of 64 slots  tasks/s (what the claim-time
      pool check and the slot give-back cost; 64 of the workers' slots run at once)
  W1-observe  W1 with events and metrics off, events on, both on (workers restarted for
      each, interleaved): what the event stream and the metric counters cost
  W2  root -> 5,000 -> join                             wall time
  W3  a chain of 1,000                                  ms per hop
  W4  200 jobs of the seed-000 9-task DAG               wall time
  W5  20,000 one-task jobs submitted through the client jobs/s; then 200 seed-000 jobs
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

Each task RPUSHes its fencing token to a per-job bench list (scripts/bench_tasks.py): the
count proves every task ran once, the order proves no dependency order was broken; task
times from `client.status` are checked against their parents' too. Workload times come
from Redis TIME (submit to the job's finished_at) and the wall clock. Every workload runs
--repeats times (interleaved); the table shows medians. The machine is noisy: compare
figures within one run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml
from bench_tasks import REDIS_URL_ENV, ran_key

from jobcenter import Client
from jobcenter.model.spec import parse_spec
from jobcenter.storage.embedded import RedisServer
from jobcenter.storage.lua import ALL_SCRIPTS, source
from jobcenter.storage.packed import decode as decode_record
from jobcenter.storage.schema import TaskField

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = Path(__file__).resolve().parent
NAMESPACE = "bench"
IDLE_QUEUE = "bench-idle"  # no worker serves it: published tasks stay live, unrun
TERMINAL = {"succeeded", "failed", "cancelled"}

POLL_SECONDS = 0.005  # job-state poll while one job runs: adds at most this to wall time
MANY_POLL_SECONDS = 0.01  # poll of the active-jobs count while many jobs run
COMPACTED_POLL = 200  # jobs whose packed marker one poll reads (wait_compacted)
WORKER_START_SECONDS = 30.0  # two workers register within this or the bench gives up
WORKER_STOP_SECONDS = 15.0  # a stopping worker gets this long before kill -9
JOB_TIMEOUT_MIN = 60.0  # a workload that has not finished by then is reported as failed
SLOWLOG_US = 1000  # SLOWLOG threshold during the big-DAG tests (1 ms)
SLOWLOG_LEN = 100_000  # entries kept: every call over 1 ms of a big-DAG test
# With --profile every command is logged, those run inside scripts too: room for a workload.
SLOWLOG_LEN_PROFILE = 1_000_000
LUA_CALL_TARGET_MS = 50.0
REPEAT_BUDGET_SECONDS = 20.0  # a workload slower than this is not repeated (bench < 5 min)
PIPELINE_BATCH = 1000  # EVALSHA per pipeline in the pipelined Redis ceiling
TRIVIAL_SCRIPT = "return 1"
CEILING_SETTLE_SECONDS = 2.0  # let worker start-up (imports, rq children) finish first
PUBLISH_SCRIPTS = {"submit", "publish_tasks", "queue_roots", "claim", "start"}
CASCADE_SCRIPTS = {"fail", "continue", "finalize", "complete"}
BENCH_COMMANDS = {"SLOWLOG", "CONFIG", "INFO"}  # the bench's own calls, not jobcenter's
DRAIN_SECONDS = 0.2  # SLOWLOG read and reset this often while every command is logged
DEFAULT_SLOTS = 64  # task threads per worker
BURST_SLOTS = 32  # `--only=burst`: the issue's 2 x 32 slots
FLOOR_SLOTS = 8  # `--only=floor`: the side-by-side's 2 x 8 slots
FOLLOWER_NAME = "jobcenter-bench-follow"  # the client name `submit --wait` runs under


# -- sizes, targets, peers --------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    flat: int = 20_000  # W1
    fan: int = 5_000  # W2 middle layer
    chain: int = 1_000  # W3
    seed_jobs: int = 200  # W4
    one_task_jobs: int = 20_000  # W5
    big: int = 100_000  # big DAG (tasks, the root included)
    memory: int = 20_000  # tasks of the memory probe job
    ceiling: int = 20_000  # EVALSHA calls per ceiling measurement
    wake: int = 200  # one-task jobs the wake-up workload submits one at a time
    map_elements: int = 10_000  # map: the largest list a map takes


FULL = Sizes()
QUICK = Sizes(2_000, 500, 100, 20, 2_000, 10_000, 2_000, 2_000, 2_000)
RESULT_BYTES = 100  # W1r: what each task returns
RESULT_COST_MAX = 0.15  # W1r may run at most this much slower than W1 (issue 11)


@dataclass(frozen=True)
class Target:
    op: str  # ">=" or "<"
    value: float
    text: str


TARGETS = {
    "W1": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W1-async": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W1-pool": Target(">=", 10_000, ">= 10,000 tasks/s"),
    "W2": Target("<", 0.5, "< 0.5 s"),
    "W3": Target("<", 0.5, "< 0.5 ms/hop"),
    "W4": Target("<", 0.3, "< 0.3 s"),
    "W5": Target(">=", 5_000, ">= 5,000 jobs/s"),
    "single_submit": Target("<", 2.0, "< 2 ms"),
    "big_submit": Target("<", 2.0, "< 2 s"),
    "lua_max": Target("<", LUA_CALL_TARGET_MS, "< 50 ms"),
}
PEERS = {
    "W1": "300 (RQ) - 2,600 (Dramatiq) tasks/s",
    "W1-async": "-",
    "W1-pool": "-",
    "W2": "8 - 19 s",
    "W3": "5 - 17 ms/hop",
    "W4": "1.8 - 8 s",
    "W5": "-",
    "ceiling_single": "~6,000/s",
    "ceiling_pipelined": "~76,000/s",
}


def text(value: bytes | str) -> str:
    """A Redis reply as text (binary fields, msgpack blobs, come back mangled, never fail)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def meets(target: Target, value: float | None) -> bool | None:
    if value is None:
        return None
    return value >= target.value if target.op == ">=" else value < target.value


# -- specs -----------------------------------------------------------------------------


def flat_spec(n: int, queue: str = "default", task: str = "bench.noop") -> dict[str, Any]:
    tasks = [{"id": f"t{i}", "task": task} for i in range(n)]
    return {"name": f"bench-flat-{n}", "queue": queue, "tasks": tasks}


POOL = "bench-pool"
POOL_SLOTS = 64  # W1-pool: fewer than the workers' 2 x 64 threads, so the pool is what limits


def pooled_flat(bench: Bench, n: int) -> dict[str, Any]:
    """W1's job with every task in a pool of POOL_SLOTS slots."""
    bench.client.set_pool(POOL, POOL_SLOTS)
    spec = flat_spec(n)
    for task in spec["tasks"]:
        task["pool"] = POOL
    return {**spec, "name": f"bench-pooled-{n}"}


def map_spec(n: int) -> dict[str, Any]:
    """A source returning n elements, a task mapped over them, a join reading their results."""
    return {
        "name": f"bench-map-{n}",
        "tasks": [
            {"id": "src", "task": "bench.elements", "args": [n]},
            {"id": "each", "task": "bench.noop_item", "map": {"item": "src"}},
            {
                "id": "join",
                "task": "bench.gather",
                "depends_on": ["each"],
                "inputs": {"parts": "each"},
            },
        ],
    }


def fan_spec(n: int, root_task: str = "bench.noop", join: bool = True) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "root", "task": root_task}]
    tasks += [{"id": f"m{i}", "task": "bench.noop", "depends_on": ["root"]} for i in range(n)]
    if join:
        tasks.append(
            {"id": "join", "task": "bench.noop", "depends_on": [f"m{i}" for i in range(n)]}
        )
    return {"name": f"bench-fan-{n}", "tasks": tasks}


def chain_spec(n: int, root_task: str = "bench.noop") -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "c0", "task": root_task}]
    tasks += [
        {"id": f"c{i}", "task": "bench.noop", "depends_on": [f"c{i - 1}"]} for i in range(1, n)
    ]
    return {"name": f"bench-chain-{n}", "tasks": tasks}


def seed000_spec() -> dict[str, Any]:
    """examples/seed000.yaml with every task turned into the bench no-op."""
    spec = yaml.safe_load((ROOT / "examples" / "seed000.yaml").read_text())
    tasks = [
        {"id": t["id"], "task": "bench.noop", "depends_on": t.get("depends_on", [])}
        for t in spec["tasks"]
    ]
    return {"name": "bench-seed000", "tasks": tasks}


def deps_of(spec: dict[str, Any]) -> dict[str, list[str]]:
    return {t["id"]: list(t.get("depends_on", [])) for t in spec["tasks"]}


def depth_of(deps: dict[str, list[str]]) -> int:
    """Tasks on the longest path (specs list parents first)."""
    level: dict[str, int] = {}
    for task_id, parents in deps.items():
        level[task_id] = 1 + max((level[p] for p in parents), default=0)
    return max(level.values())


# -- the environment: Redis, workers, helpers -------------------------------------------


@dataclass
class Bench:
    server: RedisServer
    redis: redis.Redis
    client: Client
    data_dir: Path
    concurrency: int
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    sha_names: dict[str, str] = field(default_factory=dict)
    profile_dir: Path | None = None
    spies: list[subprocess.Popen[bytes]] = field(default_factory=list)
    counter: CommandCounter | None = None
    profile_gil: bool = False  # py-spy samples only the thread holding the GIL (CPU)
    settings_env: dict[str, str] = field(default_factory=dict)  # JOBCENTER_* for the workers

    def now_ms(self) -> int:
        seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def job_key(self, job_id: str) -> str:
        return self.client.store.keys.job(job_id).job

    def job_fields(self, job_id: str, *names: str) -> list[str | None]:
        values = self.redis.hmget(self.job_key(job_id), names)
        return [None if v is None else text(v) for v in values]

    def active_jobs(self) -> int:
        store = self.client.store
        return sum(int(self.redis.zcard(store.keys.active(s))) for s in range(store.keys.shards))

    def purge(self, job_ids: Iterable[str]) -> None:
        """Drop finished bench jobs and their lists, so memory stays flat across workloads."""
        keys = self.client.store.keys
        pipe = self.redis.pipeline(transaction=False)
        for n, job_id in enumerate(job_ids, 1):
            jk = keys.job(job_id)
            pipe.unlink(jk.job, jk.tasks, jk.history, jk.frontier, jk.packed, ran_key(job_id))
            pipe.zrem(keys.jobs(keys.job_shard(job_id)), job_id)
            if n % 5000 == 0:
                pipe.execute()
        pipe.execute()

    def worker_env(self) -> dict[str, str]:
        python_path = os.pathsep.join(
            p for p in (str(SCRIPTS_DIR), os.environ.get("PYTHONPATH", "")) if p
        )
        return {
            **os.environ,
            "PYTHONPATH": python_path,
            "JOBCENTER_REDIS_URL": self.server.url,
            "JOBCENTER_NAMESPACE": NAMESPACE,
            REDIS_URL_ENV: self.server.url,
            **self.settings_env,
        }

    def restart_workers(self, settings_env: dict[str, str]) -> None:
        """Every worker stopped, then as many started with these JOBCENTER_* settings; the
        bench's client gets them too (submit runs scripts as well)."""
        count = len(self.workers)
        self.stop_workers()
        self.workers = []
        self.settings_env = dict(settings_env)
        overrides = {
            "events_maxlen": int(settings_env.get("JOBCENTER_EVENTS_MAXLEN", 100_000)),
            "metrics": settings_env.get("JOBCENTER_METRICS", "1") == "1",
        }
        self.client = Client.from_url(self.server.url, NAMESPACE, **overrides)
        self.start_workers(count)

    def start_workers(self, count: int) -> None:
        log = open(self.data_dir / "workers.log", "ab")  # noqa: SIM115 (kept for the run)
        command = [sys.executable, "-m", "jobcenter", "worker", "bench_tasks"]
        command += ["--concurrency", str(self.concurrency)]
        for _ in range(count):
            self.workers.append(
                subprocess.Popen(command, env=self.worker_env(), stdout=log, stderr=log)
            )
        workers_key = self.client.store.keys.workers()
        deadline = time.monotonic() + WORKER_START_SECONDS
        while self.redis.zcard(workers_key) < count:
            dead = [w.pid for w in self.workers if w.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f"workers did not start (exited: {dead}); last lines of "
                    f"{self.data_dir / 'workers.log'}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        path = self.data_dir / "workers.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def check_workers(self) -> None:
        dead = [(w.pid, w.returncode) for w in self.workers if w.poll() is not None]
        if dead:
            raise RuntimeError(f"worker(s) exited: {dead}\n{self.log_tail()}")

    def stop_workers(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(WORKER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()

    # -- profiling hooks (--profile) ----------------------------------------------------

    def profile_start(self, label: str) -> None:
        if self.profile_dir is None:
            return
        self.redis.config_set("slowlog-log-slower-than", 0)
        self.redis.slowlog_reset()
        spy = shutil.which("py-spy") or shutil.which(
            "py-spy", path=str(Path(sys.executable).parent)
        )
        for w in self.workers if spy else []:
            out = self.profile_dir / f"{label}-worker-{w.pid}.txt"
            command = [
                str(spy),
                "record",
                "--nonblocking",
                "--format",
                "raw",
                "-r",
                os.environ.get("BENCH_SPY_RATE", "200"),
                "--threads",
                *(["--gil"] if self.profile_gil else []),
            ]
            self.spies.append(
                subprocess.Popen(
                    [*command, "-o", str(out), "--pid", str(w.pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        if self.spies:
            time.sleep(0.5)  # py-spy attaches before the workload starts
        self.counter = CommandCounter(self.server.url, self.sha_names)
        self.counter.start()

    def profile_stop(self, label: str) -> dict[str, Any] | None:
        if self.profile_dir is None:
            return None
        for spy in self.spies:
            spy.send_signal(signal.SIGINT)
        for spy in self.spies:
            try:
                spy.wait(20)
            except subprocess.TimeoutExpired:
                spy.kill()
        self.spies = []
        assert self.counter is not None
        requests = self.counter.stop()
        per_script = self.slowlog_by_script()
        self.redis.config_set("slowlog-log-slower-than", 10_000)
        self.redis.slowlog_reset()
        profile = {"slowlog_by_command": per_script, **requests}
        (self.profile_dir / f"{label}-redis.json").write_text(json.dumps(profile, indent=2))
        return profile

    def slowlog_entries(self) -> list[dict[str, Any]]:
        entries = self.redis.slowlog_get(SLOWLOG_LEN_PROFILE if self.profile_dir else SLOWLOG_LEN)
        return [slowlog_entry(e, self.sha_names) for e in entries]

    def slowlog_by_script(self) -> dict[str, Any]:
        totals: dict[str, list[int]] = {}
        for e in self.slowlog_entries():
            totals.setdefault(e["name"], []).append(e["us"])
        return {
            name: {
                "calls": len(us),
                "total_ms": round(sum(us) / 1000, 1),
                "mean_us": round(sum(us) / len(us), 1),
                "max_us": max(us),
            }
            for name, us in sorted(totals.items(), key=lambda kv: -sum(kv[1]))
        }

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) so far of: the workers (their threads), their rq
        children, redis-server, and this bench process (the client side)."""
        workers = [w.pid for w in self.workers]
        children = [pid for pid, ppid in _processes() if ppid in workers]
        return {
            "workers": sum(process_cpu_seconds(pid) for pid in workers),
            "rq_children": sum(process_cpu_seconds(pid) for pid in children),
            "redis": process_cpu_seconds(self.server.pid or 0),
            "bench": process_cpu_seconds(os.getpid()),
        }

    def commandstats(self) -> dict[str, Any]:
        """Calls and time per command (commands run inside scripts count too), plus the
        Redis process's CPU seconds."""
        stats = self.redis.info("commandstats")
        out: dict[str, Any] = {}
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            out[name] = {"calls": int(value["calls"]), "usec": int(value["usec"])}
        cpu = self.redis.info("cpu")
        out["@cpu"] = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        return out


class CommandCounter(threading.Thread):
    """MONITOR (--profile only: it slows Redis) counting the requests clients send, by
    command (EVALSHA by script name), and the commands scripts run inside Redis."""

    def __init__(self, url: str, sha_names: dict[str, str]) -> None:
        super().__init__(name="bench-monitor", daemon=True)
        self.url = url
        self.sha_names = sha_names
        self.requests: Counter[str] = Counter()
        self.in_scripts: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.client = redis.Redis.from_url(url)
        self.monitor = self.client.monitor()
        self.monitor.__enter__()  # sends MONITOR and reads its OK

    def run(self) -> None:
        connection = self.monitor.connection
        while not self.stopping.is_set():
            try:
                line = connection.read_response()
            except (redis.ConnectionError, OSError):
                return
            if not isinstance(line, bytes):
                continue
            # b'1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "<sha>" ...' or [0 lua]
            _, _, rest = line.partition(b"[")
            client, _, command = rest.partition(b"] ")
            name = command[1 : command.find(b'"', 1)].decode(errors="replace").upper()
            if client.endswith(b"lua"):
                self.in_scripts[name] += 1
                continue
            if name == "EVALSHA":
                sha = command[11:51].decode(errors="replace")
                name = "EVALSHA " + self.sha_names.get(sha, sha[:8])
            self.requests[name] += 1

    def stop(self) -> dict[str, Any]:
        self.stopping.set()
        redis.Redis.from_url(self.url).ping()  # one more line, so run() sees the flag
        self.join(10)
        self.client.close()
        return {
            "requests": dict(self.requests.most_common()),
            "requests_total": sum(self.requests.values()),
            "commands_in_scripts": dict(self.in_scripts.most_common()),
        }


def slowlog_entry(e: dict[str, Any], sha_names: dict[str, str]) -> dict[str, Any]:
    """A SLOWLOG entry as the bench reports it: the command's name (a script's name for
    EVALSHA), its time, and the client name that sent it."""
    command = text(e["command"])
    parts = command.split()
    name = parts[0].upper() if parts else "?"
    if name == "EVALSHA" and len(parts) > 1:
        name = sha_names.get(parts[1], "evalsha:" + parts[1][:8])
    return {
        "name": name,
        "us": int(e["duration"]),
        "start": e["start_time"],
        "command": command[:100],
        "client": text(e.get("client_name") or b""),
    }


class SlowlogDrain(threading.Thread):
    """SLOWLOG with threshold 0 read and reset every DRAIN_SECONDS in one MULTI/EXEC, keeping
    the longest command of one named client and of everyone else: every command Redis runs is
    seen, also those a full log would have dropped."""

    def __init__(self, url: str, sha_names: dict[str, str], client_name: str) -> None:
        super().__init__(name="bench-slowlog", daemon=True)
        self.redis = redis.Redis.from_url(url)
        self.sha_names = sha_names
        self.client_name = client_name
        self.stopping = threading.Event()
        self.longest: dict[str, dict[str, Any] | None] = {"named": None, "others": None}
        self.named_us: dict[str, list[int]] = {}  # the named client's times, per command

    def run(self) -> None:
        self.redis.config_set("slowlog-log-slower-than", 0)
        self.redis.slowlog_reset()
        while not self.stopping.wait(DRAIN_SECONDS):
            self.drain()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.drain()
        self.redis.config_set("slowlog-log-slower-than", 10_000)
        self.redis.close()

    def drain(self) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.slowlog_get(SLOWLOG_LEN_PROFILE)
        pipe.slowlog_reset()
        entries, _ = pipe.execute()
        for raw in entries:
            e = slowlog_entry(raw, self.sha_names)
            if e["name"] in BENCH_COMMANDS | {"MULTI", "EXEC"}:
                continue
            who = "named" if e["client"] == self.client_name else "others"
            if who == "named":
                self.named_us.setdefault(e["name"], []).append(e["us"])
            best = self.longest[who]
            if best is None or e["us"] > best["us"]:
                self.longest[who] = e


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of a live process from /proc (0 where there is no /proc or no process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _processes() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.append((int(entry.name), ppid))
    return out


def script_shas() -> dict[str, str]:
    return {hashlib.sha1(source(n).encode()).hexdigest(): n for n in ALL_SCRIPTS}


# -- checks ----------------------------------------------------------------------------


def check_job(
    bench: Bench, job_id: str, spec: dict[str, Any], status: dict[str, Any]
) -> tuple[list[str], list[float]]:
    """Problems found in one finished, successful job, and its dispatch latencies (ms:
    from a task's last parent finishing, or from queueing for a root, to its start)."""
    problems: list[str] = []
    deps = deps_of(spec)
    if status["state"] != "succeeded":
        problems.append(f"job {job_id} ended {status['state']}")
    tasks = status["tasks"]
    bad = [t for t, v in tasks.items() if v["state"] != "succeeded"]
    if bad:
        states = Counter(tasks[t]["state"] for t in bad)
        error = next((tasks[t]["error"] for t in bad if tasks[t].get("error")), None)
        problems.append(
            f"job {job_id}: {len(bad)} tasks not succeeded ({dict(states)}), e.g. {bad[:3]}"
            + (f"; first error: {error.splitlines()[0][:300]}" if error else "")
        )
    entries = [text(e) for e in bench.redis.lrange(ran_key(job_id), 0, -1)]
    position: dict[str, int] = {}
    duplicates = 0
    for pos, entry in enumerate(entries):
        task_id = entry.split("|", 1)[0]
        if task_id in position:
            duplicates += 1
        position[task_id] = pos  # the last attempt is the one that completed
    missing = [t for t in deps if t not in position]
    if missing:
        problems.append(f"job {job_id}: {len(missing)} tasks never ran, e.g. {missing[:3]}")
    if duplicates:
        problems.append(f"job {job_id}: {duplicates} extra runs (a task ran more than once)")
    latencies: list[float] = []
    order_breaks = time_breaks = 0
    for task_id, parents in deps.items():
        mine = tasks.get(task_id, {})
        started = mine.get("started_at")
        if parents:
            if task_id in position and any(
                position.get(p, 1 << 62) > position[task_id] for p in parents
            ):
                order_breaks += 1
            parent_ends = [tasks.get(p, {}).get("finished_at") for p in parents]
            if started is None or None in parent_ends:
                continue
            ready = max(parent_ends)  # type: ignore[type-var]
            if started < ready:
                time_breaks += 1
        else:
            ready = mine.get("queued_at")
            if started is None or ready is None:
                continue
        latencies.append((started - ready) * 1000)
    if order_breaks:
        problems.append(f"job {job_id}: {order_breaks} tasks ran before a parent (bench list)")
    if time_breaks:
        problems.append(f"job {job_id}: {time_breaks} tasks started before a parent finished")
    return problems, latencies


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- waiting ---------------------------------------------------------------------------


def wait_job(bench: Bench, job_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = bench.job_fields(job_id, "state")[0]
        if state in TERMINAL:
            return state
        if time.monotonic() > deadline:
            bench.check_workers()
            raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f} s")
        time.sleep(POLL_SECONDS)


def wait_active_below(bench: Bench, baseline: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while bench.active_jobs() > baseline:
        if time.monotonic() > deadline:
            bench.check_workers()
            raise TimeoutError(
                f"{bench.active_jobs() - baseline} jobs unfinished after {timeout:.0f} s"
            )
        time.sleep(MANY_POLL_SECONDS)


def wait_compacted(bench: Bench, job_ids: Sequence[str], timeout: float) -> None:
    """Until a leader packed each finished job (compaction trails the jobs' ends: the
    workers' CPU figures of a run count it only when the run waits for it). Polls the
    first COMPACTED_POLL of those left (they are packed about in order), so the poll costs
    Redis little."""
    deadline = time.monotonic() + timeout
    left = list(job_ids)
    while left:
        head = left[:COMPACTED_POLL]
        pipe = bench.redis.pipeline(transaction=False)
        for job_id in head:
            pipe.hmget(bench.job_key(job_id), ["packed", "state"])
        waiting = [j for j, (p, state) in zip(head, pipe.execute(), strict=True) if state and not p]
        left = waiting + left[len(head) :]
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} finished jobs not compacted after {timeout:.0f} s")
        if waiting:
            time.sleep(MANY_POLL_SECONDS)


def job_timeout(tasks: int) -> float:
    return max(JOB_TIMEOUT_MIN, tasks / 200)


# -- workloads -------------------------------------------------------------------------


def run_one_job(bench: Bench, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit one job, wait for it, check it; the figures of one run."""
    n = len(spec["tasks"])
    deps = deps_of(spec)
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    job_id = bench.client.submit(spec)
    submit_s = time.perf_counter() - w0
    wait_job(bench, job_id, job_timeout(n))
    wall_s = time.perf_counter() - w0
    status = bench.client.status(job_id)
    problems, latencies = check_job(bench, job_id, spec, status)
    total_s = status["finished_at"] - t0_ms / 1000
    job_s = status["finished_at"] - status["created_at"]
    bench.purge([job_id])
    return {
        "tasks": n,
        "redis_s": total_s,
        "wall_s": wall_s,
        "submit_s": submit_s,
        "tasks_per_s": n / total_s,
        "hop_ms": job_s * 1000 / depth_of(deps),
        "dispatch_p50_ms": pct(latencies, 0.5),
        "dispatch_p99_ms": pct(latencies, 0.99),
        "problems": problems,
    }


# W1-observe: the variants, in the order each repeat runs them (the last is the default).
OBSERVE_VARIANTS = {
    "off": {"JOBCENTER_EVENTS_MAXLEN": "0", "JOBCENTER_METRICS": "0"},
    "events": {"JOBCENTER_METRICS": "0"},
    "both": {},
}
OBSERVE_TARGET_PCT = 10.0  # the issue's bound on what events may cost W1
OBSERVE_COMMANDS = ("xadd", "hincrby")  # what emit() and count() run


def run_observe(bench: Bench, n: int) -> dict[str, Any]:
    """W1 once per variant of OBSERVE_VARIANTS, the workers restarted for each."""
    out: dict[str, Any] = {"wall_s": 0.0, "problems": []}
    for name, settings_env in OBSERVE_VARIANTS.items():
        bench.restart_workers(settings_env)
        run_one_job(bench, flat_spec(200))  # warm-up: scripts loaded, pools filled
        stats = bench.commandstats()
        redis_cpu = bench.cpu_seconds()["redis"]
        run = run_one_job(bench, flat_spec(n))
        # Redis's own work per task: what the scripts cost, whatever else loads the machine
        after = bench.commandstats()
        evalsha = redis_load(stats, after, run["wall_s"])["evalsha_s"]
        out[f"evalsha_us_per_task_{name}"] = evalsha * 1e6 / n
        # the commands events and metrics add, inside the scripts (commandstats counts them)
        for command in OBSERVE_COMMANDS:
            calls = after.get(command, {"calls": 0, "usec": 0})
            was = stats.get(command, {"calls": 0, "usec": 0})
            out[f"{command}_calls_per_task_{name}"] = (calls["calls"] - was["calls"]) / n
            out[f"{command}_us_per_task_{name}"] = (calls["usec"] - was["usec"]) / n
        out[f"redis_cpu_us_per_task_{name}"] = (bench.cpu_seconds()["redis"] - redis_cpu) * 1e6 / n
        out[f"tasks_per_s_{name}"] = run["tasks_per_s"]
        out["wall_s"] += run["wall_s"]
        out["problems"] += [f"{name}: {p}" for p in run["problems"]]
    return out


def observe_cost(r: dict[str, Any], variant: str) -> float:
    """How much slower W1 ran with `variant` than with events and metrics off, in %."""
    return 100 * (1 - r[f"tasks_per_s_{variant}"] / r["tasks_per_s_off"])


def run_map(bench: Bench, n: int) -> dict[str, Any]:
    """A map of n elements: the expansion time is from the source's success (the first
    chunk is written by that same script) to the creation of the last instance, whose
    chunks leader 'continue' steps write while the first instances already run."""
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    job_id = bench.client.submit(map_spec(n))
    state = wait_job(bench, job_id, job_timeout(n))
    wall_s = time.perf_counter() - w0
    tasks = bench.client.store.keys.job(job_id).tasks
    source_done, instances = bench.redis.hmget(tasks, ["tf:0", "mx:1"])
    problems = [] if state == "succeeded" else [f"job {job_id} ended {state}"]
    expand_s = float("nan")
    if instances:
        first, count = map(int, instances.split(b"|")[:2])
        created = bench.redis.hmget(tasks, [f"tc:{k}" for k in range(first, first + count)])
        expand_s = (max(int(c) for c in created) - int(source_done)) / 1000
        if count != n:
            problems.append(f"{count} instances for {n} elements")
    ran = bench.redis.llen(ran_key(job_id))
    if ran != n + 2:
        problems.append(f"{ran} attempts ran, not {n + 2}")
    if bench.client.result(job_id, "join") != n:
        problems.append("the join did not get every instance's result")
    finished = int(bench.job_fields(job_id, "finished_at")[0] or t0_ms)
    bench.purge([job_id])
    return {
        "tasks": n + 2,
        "expand_s": expand_s,
        "redis_s": (finished - t0_ms) / 1000,
        "wall_s": wall_s,
        "problems": problems,
    }


def run_many_jobs(
    bench: Bench, spec: dict[str, Any], count: int, full_check: bool
) -> dict[str, Any]:
    """Submit `count` copies of a job through the client (`submit_many`: 200 per round
    trip); wait for all."""
    n = len(spec["tasks"])
    deps = deps_of(spec)
    parse_spec(spec)  # a bad spec fails here, before any job is submitted
    baseline = bench.active_jobs()
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    job_ids = bench.client.submit_many([spec] * count)
    submit_s = time.perf_counter() - w0
    wait_active_below(bench, baseline, job_timeout(n * count))
    wall_s = time.perf_counter() - w0
    wait_compacted(bench, job_ids, job_timeout(n * count))
    compacted_s = time.perf_counter() - w0
    pipe = bench.redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hmget(bench.job_key(job_id), ["state", "created_at", "finished_at"])
    rows = pipe.execute()
    problems: list[str] = []
    latencies: list[float] = []
    job_ms: list[float] = []
    finished = []
    for job_id, (state, created, done) in zip(job_ids, rows, strict=True):
        if state is None or state.decode() != "succeeded":
            problems.append(f"job {job_id} ended {state!r}")
            continue
        finished.append(int(done))
        job_ms.append(int(done) - int(created))
    if full_check:
        for job_id in job_ids:
            more, lat = check_job(bench, job_id, spec, bench.client.status(job_id))
            problems += more
            latencies += lat
    else:  # one-task jobs: the job's own state and one bench entry each
        pipe = bench.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.llen(ran_key(job_id))
        wrong = sum(1 for r in pipe.execute() if r != n)
        if wrong:
            problems.append(f"{wrong} jobs did not run exactly {n} task(s)")
        for state, queued, started in first_task_times(bench, job_ids):
            if state != b"succeeded":
                problems.append(f"a task ended {state!r}")
            elif queued and started:
                latencies.append(int(started) - int(queued))
    if len(problems) > 10:
        problems = problems[:10] + [f"... and {len(problems) - 10} more"]
    total_s = (max(finished) - t0_ms) / 1000 if finished else float("nan")
    bench.purge(job_ids)
    return {
        "jobs": count,
        "tasks": n * count,
        "redis_s": total_s,
        "wall_s": wall_s,
        "submit_s": submit_s,
        "submit_jobs_per_s": count / submit_s,
        "compacted_jobs_per_s": count / compacted_s,
        "jobs_per_s": count / total_s,
        "tasks_per_s": n * count / total_s,
        "hop_ms": statistics.median(job_ms) / depth_of(deps) if job_ms else None,
        "job_p50_ms": pct(job_ms, 0.5),
        "job_p99_ms": pct(job_ms, 0.99),
        "dispatch_p50_ms": pct(latencies, 0.5),
        "dispatch_p99_ms": pct(latencies, 0.99),
        "problems": problems,
    }


SINGLE_SUBMITS = 200  # W5's second figure: client.submit of one seed-000 job, one at a time


def run_single_submits(bench: Bench, spec: dict[str, Any], count: int) -> dict[str, Any]:
    """The round trip of `client.submit` of one job (durability as configured), `count`
    times one after another; the jobs run meanwhile and are waited for."""
    baseline = bench.active_jobs()
    round_trips: list[float] = []
    job_ids = []
    for _ in range(count):
        t0 = time.perf_counter()
        job_ids.append(bench.client.submit(spec))
        round_trips.append((time.perf_counter() - t0) * 1000)
    wait_active_below(bench, baseline, job_timeout(count * len(spec["tasks"])))
    bench.purge(job_ids)
    return {
        "single_submit_p50_ms": pct(round_trips, 0.5),
        "single_submit_p99_ms": pct(round_trips, 0.99),
    }


def first_task_times(bench: Bench, job_ids: Sequence[str]) -> list[list[bytes | None]]:
    """State, queued and started time of each job's task 0: from its tasks hash, or from its
    packed record once a leader compacted the finished job (one transaction: the one or the
    other, never neither)."""
    names = ["s:0", "tq:0", "ts:0"]
    pipe = bench.redis.pipeline(transaction=True)
    for job_id in job_ids:
        jk = bench.client.store.keys.job(job_id)
        pipe.hmget(jk.tasks, names)
        pipe.get(jk.packed)
    replies = pipe.execute()
    out = []
    for values, record in zip(replies[0::2], replies[1::2], strict=True):
        if record is not None:
            values = [decode_record(record).fields.get(name) for name in names]
        out.append(values)
    return out


WAKE_GAP_SECONDS = 0.02  # between the wake workload's submits: the workers are idle again


def run_wakeups(bench: Bench, count: int) -> dict[str, Any]:
    """Idle workers woken up: `count` one-task jobs submitted one at a time, WAKE_GAP_SECONDS
    apart, each finding the workers idle; the ready -> started time of each task (queued at
    to started at, both Redis TIME) is what the idle wake-up path costs."""
    spec = flat_spec(1)
    baseline = bench.active_jobs()
    job_ids = []
    w0 = time.perf_counter()
    for _ in range(count):
        job_ids.append(bench.client.submit(spec))
        time.sleep(WAKE_GAP_SECONDS)
    wait_active_below(bench, baseline, job_timeout(count))
    wall_s = time.perf_counter() - w0
    problems: list[str] = []
    waits: list[float] = []
    for state, queued, started in first_task_times(bench, job_ids):
        if state != b"succeeded" or not queued or not started:
            problems.append(f"a task ended {state!r}")
        else:
            waits.append(int(started) - int(queued))
    bench.purge(job_ids)
    return {
        "jobs": count,
        "wall_s": wall_s,
        "dispatch_p50_ms": pct(waits, 0.5),
        "dispatch_p99_ms": pct(waits, 0.99),
        "dispatch_max_ms": max(waits) if waits else None,
        "problems": problems[:10],
    }


def run_big(bench: Bench, shape: str, n: int) -> dict[str, Any]:
    """A DAG of n tasks whose root fails: time submit + split, then the cascade to the
    n - 1 descendants; the longest script calls of each phase from SLOWLOG."""
    spec = (
        fan_spec(n - 1, "bench.fail", join=False) if shape == "fan" else chain_spec(n, "bench.fail")
    )
    root = spec["tasks"][0]["id"]
    bench.redis.config_set("slowlog-log-slower-than", SLOWLOG_US)
    bench.redis.slowlog_reset()
    t0_ms = bench.now_ms()
    w0 = time.perf_counter()
    parsed = parse_spec(spec)
    parse_s = time.perf_counter() - w0
    job_id = bench.client.submit(parsed)
    submit_s = time.perf_counter() - w0
    wait_job(bench, job_id, job_timeout(n))
    wall_s = time.perf_counter() - w0
    slow = bench.slowlog_entries()
    bench.redis.config_set("slowlog-log-slower-than", 10_000)
    created, started, finished, nfailed, state = bench.job_fields(
        job_id, "created_at", "started_at", "finished_at", "nfailed", "state"
    )
    records = bench.client.store.records(job_id)  # the tasks hash, or the packed record
    root_index = "0"
    (root_failed_at,) = records.values(["tf:" + root_index])
    problems = []
    if state != "failed":
        problems.append(f"job ended {state}, not failed")
    if nfailed is None or int(nfailed) != n:
        problems.append(f"{nfailed} tasks failed or upstream_failed, not {n}")
    states = records.field_of_every_task(TaskField.STATE).values()
    upstream = sum(1 for v in states if v == "upstream_failed")
    if upstream != n - 1:
        problems.append(f"{upstream} tasks upstream_failed, not {n - 1}")
    ran = [text(e).split("|")[0] for e in bench.redis.lrange(ran_key(job_id), 0, -1)]
    if ran != [root]:
        problems.append(f"tasks that ran: {ran[:5]} (only {root} should)")
    assert created and started and finished and root_failed_at
    publish = [e for e in slow if e["name"] in PUBLISH_SCRIPTS]
    cascade = [e for e in slow if e["name"] in CASCADE_SCRIPTS]
    other = [
        e
        for e in slow
        if e["name"] not in PUBLISH_SCRIPTS | CASCADE_SCRIPTS and e["name"] not in BENCH_COMMANDS
    ]
    split_s = (int(started) - int(created)) / 1000
    bench.purge([job_id])

    def longest(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        return max(entries, key=lambda e: e["us"]) if entries else None

    return {
        "tasks": n,
        "parse_s": parse_s,
        "submit_s": submit_s,  # client.submit: parse + store
        "split_s": split_s,  # created -> roots queued (Redis TIME)
        "submit_total_s": (int(started) - t0_ms) / 1000,  # before parse -> roots queued
        "cascade_s": (int(finished) - int(root_failed_at)) / 1000,
        "wall_s": wall_s,
        "publish_longest": longest(publish),
        "cascade_longest": longest(cascade),
        "other_longest": longest(other),
        "slow_calls_by_script": _by_name(
            e for e in slow if e["name"] in PUBLISH_SCRIPTS | CASCADE_SCRIPTS
        ),
        "problems": problems,
    }


def run_follow(bench: Bench, n: int) -> dict[str, Any]:
    """`jobcenter submit --wait` (a CLI process, lines to a file) following a job of n
    independent tasks while the workers run it: the longest command the follower sent and
    the longest of anyone, from SLOWLOG at threshold 0 (drained while it runs). Then, for
    scale, one HGETALL of the finished job's tasks hash: what every poll cost when the
    follower read the whole status ten times a second."""
    spec_path = bench.data_dir / "follow.json"
    spec_path.write_text(json.dumps(flat_spec(n)))
    out_path = bench.data_dir / "follow.out"
    drain = SlowlogDrain(bench.server.url, bench.sha_names, FOLLOWER_NAME)
    drain.start()
    command = [sys.executable, "-m", "jobcenter", "submit", str(spec_path), "--wait"]
    command += ["--redis-url", f"{bench.server.url}?client_name={FOLLOWER_NAME}"]
    w0 = time.perf_counter()
    with out_path.open("w") as out:
        done = subprocess.run(
            command,
            env=bench.worker_env(),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=job_timeout(n),
        )
    wall_s = time.perf_counter() - w0
    drain.stop()
    lines = out_path.read_text().splitlines()
    job_id = lines[0].split()[1] if lines else ""
    problems = [] if done.returncode == 0 else [f"submit --wait exited {done.returncode}"]
    if len(lines) != n + 2 or lines[-1] != f"job {job_id} succeeded":
        problems.append(f"{len(lines)} lines, not a line per task: {lines[-1:]} {done.stderr}")
    bench.redis.config_set("slowlog-log-slower-than", 0)
    bench.redis.slowlog_reset()
    tasks_fields = len(bench.redis.hgetall(bench.client.store.keys.job(job_id).tasks))
    whole = [e for e in bench.slowlog_entries() if e["name"] == "HGETALL"]
    bench.redis.config_set("slowlog-log-slower-than", 10_000)
    bench.purge([job_id])
    return {
        "tasks": n,
        "wall_s": wall_s,
        "follower_longest": drain.longest["named"],
        "others_longest": drain.longest["others"],
        "follower_commands": {
            name: {"calls": len(us), "median_us": statistics.median(us), "longest_us": max(us)}
            for name, us in drain.named_us.items()
        },
        "tasks_hash_fields": tasks_fields,
        "hgetall_tasks_us": whole[0]["us"] if whole else None,
        "problems": problems,
    }


def _by_name(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """SLOWLOG entries summed per script: calls over the threshold, their total, median, max."""
    grouped: dict[str, list[int]] = {}
    for e in entries:
        grouped.setdefault(e["name"], []).append(e["us"])
    return {
        name: {
            "calls": len(us),
            "total_ms": sum(us) / 1000,
            "median_ms": statistics.median(us) / 1000,
            "max_ms": max(us) / 1000,
        }
        for name, us in grouped.items()
    }


def measure_memory(bench: Bench, n: int) -> dict[str, Any]:
    """INFO used_memory before vs after a job of n independent tasks is published into a
    queue no worker serves (so all n stay queued, live); then the job is cancelled."""
    spec = flat_spec(n, queue=IDLE_QUEUE)
    spec["retention"] = 1
    before = int(bench.redis.info("memory")["used_memory"])
    job_id = bench.client.submit(spec)
    deadline = time.monotonic() + job_timeout(n)
    while True:
        state, queued, has_spec = bench.job_fields(job_id, "state", "queued", "spec")
        if state == "running" and queued == str(n) and has_spec is None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"memory probe job not split after {job_timeout(n):.0f} s")
        time.sleep(0.01)
    after = int(bench.redis.info("memory")["used_memory"])
    store = bench.client.store
    jk = store.keys.job(job_id)
    shard = store.keys.job_shard(job_id)
    usage = {
        "job hash": bench.redis.memory_usage(jk.job, samples=0),
        "tasks hash": bench.redis.memory_usage(jk.tasks, samples=0),
        "ready queue": bench.redis.memory_usage(store.keys.queue(shard, IDLE_QUEUE), samples=0),
    }
    fields = bench.redis.hlen(jk.tasks)
    state = bench.client.cancel(job_id)
    bench.purge([job_id])
    return {
        "tasks": n,
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_task": (after - before) / n,
        "key_bytes_per_task": {k: (v or 0) / n for k, v in usage.items()},
        "tasks_hash_fields_per_task": fields / n,
        "cancelled_state": state,
    }


def redis_ceiling(bench: Bench, n: int) -> dict[str, float]:
    """EVALSHA of a trivial script: one per round trip, and pipelined in batches."""
    r = redis.Redis.from_url(bench.server.url)
    sha = r.script_load(TRIVIAL_SCRIPT)
    for _ in range(200):
        r.evalsha(sha, 0)
    w0 = time.perf_counter()
    for _ in range(n):
        r.evalsha(sha, 0)
    single = n / (time.perf_counter() - w0)
    m = n * 10
    w0 = time.perf_counter()
    for start in range(0, m, PIPELINE_BATCH):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, m - start)):
            pipe.evalsha(sha, 0)
        pipe.execute()
    pipelined = m / (time.perf_counter() - w0)
    r.close()
    return {"single_per_s": single, "pipelined_per_s": pipelined}


# -- driver ----------------------------------------------------------------------------


Workload = Callable[[Bench], dict[str, Any]]


def workloads(sizes: Sizes) -> dict[str, tuple[str, Workload]]:
    seed = seed000_spec()
    return {
        "W1": (
            f"flat {sizes.flat:,} tasks (events + metrics on)",
            lambda b: run_one_job(b, flat_spec(sizes.flat)),
        ),
        "W1-async": (
            f"flat {sizes.flat:,} async tasks (on the worker's event loop)",
            lambda b: run_one_job(b, flat_spec(sizes.flat, task="bench.async_noop")),
        ),
        "W1-pool": (
            f"flat {sizes.flat:,} tasks in a pool of {POOL_SLOTS}",
            lambda b: run_one_job(b, pooled_flat(b, sizes.flat)),
        ),
        "W1-observe": (
            f"flat {sizes.flat:,} tasks: events, metrics off / on",
            lambda b: run_observe(b, sizes.flat),
        ),
        "W1r": (
            f"flat {sizes.flat:,} tasks, {RESULT_BYTES}-byte results",
            lambda b: run_one_job(b, flat_spec(sizes.flat, task="bench.result")),
        ),
        "W2": (f"1 -> {sizes.fan:,} -> 1", lambda b: run_one_job(b, fan_spec(sizes.fan))),
        "W3": (f"chain of {sizes.chain:,}", lambda b: run_one_job(b, chain_spec(sizes.chain))),
        "W4": (
            f"{sizes.seed_jobs} seed-000 jobs",
            lambda b: run_many_jobs(b, seed, sizes.seed_jobs, full_check=True),
        ),
        "W5": (
            f"{sizes.one_task_jobs:,} one-task jobs",
            lambda b: {
                **run_many_jobs(b, flat_spec(1), sizes.one_task_jobs, full_check=False),
                **run_single_submits(b, seed, SINGLE_SUBMITS),
            },
        ),
        "wake": (
            f"{sizes.wake} one-task jobs, one at a time",
            lambda b: run_wakeups(b, sizes.wake),
        ),
        "map": (
            f"map over {sizes.map_elements:,} elements",
            lambda b: run_map(b, sizes.map_elements),
        ),
        "big-fan": (
            f"{sizes.big:,}-task fan, root fails",
            lambda b: run_big(b, "fan", sizes.big),
        ),
        "big-chain": (
            f"{sizes.big:,}-task chain, root fails",
            lambda b: run_big(b, "chain", sizes.big),
        ),
        "big-follow": (
            f"submit --wait following a {sizes.big:,}-task job",
            lambda b: run_follow(b, sizes.big),
        ),
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-figure median over runs (numbers only); other values from the median run."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)
        elif key == "problems":
            out[key] = [p for r in runs for p in r[key]]
        elif key.endswith("_longest"):
            present = [v for v in values if v]
            out[key] = max(present, key=lambda e: e["us"]) if present else None
        else:
            out[key] = values[len(values) // 2]
    return out


def redis_load(before: dict[str, Any], after: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What Redis spent on one workload: its CPU seconds (INFO cpu) and, from INFO
    commandstats, the EVALSHA calls and their time (which includes the commands they run)."""
    delta: dict[str, dict[str, int]] = {}
    for name, value in after.items():
        if name.startswith("@"):
            continue
        old = before.get(name, {"calls": 0, "usec": 0})
        calls, usec = value["calls"] - old["calls"], value["usec"] - old["usec"]
        if calls:
            delta[name] = {"calls": calls, "usec": usec}
    cpu_s = after["@cpu"] - before["@cpu"]
    evalsha = delta.get("evalsha", {"calls": 0, "usec": 0})
    return {
        "cpu_s": cpu_s,
        "busy_pct": 100 * cpu_s / wall_s if wall_s else None,
        "evalsha_calls": evalsha["calls"],
        "evalsha_s": evalsha["usec"] / 1e6,
        "evalsha_us_per_call": evalsha["usec"] / evalsha["calls"] if evalsha["calls"] else None,
        "by_command": dict(sorted(delta.items(), key=lambda kv: -kv[1]["usec"])[:12]),
    }


def cpu_per_task(run: dict[str, Any]) -> dict[str, float]:
    """CPU microseconds per task of the workers (their threads, rq children aside) and of
    redis-server over one run: far less noisy on a shared machine than its wall time."""
    tasks = run.get("tasks")
    if not tasks:
        return {}
    return {
        "worker_cpu_us_per_task": run["cpu_s"]["workers"] * 1e6 / tasks,
        "redis_cpu_us_per_task": run["cpu_s"]["redis"] * 1e6 / tasks,
    }


def fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def verdict(ok: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "-"}[ok]


def table_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows: list[tuple[str, str, str, str, str, str]] = []
    w = results["workloads"]
    ceiling = results["redis_ceiling"]
    runs = results["redis_ceiling_runs"]
    for key, label, peers in (
        ("single_per_s", "EVALSHA 1/round trip", PEERS["ceiling_single"]),
        ("pipelined_per_s", f"EVALSHA pipelined x{PIPELINE_BATCH}", PEERS["ceiling_pipelined"]),
    ):
        each = " / ".join(fmt(c[key]) for c in runs)
        rows.append(
            (
                "Redis ceiling" if key.startswith("single") else "",
                label,
                f"{fmt(ceiling[key], '/s')} (start / end: {each})",
                "",
                peers,
                "",
            )
        )
    mem = results["memory"]
    rows.append(
        (
            "memory",
            f"bytes per live task ({mem['tasks']:,} queued)",
            fmt(mem["bytes_per_task"], " B"),
            "printed",
            "",
            "",
        )
    )
    parts = ", ".join(f"{k} {v:,.0f} B" for k, v in mem["key_bytes_per_task"].items())
    rows.append(("", "  of which (MEMORY USAGE per task)", parts, "", "", ""))

    def common(key: str, rate: bool = True) -> None:
        r = w[key]["median"]
        if rate:
            rows.append(("", "tasks/s", fmt(r["tasks_per_s"]), "", "", ""))
        if "worker_cpu_us_per_task" in r:
            cpu = f"{fmt(r['worker_cpu_us_per_task'])} / {fmt(r['redis_cpu_us_per_task'])} us"
            rows.append(("", "CPU per task: workers / Redis", cpu, "printed", "", ""))
        rows.append(
            (
                "",
                "wall: Redis TIME / client",
                f"{r['redis_s']:.3f} s / {r['wall_s']:.3f} s",
                "",
                "",
                "",
            )
        )
        rows.append(
            (
                "",
                "per hop; dispatch p50/p99",
                f"{fmt(r['hop_ms'], ' ms', 2)}; {fmt(r['dispatch_p50_ms'], '', 1)}/"
                f"{fmt(r['dispatch_p99_ms'], ' ms', 1)}",
                "",
                "",
                "",
            )
        )

    def headline(key: str, figure: str, value: float | None, shown: str) -> None:
        if key not in w:
            return
        ok = meets(TARGETS[key], value)
        if w[key]["median"]["problems"]:
            ok = False
        runs = len(w[key]["runs"])
        label = f"{key} {w[key]['label']}" + (f" [median of {runs}]" if runs > 1 else "")
        rows.append((label, figure, shown, TARGETS[key].text, PEERS[key], verdict(ok)))

    if "W1" in w:
        r = w["W1"]["median"]
        headline("W1", "tasks/s", r["tasks_per_s"], fmt(r["tasks_per_s"]))
        common("W1", rate=False)
    for key in ("W1-async", "W1-pool"):
        if key in w:
            r = w[key]["median"]
            headline(key, "tasks/s", r["tasks_per_s"], fmt(r["tasks_per_s"]))
            common(key, rate=False)
    if "W1-observe" in w:
        r = w["W1-observe"]["median"]
        runs = len(w["W1-observe"]["runs"])
        label = f"W1-observe {w['W1-observe']['label']}" + (
            f" [median of {runs}]" if runs > 1 else ""
        )
        shown = " / ".join(fmt(r[f"tasks_per_s_{v}"]) for v in OBSERVE_VARIANTS)
        rows.append((label, "tasks/s: off / events / events + metrics", shown, "", "", ""))
        for key, figure in (
            ("evalsha_us_per_task", "  script time per task (us)"),
            ("redis_cpu_us_per_task", "  Redis CPU per task (us)"),
        ):
            shown = " / ".join(fmt(r[f"{key}_{v}"], "", 1) for v in OBSERVE_VARIANTS)
            rows.append(("", figure, shown, "", "", ""))
        for command in OBSERVE_COMMANDS:
            shown = " / ".join(
                f"{r[f'{command}_calls_per_task_{v}']:.3f} calls, "
                f"{r[f'{command}_us_per_task_{v}']:.2f} us"
                for v in OBSERVE_VARIANTS
            )
            rows.append(("", f"  {command.upper()} per task", shown, "", "", ""))
        cost = observe_cost(r, "events")
        ok = cost <= OBSERVE_TARGET_PCT and not r["problems"]
        target = f"<= {OBSERVE_TARGET_PCT:.0f} %"
        rows.append(("", "cost of events", f"{cost:.1f} %", target, "", verdict(ok)))
        cost = observe_cost(r, "both")
        rows.append(("", "cost of events + metrics", f"{cost:.1f} %", "printed", "", ""))
        # what load cannot blur: the time of the commands they add, against the scripts' time
        share = 100 * r["xadd_us_per_task_events"] / r["evalsha_us_per_task_off"]
        rows.append(
            ("", "  XADD time / script time (events on)", f"{share:.1f} %", "printed", "", "")
        )
    if "W1r" in w:
        r = w["W1r"]["median"]
        base = w["W1"]["median"]["tasks_per_s"] if "W1" in w else None
        cost = 1 - r["tasks_per_s"] / base if base else None
        shown = fmt(r["tasks_per_s"]) + (f" ({cost:+.0%} vs W1)" if cost is not None else "")
        ok = None if cost is None else cost <= RESULT_COST_MAX and not r["problems"]
        label = f"W1r {w['W1r']['label']}"
        rows.append(
            (label, "tasks/s", shown, f"<= {RESULT_COST_MAX:.0%} below W1", "", verdict(ok))
        )
        common("W1r", rate=False)
    if "map" in w:
        r = w["map"]["median"]
        rows.append(
            (
                f"map {w['map']['label']}",
                "expansion: source done to last instance written",
                fmt(r["expand_s"], " s", 3),
                "",
                "",
                verdict(None if r["problems"] else True),
            )
        )
        rows.append(("", "whole job (Redis TIME)", fmt(r["redis_s"], " s", 3), "", "", ""))
    if "W2" in w:
        r = w["W2"]["median"]
        headline("W2", "wall (Redis TIME)", r["redis_s"], fmt(r["redis_s"], " s", 3))
        common("W2")
    if "W3" in w:
        r = w["W3"]["median"]
        headline("W3", "per hop", r["hop_ms"], fmt(r["hop_ms"], " ms", 3))
        common("W3")
    if "W4" in w:
        r = w["W4"]["median"]
        headline("W4", "wall (Redis TIME)", r["redis_s"], fmt(r["redis_s"], " s", 3))
        common("W4")
        rows.append(("", "submit (client)", f"{fmt(r['submit_jobs_per_s'])} jobs/s", "", "", ""))
    if "wake" in w:
        r = w["wake"]["median"]
        runs = len(w["wake"]["runs"])
        rows.append(
            (
                f"wake {w['wake']['label']}" + (f" [median of {runs}]" if runs > 1 else ""),
                "ready -> started p50/p99/max",
                f"{fmt(r['dispatch_p50_ms'], '', 1)}/{fmt(r['dispatch_p99_ms'], '', 1)}/"
                f"{fmt(r['dispatch_max_ms'], ' ms', 1)}",
                "",
                "",
                verdict(not r["problems"]),
            )
        )
    if "W5" in w:
        r = w["W5"]["median"]
        headline("W5", "jobs/s, submit to last finished", r["jobs_per_s"], fmt(r["jobs_per_s"]))
        rows.append(
            ("", "jobs/s, submit to all compacted", fmt(r["compacted_jobs_per_s"]), "", "", "")
        )
        ok = meets(TARGETS["W5"], r["submit_jobs_per_s"])
        rows.append(
            (
                "",
                "jobs/s, client.submit alone",
                fmt(r["submit_jobs_per_s"]),
                TARGETS["W5"].text,
                "",
                verdict(ok),
            )
        )
        rows.append(
            (
                "",
                "9-task job, client.submit round trip p50/p99",
                f"{fmt(r.get('single_submit_p50_ms'), '', 2)}/"
                f"{fmt(r.get('single_submit_p99_ms'), ' ms', 2)}",
                TARGETS["single_submit"].text,
                "",
                verdict(meets(TARGETS["single_submit"], r.get("single_submit_p50_ms"))),
            )
        )
        common("W5", rate=False)
        rows.append(
            (
                "",
                "job latency p50/p99",
                f"{fmt(r['job_p50_ms'], '', 1)}/{fmt(r['job_p99_ms'], ' ms', 1)}",
                "",
                "",
                "",
            )
        )
    for key in ("big-fan", "big-chain"):
        if key not in w:
            continue
        r = w[key]["median"]
        ok_submit = meets(TARGETS["big_submit"], r["submit_total_s"])
        rows.append(
            (
                f"{key} {w[key]['label']}",
                "submit + split (to roots queued)",
                f"{r['submit_total_s']:.3f} s",
                TARGETS["big_submit"].text,
                "",
                verdict(ok_submit and not r["problems"]),
            )
        )
        rows.append(
            (
                "",
                "  parse / client.submit / split",
                f"{r['parse_s']:.3f} / {r['submit_s']:.3f} / {r['split_s']:.3f} s",
                "",
                "",
                "",
            )
        )
        for phase in ("publish", "cascade"):
            e = r[f"{phase}_longest"]
            value = e["us"] / 1000 if e else 0.0
            shown = f"{value:.1f} ms ({e['name']})" if e else "none over 1 ms"
            rows.append(
                (
                    "",
                    f"longest Lua call, {phase}",
                    shown,
                    TARGETS["lua_max"].text,
                    "",
                    verdict(meets(TARGETS["lua_max"], value)),
                )
            )
        for name, st in sorted(r["slow_calls_by_script"].items()):
            rows.append(
                (
                    "",
                    f"  {name}: calls over 1 ms",
                    f"{st['calls']} calls, {st['total_ms']:.0f} ms in all, "
                    f"median {st['median_ms']:.1f} ms",
                    "",
                    "",
                    "",
                )
            )
        e = r["other_longest"]
        if e:
            rows.append(
                (
                    "",
                    "longest other command (in scripts too)",
                    f"{e['us'] / 1000:.1f} ms ({e['name']})",
                    "",
                    "",
                    "",
                )
            )
        rows.append(
            (
                "",
                f"cascade to {r['tasks'] - 1:,} descendants",
                f"{r['cascade_s']:.3f} s",
                "",
                "",
                "",
            )
        )
    if "big-follow" in w:
        r = w["big-follow"]["median"]
        label = f"big-follow {w['big-follow']['label']}"
        for who, figure in (
            ("follower", "longest command of `submit --wait`"),
            ("others", "longest command of anyone meanwhile"),
        ):
            e = r[f"{who}_longest"]
            shown = f"{e['us'] / 1000:.2f} ms ({e['name']})" if e else "-"
            rows.append((label, figure, shown, "", "", verdict(not r["problems"])))
            label = ""
        for name, c in sorted(r["follower_commands"].items(), key=lambda kv: -kv[1]["calls"]):
            median, longest = c["median_us"] / 1000, c["longest_us"] / 1000
            rows.append(
                (
                    "",
                    f"  its {name}: calls, median / longest",
                    f"{c['calls']:,}, {median:.3f} / {longest:.2f} ms",
                    "",
                    "",
                    "",
                )
            )
        rows.append(
            (
                "",
                f"  vs one HGETALL of the tasks hash ({r['tasks_hash_fields']:,} fields)",
                fmt(
                    None if r["hgetall_tasks_us"] is None else r["hgetall_tasks_us"] / 1000,
                    " ms",
                    1,
                ),
                "",
                "",
                "",
            )
        )
    return rows


def render(rows: Sequence[tuple[str, ...]]) -> str:
    header = ("workload", "figure", "value", "target", "peers", "pass/fail")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    for r in rows:
        if r[0] and out[-1] != line:
            out.append("")
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def machine() -> dict[str, Any]:
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
    }


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
    """`--only=order`: each task-order rule on each shape of scripts/bench_order.py."""
    import bench_order

    say(f"task order: one worker x {slots} slots, durations in units of {bench_order.UNIT_S} s")
    with bench_on_own_server(1, slots) as bench:
        rows = bench_order.run(bench, slots, say)
    say()
    say(bench_order.render(rows))
    return 0


def memory_bench(jobs: int, workers: int, concurrency: int, say: Callable[[str], None]) -> int:
    """`--only=memory`: the Redis bytes a finished task keeps (scripts/bench_memory.py)."""
    import bench_memory

    say(f"memory of finished jobs: {workers} workers x {concurrency} threads")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = bench_memory.run(bench, jobs, say)
    say()
    say(bench_memory.render(rows))
    return 0


def floor_bench(workers: int, concurrency: int, repeats: int, say: Callable[[str], None]) -> int:
    """`--only=floor`: jobcenter beside the least any Python worker can do (bench_floor.py)."""
    import bench_floor

    say(f"the floor beside jobcenter: {workers} workers x {concurrency} slots, {repeats} runs")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = bench_floor.run(bench, workers, repeats, say)
    say()
    say(bench_floor.render(rows, f"{workers} x {concurrency}"))
    problems = [p for row in rows for p in row["problems"]]
    for p in problems[:10]:
        say("PROBLEM: " + p)
    return 1 if problems else 0


def burst_bench(workers: int, concurrency: int, repeats: int, say: Callable[[str], None]) -> int:
    """`--only=burst`: ready -> started of tasks that had a free slot (scripts/bench_burst.py)."""
    import bench_burst

    say(f"bursts and small deep DAGs: {workers} workers x {concurrency} slots, {repeats} runs")
    with bench_on_own_server(workers, concurrency) as bench:
        rows = bench_burst.run(bench, workers * concurrency, repeats, say)
    say()
    say(bench_burst.render(rows))
    problems = [p for row in rows for p in row["problems"]]
    for p in problems[:10]:
        say("PROBLEM: " + p)
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
        "or `floor` alone: W1 and W3 beside a bare Python worker doing nothing but the task's "
        "body and one Lua call a task (2 workers x 8 slots unless --concurrency says)",
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
    burst_slots = args.concurrency or BURST_SLOTS  # the issue's bursts are measured at 2 x 32
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
    if args.only == "floor":
        return floor_bench(args.workers, floor_slots, repeats, say)
    if args.only == "order":
        return order_bench(args.concurrency, say)
    if args.only == "memory":
        return memory_bench(sizes.seed_jobs, args.workers, args.concurrency, say)
    if args.only == "cluster":
        import bench_cluster

        return bench_cluster.main(sizes, repeats, args.workers, args.concurrency, say)
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
