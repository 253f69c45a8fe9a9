"""The integration tier's use of the process harness (tests/harness.py): real `jobcenter
worker` processes and real CLI runs against the session's redis-server, each test in its own
namespace.

Workers import `tasks_for_tests` (tests/ is put on their PYTHONPATH) and `jobcenter.demo`
(with short demo steps). At teardown every worker still running gets SIGTERM and must exit
0 within a deadline (else kill -9); a worker that exited otherwise, or logged a traceback,
fails the test.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import REPO_ROOT, WORKER_STOP_SECONDS, WorkerPool
from tasks_for_tests import WORKER_NAME_ENV, scratch_key

from jobcenter.storage.store import StartedTask

EXAMPLES = REPO_ROOT / "examples"
JOB_SECONDS = 30.0  # an integration job that is not finished by then is stuck


class Workers(WorkerPool):
    """Worker processes of one test that must end well (see worker_pool)."""

    modules = ("tasks_for_tests", "jobcenter.demo")
    name_env = WORKER_NAME_ENV

    def close(self) -> list[str]:
        """Stop every worker still running; returns what went wrong (empty if nothing)."""
        problems = []
        self.redis.set(scratch_key(self.namespace, "gate-all"), 1)  # unblock stuck tasks
        for worker in self.started:
            if worker.alive:
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


class Scratch:
    """The keys `tasks_for_tests` writes: what ran where, and the gates tasks wait on."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.redis = client
        self.namespace = namespace

    def runs(self) -> list[dict[str, Any]]:
        """The entries the tasks recorded, in order; one pushed twice (tried again after a
        reply lost in a failover) counts once."""
        raw = self.redis.lrange(scratch_key(self.namespace, "runs"), 0, -1)
        entries: dict[str, dict[str, Any]] = {}
        for line in raw:
            entry = json.loads(line)
            entries.setdefault(entry["entry"], entry)
        return list(entries.values())

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
def worker_pool(
    redis_url: str, namespace: str, log_dir: Path, pool_class: type[Workers] = Workers
) -> Iterator[Workers]:
    """Workers for one test; at its end each must stop on SIGTERM with exit 0 and without a
    traceback in its log, or the test fails. A test that failed has its workers stopped
    too (not left running after it), and its own error stands."""
    pool = pool_class(redis_url, namespace, log_dir)
    try:
        yield pool
    except BaseException:
        pool.close()
        raise
    problems = pool.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


class RecordingRunner:
    """A worker's runner that takes the attempts it is given and runs none (tests that drive
    a Worker object's claim and report paths in-process)."""

    busy = 0

    def __init__(self) -> None:
        self.started: list[StartedTask] = []

    def submit(self, task: StartedTask, *_: Any) -> None:
        self.started.append(task)

    def stop(self, *_: Any) -> bool:
        return True  # stopped (it never ran)

    def outputs(self) -> dict[Any, Any]:
        return {}  # nothing runs: no task logs
