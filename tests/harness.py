"""Real `jobcenter` processes for the tiers that run them (integration, chaos, adversarial,
browser): the environment they get, `jobcenter worker` processes started until registered
(then signalled, frozen, killed), the handler id each registered under, and CLI runs.

A tier's pool says what its workers import and run with, and how its tests end:
integration_harness.Workers (every worker stops on SIGTERM with exit 0 and no traceback)
and chaos_harness.Cluster (short leases; workers and their rq children killed -9).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from helpers import wait_until

from jobcenter.storage.keyspace.keys import Keys
from jobcenter.storage.server.connection import client_for

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
# Starting a Python process that imports jobcenter, on a loaded 2-core CI machine (at load
# ~15 a worker took over 15 s to register). A deadline that catches a hang, never a bound a
# test asserts: a longer one only makes a broken start fail later.
PROCESS_START_SECONDS = 60.0
CLI_TIMEOUT_SECONDS = 60.0  # a CLI call that hangs fails the test instead of the run
# A worker told to stop finishes its running tasks first; the tests' tasks are short.
WORKER_STOP_SECONDS = 15.0
DEMO_STEP_SECONDS = "0.05"  # the seed-000 demo steps: short, yet long enough to overlap
# Variables of the test process that would leak into a process of the test: settings
# (JOBCENTER_*) and the chaos tasks' switches (CHAOS_*) are given by each test itself.
PRIVATE_PREFIXES = ("JOBCENTER_", "CHAOS_")


def subprocess_env(
    redis_url: str,
    namespace: str,
    *,
    path: Sequence[Path] = (TESTS_DIR,),
    settings: Mapping[str, str] | None = None,
    **extra: str,
) -> dict[str, str]:
    """The environment of a worker or CLI process of a test: its Redis and namespace, `path`
    (where its task modules are) first on its PYTHONPATH, the tier's `settings`, then `extra`
    (each overriding what comes before it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (*map(str, path), os.environ.get("PYTHONPATH", "")) if p
    )
    env["JOBCENTER_REDIS_URL"] = redis_url
    env["JOBCENTER_NAMESPACE"] = namespace
    env["JOBCENTER_DEMO_STEP_SECONDS"] = DEMO_STEP_SECONDS
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings or {})
    env.update(extra)
    return env


