"""Tasks and test hooks for the chaos tier's worker processes (`jobcenter worker chaos_tasks`).

Every attempt of `chaos.step` records its start and its finish, with its fencing token
(`attempt:handler:nonce`), in an event list of the tests' own (``chaos:<namespace>:events``, never a
jobcenter key). The list's order is Redis's order, so a test can count re-runs, check that no
task started before its parents finished, and time a takeover from the `at` stamps.

Hooks, switched on by env vars of one worker process only:

- ``CHAOS_PUBLISH_CHUNK=n`` makes the leader write a job's tasks n at a time, so a small job
  splits in several chunks;
- ``CHAOS_STALL_SPLIT_AFTER=k`` makes the leader stop for good after writing k chunks (it
  records a ``split-stalled`` event first), so a test can kill -9 it mid-split;
- ``CHAOS_STALL_CONTINUE_AFTER=k`` makes the leader stop for good after k steps of a job's
  releases and cascades (it records a ``cascade-stalled`` event first), so a test can kill -9
  it mid-cascade;
- ``CHAOS_BREAK_LOOP=claim|leader|reporter|heartbeat`` makes that loop of the worker raise a
  RuntimeError (a bug, not a Redis error): the claim and leader loops at their first step,
  the reporter and heartbeat loops once a task runs.

``python -m chaos_tasks recover-pausing K`` runs one recovery pass that stops for good after
K repair calls (recording ``recovery-paused``), so a test can kill -9 a recovery half way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from functools import cache
from typing import Any

import redis

from jobcenter import Fatal, current_task, task
from jobcenter.config import Settings
from jobcenter.runtime import leader as leader_module
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.store import Store, connect

# A gate never opened must not keep a worker busy forever once its test has failed.
GATE_DEADLINE_SECONDS = 60.0
GATE_POLL_SECONDS = 0.01  # a test waits at most this long after opening a gate
# Recording an event rides out a Redis restart (the test restarts it within seconds).
RECORD_RETRY_SECONDS = 30.0
RECORD_RETRY_PAUSE = 0.05
WORKER_NAME_ENV = "CHAOS_WORKER_NAME"
EVENTS_URL_ENV = "CHAOS_EVENTS_URL"  # where events and gates live, if not on jobcenter's Redis


def events_key(namespace: str) -> str:
    return f"chaos:{namespace}:events"


def gate_key(namespace: str, gate: str) -> str:
    return f"chaos:{namespace}:gate:{gate}"


def all_gates_key(namespace: str) -> str:
    """Set by the fixtures at teardown: every gate opens, so no task outlives its test."""
    return f"chaos:{namespace}:gate-all"


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get(EVENTS_URL_ENV) or os.environ["JOBCENTER_REDIS_URL"])


def _namespace() -> str:
    return os.environ["JOBCENTER_NAMESPACE"]


def record(event: str, **fields: Any) -> None:
    """Append one event; retried while Redis is down or refuses writes (a test may be
    restarting it, or holding it out of memory)."""
    entry = json.dumps(
        {
            "e": event,
            "at": time.time(),
            "pid": os.getpid(),
            "worker": os.environ.get(WORKER_NAME_ENV, ""),
            **fields,
        }
    )
    deadline = time.monotonic() + RECORD_RETRY_SECONDS
    while True:
        try:
            _redis().rpush(events_key(_namespace()), entry)
            return
        except redis.RedisError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(RECORD_RETRY_PAUSE)


def _record_attempt(event: str) -> None:
    ctx = current_task()
    record(event, job=ctx.job_id, task=ctx.task_id, token=ctx.token, handler=ctx.handler)


def _gate_open(gate: str) -> bool:
    try:
        return bool(_redis().exists(gate_key(_namespace(), gate), all_gates_key(_namespace())))
    except (redis.ConnectionError, redis.TimeoutError):
        return False


@task(name="chaos.step")
def step(work: float = 0.0, gate: str = "", progress: bool = False) -> None:
    """Records its start, works `work` seconds (reporting progress if asked), waits for
    `gate` if given, records its finish."""
    _record_attempt("start")
    if work:
        time.sleep(work)  # stands for the task's work, so attempts overlap and kills land
    if progress:
        current_task().progress("worked")
    if gate:
        _wait_for_gate(gate)
    _record_attempt("finish")


@task(name="chaos.heeding_step")
def heeding_step(gate: str) -> None:
    """chaos.step's wait for `gate`, in a task that heeds its stop (a thread cannot be
    killed): once current_task().cancelled it records 'stopped' and raises TaskCancelled."""
    _record_attempt("start")
    ctx = current_task()
    deadline = time.monotonic() + GATE_DEADLINE_SECONDS
    while not _gate_open(gate):
        if ctx.cancelled:
            _record_attempt("stopped")
            ctx.check_cancelled()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gate {gate!r} never opened")
        time.sleep(GATE_POLL_SECONDS)
    _record_attempt("finish")


@task(name="chaos.async_step")
async def async_step(gate: str) -> None:
    """chaos.step's wait for `gate` as a coroutine: records 'stopped' if it is cancelled."""
    _record_attempt("start")
    deadline = time.monotonic() + GATE_DEADLINE_SECONDS
    try:
        while not _gate_open(gate):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"gate {gate!r} never opened")
            await asyncio.sleep(GATE_POLL_SECONDS)
    except asyncio.CancelledError:
        _record_attempt("stopped")
        raise
    _record_attempt("finish")


