"""No-op tasks for `make bench` (`jobcenter worker bench.tasks`, with scripts/ on PYTHONPATH).

Each task does one Redis RPUSH of "<task id>|<fencing token>" to its job's bench list. The
list proves every task ran (its length, one entry per attempt), and its order proves no
dependency order was broken: a parent pushes before it completes, a child only after it
starts, so every parent's entry must come before its children's.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis.asyncio

from jobcenter import Fatal, current_task, task
from jobcenter.storage.server.connection import client_for

REDIS_URL_ENV = "JOBCENTER_BENCH_REDIS_URL"  # where the bench lists live (the bench's Redis)
RAN_KEY_PREFIX = "bench:ran:"  # + job id: the list of tasks of that job that ran
MAX_CONNECTIONS = 4096  # above any --concurrency the bench uses
RESULT = b"r" * 97  # packs to 100 bytes (msgpack bin 8: 3 bytes of header)

_client: Any = None
_client_lock = threading.Lock()
_async_client: Any = None  # bench.async_noop's, on the worker's event loop


def ran_key(job_id: str) -> str:
    """The bench list of one job."""
    return RAN_KEY_PREFIX + job_id


def _redis() -> Any:
    """One client per process (its pool gives each task thread a connection)."""
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                # one connection per task thread: redis-py's default pool stops at 100
                _client = client_for(  # one Redis or a cluster (--only=cluster)
                    os.environ[REDIS_URL_ENV], max_connections=MAX_CONNECTIONS
                )
    return _client


def _record() -> None:
    ctx = current_task()
    _redis().rpush(ran_key(ctx.job_id), f"{ctx.task_id}|{ctx.token}")


@task(name="bench.noop")
def noop() -> None:
    """The benchmark's unit of work: record that this attempt ran, nothing else."""
    _record()


@task(name="bench.async_noop")
async def async_noop() -> None:
    """bench.noop as a coroutine function (W1-async): it records with an asyncio client, on
    the worker's event loop, the way an I/O-bound async task does its I/O."""
    global _async_client
    if _async_client is None:  # one per process, made on the event loop it serves
        _async_client = redis.asyncio.Redis.from_url(os.environ[REDIS_URL_ENV])
    ctx = current_task()
    await _async_client.rpush(ran_key(ctx.job_id), f"{ctx.task_id}|{ctx.token}")


@task(name="bench.fail")
def fail() -> None:
    """Record the attempt, then fail for good: every descendant becomes upstream_failed."""
    _record()
    raise Fatal("bench: failing on purpose to cascade")


@task(name="bench.sleep")
def sleep(seconds: float) -> None:
    """A task of a known duration (`--only=order`: the claim order decides the makespan)."""
    time.sleep(seconds)


@task(name="bench.work")
def work(seconds: float) -> float:
    """bench.noop, then a known duration of work (`--only=burst`'s level: its makespan);
    returns what its body took (its record and its sleep), in ms."""
    began = time.monotonic()
    _record()
    time.sleep(seconds)
    return (time.monotonic() - began) * 1000


@task(name="bench.result")
def result() -> bytes:
    """bench.noop that returns 100 bytes (W1r: the cost of stored results)."""
    _record()
    return RESULT


@task(name="bench.elements")
def elements(count: int) -> list[int]:
    """A map's source: `count` elements."""
    _record()
    return list(range(count))


@task(name="bench.noop_item")
def noop_item(item: int) -> int:
    """A map instance: records, returns its element."""
    _record()
    return item


@task(name="bench.gather")
def gather(parts: list[int]) -> int:
    """A map's join: how many results it received."""
    _record()
    return len(parts)
