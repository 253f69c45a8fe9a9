"""Tasks for the retry, timeout, dead-letter, priority and retention tests
(`jobcenter worker tasks_for_tests retry_tasks`).

Like tasks_for_tests, each task writes what it did into keys of the tests' own
(``jctest:{<namespace>}:…``, formed by `tasks_for_tests.scratch_key`), never into jobcenter's.
Every record carries the attempt's fencing token and the Redis TIME it was taken at, so a test
compares times on one clock with the ones jobcenter stores.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

import redis
from tasks_for_tests import scratch_key

from jobcenter import Retry, current_task, task

# A sleeping task checks this often whether the test is over (the fixture sets "gate-all").
SLEEP_POLL_SECONDS = 0.02


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["JOBCENTER_REDIS_URL"])


def key(namespace: str, what: str) -> str:
    """A scratch key of these tasks; the tests read them with the same function."""
    return scratch_key(namespace, f"retry:{what}")


def _key(what: str) -> str:
    return key(os.environ["JOBCENTER_NAMESPACE"], what)


def _now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def _record(list_name: str, **extra: Any) -> None:
    ctx = current_task()
    r = _redis()
    entry = {
        "job": ctx.job_id,
        "task": ctx.task_id,
        "attempt": ctx.attempt,
        "token": ctx.token,
        "pid": os.getpid(),
        "at": _now(r),
        **extra,
    }
    r.rpush(_key(list_name), json.dumps(entry))


def records(client: redis.Redis, namespace: str, list_name: str) -> list[dict[str, Any]]:
    """What the tasks recorded into `list_name`, in the order they did it."""
    return [json.loads(raw) for raw in client.lrange(key(namespace, list_name), 0, -1)]


@task(name="retry_tasks.flaky")
def flaky(times: int, counter: str) -> int:
    """Records its start, then fails its first `times` calls (counted in Redis), then
    succeeds."""
    calls = int(_redis().incr(_key(f"count:{counter}")))
    _record("starts", calls=calls)
    if calls <= times:
        raise RuntimeError(f"flaky call {calls} of {times} failing on purpose")
    return calls


@task(name="retry_tasks.retry_once")
def retry_once(delay: float, counter: str) -> int:
    """Asks for a retry after `delay` seconds on its first call; succeeds on the next."""
    calls = int(_redis().incr(_key(f"count:{counter}")))
    _record("starts", calls=calls)
    if calls == 1:
        raise Retry("come back later", delay=delay)
    return calls


@task(name="retry_tasks.sleep_then_mark")
def sleep_then_mark(seconds: float) -> None:
    """Records its start (with its pid), sleeps `seconds`, then records that it woke: the
    side effect a kill at the timeout must prevent. Ends its sleep early once the test is
    over, so a thread that cannot be stopped does not hold its worker up at teardown."""
    _record("slept")
    r = _redis()
    deadline = time.monotonic() + seconds
    gate_all = scratch_key(os.environ["JOBCENTER_NAMESPACE"], "gate-all")
    while time.monotonic() < deadline and not r.exists(gate_all):
        time.sleep(SLEEP_POLL_SECONDS)
    _record("woke")


@task(name="retry_tasks.ordered")
def ordered(label: str) -> str:
    """Records that it ran; the order of the records is the order tasks ran in."""
    _record("order", label=label)
    return label


@task(name="retry_tasks.noop")
def noop(n: int = 0) -> int:
    """Does nothing: the small job of the retention load."""
    return n