def _wait_for_gate(gate: str) -> None:
    deadline = time.monotonic() + GATE_DEADLINE_SECONDS
    while not _gate_open(gate):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gate {gate!r} never opened")
        time.sleep(GATE_POLL_SECONDS)


@task(name="chaos.hold")
def hold(gate: str) -> str:
    """Records its start, waits for the gate of its own attempt (`<gate>:<its token>`, so a
    test releases two runs of one task one at a time), records its finish; returns its token."""
    _record_attempt("start")
    token = current_task().token
    _wait_for_gate(f"{gate}:{token}")
    _record_attempt("finish")
    return token


@task(name="chaos.fail")
def fail() -> None:
    """Records its start, then fails for good: a task whose true outcome is failed."""
    _record_attempt("start")
    raise Fatal("chaos.fail fails by design")


@task(name="chaos.elements")
def elements(count: int) -> list[int]:
    """The source of a map: the list 0 .. count-1."""
    return list(range(count))


@task(name="chaos.double")
def double(x: int) -> int:
    """One map instance: its element, doubled."""
    return 2 * x


@task(name="chaos.total")
def total(parts: list[int]) -> int:
    """Gathers a map's results (in element order)."""
    return sum(parts)


# -- hooks ----------------------------------------------------------------------------------


def _stall_forever(event: str, **fields: Any) -> None:
    record(event, **fields)
    threading.Event().wait()  # until kill -9


def _install_split_hooks() -> None:
    chunk = os.environ.get("CHAOS_PUBLISH_CHUNK")
    if chunk:
        leader_module.PUBLISH_CHUNK = int(chunk)
    stall_after = os.environ.get("CHAOS_STALL_SPLIT_AFTER")
    if not stall_after:
        return
    original = Store.publish_tasks
    written = {"chunks": 0}

    def publish_then_stall(self: Store, job_id: str, handler: str, *args: Any) -> int:
        code = original(self, job_id, handler, *args)
        written["chunks"] += 1
        if written["chunks"] >= int(stall_after):
            _stall_forever("split-stalled", job=job_id, handler=handler, code=code)
        return code

    Store.publish_tasks = publish_then_stall  # type: ignore[method-assign]


_install_split_hooks()


def _install_cascade_hook() -> None:
    stall_after = os.environ.get("CHAOS_STALL_CONTINUE_AFTER")
    if not stall_after:
        return
    original = Store.continue_frontier
    steps = {"n": 0}

    def continue_then_stall(self: Store, job_id: str) -> int:
        left = original(self, job_id)
        steps["n"] += 1
        if steps["n"] >= int(stall_after):
            _stall_forever("cascade-stalled", job=job_id, left=left)
        return left

    Store.continue_frontier = continue_then_stall  # type: ignore[method-assign]


_install_cascade_hook()

BREAK_LOOP_ENV = "CHAOS_BREAK_LOOP"
# the Worker method each loop calls for its work, and whether it breaks only once a task runs
LOOP_STEPS = {
    "claim": ("_claim_once", False),
    "leader": ("_lead", False),
    "reporter": ("_report", True),
    "heartbeat": ("_heartbeat", True),
}


def _install_loop_breaker() -> None:
    loop = os.environ.get(BREAK_LOOP_ENV)
    if not loop:
        return
    from jobcenter.runtime.worker import Worker

    method, once_running = LOOP_STEPS[loop]
    original = getattr(Worker, method)

    def broken(self: Worker, *args: Any, **kwargs: Any) -> Any:
        if once_running and not self.running:
            return original(self, *args, **kwargs)
        raise RuntimeError(f"the {loop} loop is broken by the test")

    setattr(Worker, method, broken)


_install_loop_breaker()


def recover_pausing(after_repairs: int) -> None:
    """One recovery pass (as `jobcenter recover --once` runs it) that stops for good after
    `after_repairs` repair calls, leaving the rest of its work undone."""
    original = Store.repair
    calls = {"n": 0}

    def repair_then_pause(self: Store, *args: Any, **kwargs: Any) -> int:
        repaired = original(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] >= after_repairs:
            _stall_forever("recovery-paused", repairs=calls["n"])
        return repaired

    Store.repair = repair_then_pause  # type: ignore[method-assign]
    settings = Settings.from_env()
    report = Recovery(Store(connect(settings.redis_url), settings), "chaos-recovery").run()
    print(json.dumps(report.to_dict()))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "recover-pausing":
        recover_pausing(int(sys.argv[2]))
    else:
        sys.exit("usage: python -m chaos_tasks recover-pausing REPAIRS")
