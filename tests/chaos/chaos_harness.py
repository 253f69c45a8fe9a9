"""The chaos tier's use of the process harness (tests/harness.py): real `jobcenter worker`
processes (with their rq children) that tests kill -9, SIGSTOP and SIGCONT; real `jobcenter
recover --once` runs; and the check that a job converged (every task terminal, the right
final state, no task started before its parents finished, nothing left in any queue), with
the re-runs it took.

Leases and timeouts are shortened through the env vars every process reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from chaos_tasks import EVENTS_URL_ENV, WORKER_NAME_ENV, all_gates_key, events_key, gate_key
from harness import PROCESS_START_SECONDS, TESTS_DIR, Cli, WorkerPool, WorkerProcess, spawn
from helpers import pid_alive

from jobcenter.config import IDLE_WAIT_SECONDS, Settings
from jobcenter.model.states import JobState, TaskState
from jobcenter.storage.jobs.attempts import LEASE_GRACE_DIVISOR
from jobcenter.storage.store import Store

CHAOS_DIR = Path(__file__).resolve().parent

LEASE_SECONDS = 1.0  # heartbeats every 1/3 s; a dead worker's task is taken over in ~1-2 s
WORKER_TIMEOUT_SECONDS = 2.0  # a node silent this long is gone (recovery rule 4)
RECOVERY_INTERVAL_SECONDS = 1.0  # the rq child of every worker runs a recovery pass each second
SHORT_ENV = {
    "JOBCENTER_LEASE_SECONDS": str(LEASE_SECONDS),
    "JOBCENTER_WORKER_TIMEOUT_SECONDS": str(WORKER_TIMEOUT_SECONDS),
    "JOBCENTER_RECOVERY_INTERVAL_SECONDS": str(RECOVERY_INTERVAL_SECONDS),
}
RQ_CHILD_EXIT_SECONDS = 5.0  # an orphaned rq child checks its parent every second
# A takeover, as the protocol runs it: the lease ends at most one lease after the kill (the
# last heartbeat came before it), a sweep notices within IDLE_WAIT_SECONDS (a worker's leader
# thread sweeps at least that often), the timed_out attempt gets its grace (lease /
# LEASE_GRACE_DIVISOR), the next sweep requeues it, a serving worker claims and starts it.
TAKEOVER_PROTOCOL_SECONDS = (
    LEASE_SECONDS + LEASE_SECONDS / LEASE_GRACE_DIVISOR + 2 * IDLE_WAIT_SECONDS
)
# Each of the four hand-offs (sweep, sweep, claim, start) waits for a process to get a core:
# on a 2-core CI machine at load ~10 that is up to about a second each.
SCHEDULING_DELAY_SECONDS = 1.0
TAKEOVER_BOUND_SECONDS = TAKEOVER_PROTOCOL_SECONDS + 4 * SCHEDULING_DELAY_SECONDS


class Cluster(WorkerPool):
    """Worker processes, CLI runs and the event log of one test (one namespace).

    The event log and the gates live on jobcenter's Redis, or on `events_url` for a test
    that makes jobcenter's Redis refuse writes (the tasks' bookkeeping must not suffer it)."""

    modules = ("chaos_tasks",)
    name_env = WORKER_NAME_ENV
    path = (CHAOS_DIR, TESTS_DIR)
    settings = SHORT_ENV

    def __init__(
        self, redis_url: str, namespace: str, log_dir: Path, events_url: str | None = None
    ) -> None:
        super().__init__(redis_url, namespace, log_dir)
        self.events_url = events_url
        self.events_redis = redis.Redis.from_url(events_url) if events_url else self.redis
        self.store = Store(self.redis, Settings(redis_url=redis_url, namespace=namespace))
        self.cli = Cli(redis_url, namespace, log_dir, path=self.path, settings=self.settings)
        self.helpers: list[subprocess.Popen[bytes]] = []

    def env(self, **extra: str) -> dict[str, str]:
        if self.events_url:
            extra = {EVENTS_URL_ENV: self.events_url, **extra}
        return super().env(**extra)

    # -- processes ------------------------------------------------------------------------

    def power_off(self, worker: WorkerProcess) -> float:
        """kill -9 a worker and its rq child at once, as a power loss would; returns the
        time of the kill. The rq child is frozen first and the kill waits for a moment when
        it runs no recovery pass: a pass killed half way is a test of its own, and here it
        would only hold the recovery lease and stall the repairs the test waits for."""
        worker.note_rq_children()
        rq_pids = [p for p in worker.rq_pids if pid_alive(p)]
        lease = self.keys.singleton("recovery")
        deadline = time.monotonic() + PROCESS_START_SECONDS
        while True:
            for pid in rq_pids:
                os.kill(pid, signal.SIGSTOP)
            holder = self.redis.get(lease)
            if holder is None or not holder.decode().startswith("rq:"):
                break
            for pid in rq_pids:
                os.kill(pid, signal.SIGCONT)
            if time.monotonic() > deadline:
                raise AssertionError(f"a recovery pass held its lease for {deadline}s")
            time.sleep(0.01)  # polls for the pass to end; no ordering rests on it
        killed_at = worker.kill9()
        for pid in rq_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return killed_at

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """A helper process of the test (e.g. `python -m chaos_tasks ...`); output to a log."""
        log_path = self.log_dir / f"helper-{len(self.helpers) + 1}.log"
        proc = spawn([sys.executable, *args], self.env(**env), log_path)
        self.helpers.append(proc)
        return proc

    def recover(self, **env: str) -> dict[str, Any]:
        """`jobcenter recover --once --json`; its report."""
        done = self.cli("recover", "--once", "--json", env=env)
        assert done.code == 0, f"recover exited {done.code}: {done.stderr}"
        report: dict[str, Any] = done.json()
        return report

    def close(self) -> list[str]:
        """Stop everything this test started; returns what went wrong (empty if nothing).

        The rq child of a worker the test killed must have exited by itself; workers still
        running are killed -9 with their rq child (graceful shutdown is the integration
        tier's subject, and waiting out each worker's idle BLPOP would double this tier's
        run time)."""
        problems = []
        with contextlib.suppress(redis.RedisError):
            self.events_redis.set(all_gates_key(self.namespace), 1)
        for worker in self.started:
            if not worker.alive and not worker.stopped_by_test:
                tail = "\n".join(worker.log().splitlines()[-20:])
                problems.append(f"worker {worker.name} exited {worker.proc.returncode}:\n{tail}")
        orphans = {pid for w in self.started if not w.alive for pid in w.rq_pids}
        for worker in self.started:
            if worker.alive:
                worker.note_rq_children()
                worker.proc.kill()
                worker.proc.wait()
                for pid in worker.rq_pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        for proc in self.helpers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        deadline = time.monotonic() + RQ_CHILD_EXIT_SECONDS
        while any(pid_alive(p) for p in orphans) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in orphans:
            if pid_alive(pid):
                problems.append(f"rq child {pid} outlived its killed worker")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.redis.close()
        if self.events_redis is not self.redis:
            self.events_redis.close()
        return problems

    # -- the tests' own keys ------------------------------------------------------------

    def open_gate(self, gate: str) -> None:
        self.events_redis.set(gate_key(self.namespace, gate), 1)

    def events(self, kind: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
        raw = self.events_redis.lrange(events_key(self.namespace), 0, -1)
        out = []
        for position, item in enumerate(raw):
            event = json.loads(item)
            event["pos"] = position
            if (kind is None or event["e"] == kind) and (job is None or event.get("job") == job):
                out.append(event)
        return out

    def starts(self, job: str, task: str) -> list[dict[str, Any]]:
        return [e for e in self.events("start", job) if e["task"] == task]

    # -- jobcenter state, read directly ---------------------------------------------------

    def task_field(self, job: str, attr: str, index: int) -> str | None:
        (raw,) = self.store.records(job).values([f"{attr}:{index}"])  # hash or packed record
        return None if raw is None else raw.decode()

    def job_field(self, job: str, name: str) -> str | None:
        raw = self.redis.hget(self.keys.job(job).job, name)
        return None if raw is None else raw.decode()


def chain_of_layers(
    width: int, depth: int, *, work: float, fan_in: int = 3, seed: int = 1
) -> dict[str, Any]:
    """A layered DAG: `depth` layers of `width` tasks, each task depending on up to `fan_in`
    tasks of the layer before (picked deterministically)."""
    import random

    rng = random.Random(seed)
    tasks: list[dict[str, Any]] = []
    for layer in range(depth):
        for k in range(width):
            task: dict[str, Any] = {
                "id": f"L{layer}.{k}",
                "task": "chaos.step",
                "kwargs": {"work": work},
                "retries": 10,
            }
            if layer:
                parents = rng.sample(range(width), rng.randint(1, fan_in))
                task["depends_on"] = [f"L{layer - 1}.{p}" for p in parents]
            tasks.append(task)
    return {"name": f"layers-{width}x{depth}", "tasks": tasks}


@dataclass
class Convergence:
    """What a finished job looks like, and every invariant it broke."""

    state: str
    task_states: dict[str, str]
    starts: Counter[str]
    problems: list[str]

    @property
    def reruns(self) -> int:
        return sum(n - 1 for n in self.starts.values() if n > 1)

    @property
    def rerun_tasks(self) -> dict[str, int]:
        return {t: n - 1 for t, n in sorted(self.starts.items()) if n > 1}


def check_converged(
    cluster: Cluster, job_id: str, spec: dict[str, Any], expected_state: str
) -> Convergence:
    """Every task terminal; the job `expected_state` (succeeded iff every task did); no task
    started (any attempt) before the accepted attempt of each parent recorded its finish, nor
    before the parent's finish time in Redis; the accepted attempt of each succeeded task is
    one that ran to its end; no queue entry, lease, claim or leader message of the job left."""
    r, keys = cluster.redis, cluster.keys
    jk = keys.job(job_id)
    problems: list[str] = []
    # A finished job's last leader message is its compaction: play that leader (a worker's
    # leader may be at it too, or every worker may be gone; either way one swap wins).
    cluster.store.compact(job_id)
    job = {k.decode(): v.decode(errors="replace") for k, v in r.hgetall(jk.job).items()}
    raw_tasks = cluster.store.records(job_id).every_field()  # what the job keeps, packed
    fields: dict[str, dict[str, str]] = defaultdict(dict)
    for k, v in raw_tasks.items():
        attr, _, index = k.partition(":")
        if attr != "p":
            fields[index][attr] = v.decode(errors="replace")
    by_id = {f["id"]: f for f in fields.values() if "id" in f}
    deps = {t["id"]: t.get("depends_on", []) for t in spec["tasks"]}
    # a task with a trigger rule may run after parents that did not succeed (or before all
    # of them ended: one_success, one_failed); the rule's outcome is its test's to check
    ruled = {
        t["id"] for t in spec["tasks"] if t.get("trigger_rule", "all_success") != "all_success"
    }

    state = job.get("state", "?")
    if state != expected_state:
        problems.append(f"job ended {state}, expected {expected_state}")
    shown = cluster.store.status(job_id)["tasks"]  # what `jobcenter status` shows
    task_states = {t: shown.get(t, {}).get("state") or "<not in status>" for t in deps}
    for t, f in by_id.items():
        if f.get("s") != task_states.get(t):
            problems.append(f"task {t} is {f.get('s')} in Redis but {task_states.get(t)} in status")
    for t, s in task_states.items():
        if s not in {x.value for x in TaskState} or not TaskState(s).terminal:
            problems.append(f"task {t} is {s}, not terminal")
    all_ok = all(s in (TaskState.SUCCEEDED, TaskState.SKIPPED) for s in task_states.values())
    if JobState(state).terminal and (state == JobState.SUCCEEDED) != all_ok:
        problems.append(f"job is {state} but all tasks succeeded or skipped is {all_ok}")

    events = cluster.events(job=job_id)
    starts = Counter(e["task"] for e in events if e["e"] == "start")
    # an attempt by its number and handler: the token's nonce goes when the job is compacted
    finish_pos = {
        (e["task"], e["token"].rpartition(":")[0]): e["pos"] for e in events if e["e"] == "finish"
    }
    accepted_finish: dict[str, int] = {}
    for t, f in by_id.items():
        if f.get("s") == TaskState.SUCCEEDED:
            token = f"{f.get('a')}:{f.get('h')}"
            pos = finish_pos.get((t, token))
            if pos is None:
                problems.append(f"task {t} succeeded with token {token} that never finished")
            else:
                accepted_finish[t] = pos
    for t, parents in deps.items():
        if t in ruled:
            continue
        for e in (e for e in events if e["e"] == "start" and e["task"] == t):
            for p in parents:
                if p not in accepted_finish:
                    problems.append(f"task {t} started although parent {p} did not succeed")
                elif e["pos"] < accepted_finish[p]:
                    problems.append(f"task {t} ({e['token']}) started before parent {p} finished")
        ts = by_id.get(t, {}).get("ts")
        for p in parents:
            tf = by_id.get(p, {}).get("tf")
            if ts and tf and by_id[t].get("s") != TaskState.UPSTREAM_FAILED and int(ts) < int(tf):
                problems.append(f"task {t} started at {ts} before parent {p} finished at {tf}")

    member_part = f"|{job_id}|"
    for queue in (job.get("queues") or "default").split(","):
        for key in (keys.queue(0, queue), keys.delayed(0, queue)):
            left = [m for m in r.zrange(key, 0, -1) if member_part in m.decode()]
            if left:
                problems.append(f"{len(left)} entries of the job left in {key}")
    for key in (keys.leases(0),):
        left = [m for m in r.zrange(key, 0, -1) if m.decode().startswith(job_id + "|")]
        if left:
            problems.append(f"leases left: {left}")
    claims = [k for k in r.hkeys(keys.claims(0)) if k.decode().startswith(job_id + "|")]
    if claims:
        problems.append(f"claims left: {claims}")
    leader = [m for m in r.zrange(keys.leader(0), 0, -1) if m.decode().endswith("|" + job_id)]
    if leader and JobState(state).terminal:
        problems.append(f"leader messages left: {leader}")
    return Convergence(state, task_states, starts, problems)


def short_settings(url: str, namespace: str) -> Settings:
    """Settings with the workers' short lease and timeouts (SHORT_ENV), for a test's own store."""
    return Settings(
        redis_url=url,
        namespace=namespace,
        lease_seconds=float(SHORT_ENV["JOBCENTER_LEASE_SECONDS"]),
        worker_timeout_seconds=float(SHORT_ENV["JOBCENTER_WORKER_TIMEOUT_SECONDS"]),
        recovery_interval_seconds=float(SHORT_ENV["JOBCENTER_RECOVERY_INTERVAL_SECONDS"]),
    )


def close_cluster(cluster: Cluster) -> None:
    """Stop the cluster's workers; fail the test if any worker or rq child was left over."""
    problems = cluster.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