def spawn(args: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a process of the test in the folder of `log_path`, its output appended there."""
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            list(args),
            env=dict(env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=log_path.parent,
        )


def rq_children_of(pid: int) -> list[int]:
    """Pids of the rq child a worker started (found by its `--parent PID` argument, so it is
    found even after the worker died and the child was re-parented)."""
    wanted = ["jobcenter.runtime.rq_runner", "--parent", str(pid)]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if all(arg in argv for arg in wanted):
            found.append(int(entry.name))
    return found


@dataclass
class WorkerProcess:
    """One `jobcenter worker` process of a test."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    handler: str = ""  # the handler id it registered under, once it has
    expect_exit: set[int] = field(default_factory=lambda: {0})  # exits that are no failure
    rq_pids: set[int] = field(default_factory=set)  # its rq children seen so far
    killed_at: float | None = None
    stopped_by_test: bool = False  # an exit the test did not cause is a crash

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

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
        """SIGTERM (graceful: running tasks finish, the rq child stops), and the exit code
        once it has exited (AssertionError past timeout)."""
        self.stopped_by_test = True
        if self.alive:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def note_rq_children(self) -> None:
        if self.alive:
            self.rq_pids.update(rq_children_of(self.pid))

    def kill9(self) -> float:
        """kill -9; returns the wall-clock time of the kill."""
        self.note_rq_children()
        self.stopped_by_test = True
        self.killed_at = time.time()
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        return self.killed_at

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


class WorkerPool:
    """Starts `jobcenter worker` processes for one test (one namespace) and finds the handler
    id each registered under. A tier's pool names the task modules its workers import, the
    settings they run with, and how the test ends (its own `close`)."""

    modules: ClassVar[tuple[str, ...]] = ()  # task modules every worker imports by default
    name_env: ClassVar[str] = ""  # the variable telling a worker's tasks the worker's name
    path: ClassVar[tuple[Path, ...]] = (TESTS_DIR,)  # where those modules are
    settings: ClassVar[Mapping[str, str]] = {}  # JOBCENTER_* variables of the tier

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.log_dir = log_dir
        self.redis: Any = client_for(redis_url)  # a single Redis, a cluster, a Sentinel's
        self.keys = Keys(namespace)
        self.started: list[WorkerProcess] = []

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process of this pool's test."""
        return subprocess_env(
            self.redis_url, self.namespace, path=self.path, settings=self.settings, **extra
        )

    def start(
        self,
        *options: str,
        name: str | None = None,
        modules: Sequence[str] | None = None,
        concurrency: int = 4,
        wait_ready: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> WorkerProcess:
        """Start `jobcenter worker MODULES --concurrency N OPTIONS`; by default return once it
        has registered itself in Redis (so it is claiming)."""
        name = name or f"w{len(self.started) + 1}"
        args = [
            sys.executable, "-m", "jobcenter", "worker", *(modules or self.modules),
            "--concurrency", str(concurrency),
            "--redis-url", self.redis_url, "--namespace", self.namespace, *options,
        ]  # fmt: skip
        log_path = self.log_dir / f"worker-{name}.log"
        proc = spawn(args, self.env(**{self.name_env: name, **(env or {})}), log_path)
        worker = WorkerProcess(name, proc, log_path)
        self.started.append(worker)
        if wait_ready:
            wait_until(
                lambda: self._registered(worker) or not worker.alive,
                timeout=PROCESS_START_SECONDS,
                message=f"worker {name} did not register",
            )
            if not worker.alive:
                raise AssertionError(f"worker {name} exited at start:\n{worker.log()}")
        return worker

    def wait_recovery_round_done(self, interval: float) -> None:
        """Wait until this interval's recovery round has run (workers enqueue it at start) and
        no pass runs now, so a test can act knowing no pass runs until the next round."""

        def done() -> bool:
            seconds, _ = self.redis.time()
            ran = self.redis.get(self.keys.singleton_round("recovery"))
            running = self.redis.exists(self.keys.singleton("recovery"))
            return ran is not None and int(ran) >= seconds // interval and not running

        wait_until(done, timeout=PROCESS_START_SECONDS, message="no recovery round ran")

    def handler_of(self, worker: WorkerProcess) -> str | None:
        """The handler id a running worker is registered under now (None if it is not)."""
        for raw in self.redis.zrange(self.keys.workers(), 0, -1):
            handler = raw.decode() if isinstance(raw, bytes) else str(raw)
            pid = self.redis.hget(self.keys.worker_info(handler), "pid")
            if pid is not None and int(pid) == worker.pid:
                return handler
        return None

    def _registered(self, worker: WorkerProcess) -> bool:
        worker.handler = self.handler_of(worker) or ""
        return bool(worker.handler)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs `jobcenter ARGS` as a separate process, with this test's Redis and namespace."""

    def __init__(
        self,
        redis_url: str,
        namespace: str,
        cwd: Path,
        *,
        path: Sequence[Path] = (TESTS_DIR,),
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.cwd = cwd
        self.path = path
        self.settings = settings
        self.background: list[subprocess.Popen[str]] = []

    def env(self, redis_url: str | None = None, **extra: str) -> dict[str, str]:
        return subprocess_env(
            redis_url or self.redis_url,
            self.namespace,
            path=self.path,
            settings=self.settings,
            **extra,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start `jobcenter ARGS` without waiting for it (see finish)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobcenter", *args],
            env=self.env(),
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
        env: Mapping[str, str] | None = None,
    ) -> CliResult:
        done = subprocess.run(
            [sys.executable, "-m", "jobcenter", *args],
            env=self.env(redis_url, **(env or {})),
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)
