"""The machinery of the integration tier: real `jobcenter worker` processes and real CLI runs
against the session's redis-server, each test in its own namespace.

Workers import `tasks_for_tests` (tests/ is put on their PYTHONPATH) and `jobcenter.demo`
(with short demo steps). At teardown every worker still running gets SIGTERM and must exit
0 within a deadline (else kill -9); a worker that exited otherwise, or logged a traceback,
fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import wait_until
from tasks_for_tests import WORKER_NAME_ENV, scratch_key

from jobcenter.storage.keys import Keys

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS_DIR.parent
EXAMPLES = REPO_ROOT / "examples"
DEMO_STEP_SECONDS = "0.05"  # the seed-000 demo steps: short, yet long enough to overlap
# Starting a Python process that imports jobcenter, on a loaded 2-core CI machine.
PROCESS_START_SECONDS = 15.0
CLI_TIMEOUT_SECONDS = 60.0  # a CLI call that hangs fails the test instead of the run
# A worker told to stop finishes its running tasks first; ours finish within a demo step.
WORKER_STOP_SECONDS = 15.0
JOB_SECONDS = 30.0  # an integration job that is not finished by then is stuck


def subprocess_env(redis_url: str, namespace: str, **extra: str) -> dict[str, str]:
    """The environment of a worker or CLI process of this test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCENTER_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
    )
    env["JOBCENTER_REDIS_URL"] = redis_url
    env["JOBCENTER_NAMESPACE"] = namespace
    env["JOBCENTER_DEMO_STEP_SECONDS"] = DEMO_STEP_SECONDS
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """One `jobcenter worker` process of a test."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    args: list[str]
    expect_exit: set[int] = field(default_factory=lambda: {0})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = WORKER_STOP_SECONDS) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} still running after {timeout:g} s; log:\n{self.log()}"
            ) from None

    def stop(self, timeout: float = WORKER_STOP_SECONDS) -> int:
        """SIGTERM, and the exit code once it has exited (AssertionError past timeout)."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)


class Workers:
    """Starts worker processes for one test and stops them at its end (see worker_pool)."""

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []
        self.redis = redis.Redis.from_url(redis_url)
        self.keys = Keys(namespace)

    def start(
        self,
        *options: str,
        name: str | None = None,
        modules: tuple[str, ...] = ("tasks_for_tests", "jobcenter.demo"),
        concurrency: int = 4,
        wait_ready: bool = True,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """Start `jobcenter worker MODULES --concurrency N OPTIONS`; by default return once it
        has registered itself in Redis (so it is claiming)."""
        name = name or f"w{len(self.started) + 1}"
        args = [
            sys.executable, "-m", "jobcenter", "worker", *modules,
            "--concurrency", str(concurrency),
            "--redis-url", self.redis_url, "--namespace", self.namespace, *options,
        ]  # fmt: skip
        log_path = self.log_dir / f"worker-{name}.log"
        extra = {WORKER_NAME_ENV: name, **(env or {})}
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                args,
                env=subprocess_env(self.redis_url, self.namespace, **extra),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.log_dir,
            )
        worker = WorkerProcess(name, proc, log_path, args)
        self.started.append(worker)
        if wait_ready:
            wait_until(
                lambda: self.handler_of(worker) is not None or proc.poll() is not None,
                timeout=PROCESS_START_SECONDS,
                message=f"worker {name} did not register",
            )
            if proc.poll() is not None:
                raise AssertionError(f"worker {name} exited at start:\n{worker.log()}")
        return worker

    def handler_of(self, worker: WorkerProcess) -> str | None:
        """The handler id a running worker registered under (None if not registered)."""
        for raw in self.redis.zrange(self.keys.workers(), 0, -1):
            handler = raw.decode() if isinstance(raw, bytes) else str(raw)
            pid = self.redis.hget(self.keys.worker_info(handler), "pid")
            if pid is not None and int(pid) == worker.pid:
                return handler
        return None

    def close(self) -> list[str]:
        """Stop every worker still running; returns what went wrong (empty if nothing)."""
        problems = []
        self.redis.set(scratch_key(self.namespace, "gate-all"), 1)  # unblock stuck tasks
        for worker in self.started:
            if worker.proc.poll() is None:
                worker.signal(signal.SIGTERM)
        for worker in self.started:
            try:
                code = worker.proc.wait(WORKER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
                problems.append(f"worker {worker.name} ignored SIGTERM; killed")
                code = None
            log = worker.log()
            if code is not None and code not in worker.expect_exit:
                problems.append(f"worker {worker.name} exited {code}")
            if "Traceback" in log:
                problems.append(f"worker {worker.name} logged a traceback")
            if problems:
                problems.append(f"--- log of worker {worker.name}:\n{log}")
        self.redis.close()
        return problems


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs `jobcenter ARGS` as a separate process, with this test's Redis and namespace."""

    def __init__(self, redis_url: str, namespace: str, cwd: Path) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.cwd = cwd
        self.background: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start `jobcenter ARGS` without waiting for it (see finish)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobcenter", *args],
            env=subprocess_env(self.redis_url, self.namespace),
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.background.append(proc)
        return proc

    def finish(
        self, proc: subprocess.Popen[str], timeout: float = CLI_TIMEOUT_SECONDS
    ) -> CliResult:
        """Wait for a started command; its exit code and output."""
        stdout, stderr = proc.communicate(timeout=timeout)
        return CliResult(proc.returncode, stdout, stderr)

    def close(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

    def __call__(
        self,
        *args: str,
        redis_url: str | None = None,
        timeout: float = CLI_TIMEOUT_SECONDS,
        env: dict[str, str] | None = None,
    ) -> CliResult:
        env = subprocess_env(redis_url or self.redis_url, self.namespace, **(env or {}))
        done = subprocess.run(
            [sys.executable, "-m", "jobcenter", *args],
            env=env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)


class Scratch:
    """The keys `tasks_for_tests` writes: what ran where, and the gates tasks wait on."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.redis = client
        self.namespace = namespace

    def runs(self) -> list[dict[str, Any]]:
        raw = self.redis.lrange(scratch_key(self.namespace, "runs"), 0, -1)
        return [json.loads(r) for r in raw]

    def events(self, event: str, task: str | None = None) -> list[dict[str, Any]]:
        return [
            r for r in self.runs() if r["event"] == event and (task is None or r["task"] == task)
        ]

    def open_gate(self, gate: str) -> None:
        self.redis.set(scratch_key(self.namespace, f"gate:{gate}"), 1)


def parents_finished_first(status: dict[str, Any], deps: dict[str, list[str]]) -> list[str]:
    """Every task that started before one of its parents finished (Redis TIME on both)."""
    tasks = status["tasks"]
    wrong = []
    for task_id, parents in deps.items():
        started = tasks[task_id]["started_at"]
        if started is None:
            continue
        for parent in parents:
            finished = tasks[parent]["finished_at"]
            if finished is None or started < finished:
                wrong.append(
                    f"{task_id} started at {started} before {parent} finished at {finished}"
                )
    return wrong


@contextmanager
def worker_pool(redis_url: str, namespace: str, log_dir: Path) -> Iterator[Workers]:
    """Workers for one test; at its end each must stop on SIGTERM with exit 0 and without a
    traceback in its log, or the test fails."""
    pool = Workers(redis_url, namespace, log_dir)
    yield pool
    problems = pool.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
