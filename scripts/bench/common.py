"""What every benchmark of the package shares: the sizes, the job shapes, the bench's own
Redis and workers (Bench), CPU readers, checks that every task ran once and in order."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml

from jobcenter import Client
from jobcenter.storage.lua import ALL_SCRIPTS, source
from jobcenter.storage.server.embedded import RedisServer

from .tasks import REDIS_URL_ENV, ran_key

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS_DIR = Path(__file__).resolve().parents[1]  # on the workers' path: bench.tasks
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
BURST_SLOTS = 32  # `--only=burst`: the 2 x 32 slots
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
RESULT_COST_MAX = 0.15  # W1r may run at most this much slower than W1: results cost little


def text(value: bytes | str) -> str:
    """A Redis reply as text (binary fields, msgpack blobs, come back mangled, never fail)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


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
        command = [sys.executable, "-m", "jobcenter", "worker", "bench.tasks"]
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
            elif name == "FCALL":  # "jobcenter_<script>_<digest>"
                function = command[9 : command.find(b'"', 9)].decode(errors="replace")
                name = "FCALL " + function.removeprefix("jobcenter_").rsplit("_", 1)[0]
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
    elif name == "FCALL" and len(parts) > 1:  # jobcenter_<script>_<digest>
        name = parts[1].removeprefix("jobcenter_").rsplit("_", 1)[0]
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
    calls = [delta.get(c, {"calls": 0, "usec": 0}) for c in ("evalsha", "fcall")]  # functions
    evalsha = {k: sum(c[k] for c in calls) for k in ("calls", "usec")}
    return {
        "cpu_s": cpu_s,
        "busy_pct": 100 * cpu_s / wall_s if wall_s else None,
        "evalsha_calls": evalsha["calls"],
        "evalsha_s": evalsha["usec"] / 1e6,
        "evalsha_us_per_call": evalsha["usec"] / evalsha["calls"] if evalsha["calls"] else None,
        "by_command": dict(sorted(delta.items(), key=lambda kv: -kv[1]["usec"])[:12]),
    }
