"""Tasks that worker processes started by the tests import (`jobcenter worker tasks_for_tests`).

Each task reports what it did into Redis keys of its own (never jobcenter's), under
``jctest:{<namespace>}:…`` (one hash tag: a gate check reads two keys in one call, also on
a Redis Cluster), so a test can see which worker ran what, how often, and wait on it.
A task that must keep running until the test says so polls a *gate* key the test sets: no
task sleeps for longer than a demo step.

These writes ride out a failover of the Redis that holds them (`_scratch`): to jobcenter, a
task whose own Redis call raises has failed, like any task whose store is down, and that
attempt counts against its retries. A test that kills a master must see what jobcenter does
through the failover, not attempts the test's own bookkeeping failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import jobcenter
from jobcenter import Fatal, Retry, current_task, gate, task

try:
    from jobcenter.storage.server.connection import client_for
    from jobcenter.storage.server.errors import (
        ClusterClientError,
        ReadOnlyError,
        RedisError,
        unreachable,
    )
except ImportError:  # a worker of the previous release loads these tasks too (rolling upgrade)
    from jobcenter.storage.connection import client_for  # type: ignore[no-redef]
    from jobcenter.storage.errors import (  # type: ignore[no-redef]
        ClusterClientError,
        ReadOnlyError,
        RedisError,
        unreachable,
    )

# A gate that is never opened must not keep a worker busy forever once its test has failed.
GATE_DEADLINE_SECONDS = 60.0
GATE_POLL_SECONDS = 0.01  # short: a test waits this long at most after opening a gate
WORKER_NAME_ENV = "JOBCENTER_TEST_WORKER_NAME"  # set per worker process by the fixture
# A failover (node timeout 3 s, a promotion 5 - 6 s on a loaded machine) ends well within this.
SCRATCH_OUTAGE_SECONDS = 60.0
SCRATCH_RETRY_SECONDS = 0.05  # pause between tries of a scratch call while Redis fails over

T = TypeVar("T")


@cache
def _redis() -> Any:
    return client_for(os.environ["JOBCENTER_REDIS_URL"])  # a single Redis or a cluster


def scratch_key(namespace: str, what: str) -> str:
    """A key of the tests' own; the fixtures use the same function."""
    return f"jctest:{{{namespace}}}:{what}"


def _waits_out(exc: RedisError) -> bool:
    """Whether `exc` is Redis failing over (unreachable, no node for the slot yet, a demoted
    primary refusing writes) rather than a wrong call."""
    return unreachable(exc) or isinstance(exc, ClusterClientError | ReadOnlyError)


def _scratch(call: Callable[[Any], T]) -> T:
    """`call` on the scratch client, tried again while Redis fails over (see the module's
    doc), for SCRATCH_OUTAGE_SECONDS at most."""
    deadline = time.monotonic() + SCRATCH_OUTAGE_SECONDS
    while True:
        try:
            return call(_redis())
        except RedisError as exc:
            if not _waits_out(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(SCRATCH_RETRY_SECONDS)  # a pause between tries, not a wait for an event


def _key(what: str) -> str:
    return scratch_key(os.environ["JOBCENTER_NAMESPACE"], what)


def _record(event: str, **extra: object) -> None:
    ctx = current_task()
    entry = {
        "event": event,
        "job": ctx.job_id,
        "task": ctx.task_id,
        "attempt": ctx.attempt,
        "handler": ctx.handler,
        "worker": os.environ.get(WORKER_NAME_ENV, ""),
        "pid": os.getpid(),
        "code": os.path.dirname(jobcenter.__file__),  # which release's package runs it
        # a push tried again after a lost reply may land twice: Scratch.runs drops the copy
        "entry": uuid.uuid4().hex,
        **extra,
    }
    line = json.dumps(entry)
    _scratch(lambda r: r.rpush(_key("runs"), line))


@task(name="tasks_for_tests.record")
def record(label: str = "", pause: float = 0.0) -> str:
    """Records that it ran (and on which worker), works `pause` seconds, returns."""
    _record("run", label=label)
    if pause:
        time.sleep(pause)  # stands for work, so that attempts overlap
    return label


@task(name="tasks_for_tests.fire_info")
def fire_info(*args: Any, **kwargs: Any) -> str | None:
    """Records the fire time and schedule its context says, and the args it was given; with
    `gate`, then runs like block() until the test opens it, and fails if the test set
    `fail:<gate>`. Returns the fire time (ISO 8601)."""
    ctx = current_task()
    fire = ctx.fire_time.isoformat() if ctx.fire_time is not None else None
    _record("fire", fire_time=fire, schedule_id=ctx.schedule_id, args=list(args), kwargs=kwargs)
    gate = kwargs.get("gate")
    if gate:
        block(str(gate))
        if _scratch(lambda r: r.exists(_key(f"fail:{gate}"))):
            raise RuntimeError(f"run for {gate} fails on purpose")
    return fire


@task(name="tasks_for_tests.span")
def span(pause: float = 0.0, group: str = "") -> None:
    """Records its start, works `pause` seconds, records its end: the side log from which
    a test reads how many ran at once (Redis orders the entries of every worker)."""
    _record("start", group=group)
    if pause:
        time.sleep(pause)  # stands for work, so that attempts overlap
    _record("end", group=group)


@gate("warehouse", backoff=0.2, give_up_after=60.0)
def warehouse_ready() -> bool:
    """A gate the test opens by setting the "warehouse-up" key."""
    return bool(_redis().exists(_key("warehouse-up")))


@gate("licence-server", backoff=0.1, give_up_after=0.5)
def licence_server() -> bool:
    """A gate that never opens (and gives up fast)."""
    return False


@task(name="tasks_for_tests.block")
def block(gate: str) -> str:
    """Records that it started, then runs until the test sets the gate key."""
    _record("started", gate=gate)
    deadline = time.monotonic() + GATE_DEADLINE_SECONDS
    gates = (_key(f"gate:{gate}"), _key("gate-all"))
    # "gate-all" is set by the fixture at teardown, so a failed test leaves no task blocked
    while not _scratch(lambda r: r.exists(*gates)):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gate {gate!r} never opened")
        time.sleep(GATE_POLL_SECONDS)
    _record("finished", gate=gate)
    return gate


@task(name="tasks_for_tests.echo")
def echo(**values: object) -> dict[str, object]:
    """Returns its keyword arguments (its inputs): what its parents handed it."""
    _record("run", label="echo")
    return values


@task(name="tasks_for_tests.block_then_fail")
def block_then_fail(gate: str, message: str) -> None:
    """Runs like block() until the test opens the gate of this attempt (`<gate>:<attempt>`),
    then fails with `message`."""
    block(f"{gate}:{current_task().attempt}")
    raise RuntimeError(message)


@task(name="tasks_for_tests.report_then_block")
def report_then_block(message: str, gate: str) -> str:
    """Reports progress, records its fencing token, then waits for the gate like block()."""
    current_task().progress(message)
    _record("reported", token=current_task().token)
    return block(gate)


@task(name="tasks_for_tests.fail_times")
def fail_times(times: int, counter: str) -> int:
    """Fails its first `times` calls (counted in Redis across workers), then succeeds."""
    calls = int(_redis().incr(_key(f"count:{counter}")))
    _record("run", calls=calls)
    if calls <= times:
        raise RuntimeError(f"failing call {calls} of {times} on purpose")
    return calls


@task(name="tasks_for_tests.fatal")
def fatal(message: str = "fatal on purpose") -> None:
    """Fails without a retry."""
    raise Fatal(message)


@task(name="tasks_for_tests.retry_later")
def retry_later(delay: float) -> None:
    """Asks for a retry after `delay` seconds, every time."""
    _record("run", delay=delay)
    raise Retry("not yet", delay=delay)


@task(name="tasks_for_tests.log_line")
def log_line(message: str, level: str = "warning") -> str:
    """Logs `message` at `level` from inside the task (what --log-format json tags with its
    job)."""
    logging.getLogger("tasks_for_tests").log(logging.getLevelNamesMapping()[level.upper()], message)
    return message


@task(name="tasks_for_tests.returns")
def returns(kind: str, size: int = 0) -> object:
    """Returns a value that cannot be stored (`set`) or `size` bytes (`bytes`)."""
    return {1, 2} if kind == "set" else b"x" * size


@task(name="tasks_for_tests.end_process")
def end_process(code: int = 0) -> None:
    """Ends its process at once with os._exit(code): in the thread pool, the worker's own."""
    os._exit(code)


@task(name="tasks_for_tests.fork_child_that_exits")
def fork_child_that_exits(code: int) -> int:
    """Forks a child that ends at once with os._exit(code); returns the child's exit code."""
    pid = os.fork()
    if pid == 0:
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@task(name="tasks_for_tests.leave_thread_running")
def leave_thread_running() -> str:
    """Starts a thread that is no daemon and never ends, and returns at once."""
    thread = threading.Thread(target=threading.Event().wait, name="left-behind", daemon=False)
    thread.start()
    return thread.name


@task(name="tasks_for_tests.prints")
def prints(total_bytes: int, then: str = "return", label: str = "") -> int:
    """Prints `total_bytes` of numbered 100-byte lines (`label` in each), logs one line at
    INFO and one at DEBUG, writes one to stderr and one as bytes to stdout; then returns
    the line count, fails (`then="fail"`), or prints on until its attempt is stopped or
    killed (`"forever"`)."""
    logger = logging.getLogger("tasks_for_tests")
    logger.info("info line %s", label)
    logger.debug("debug line %s", label)
    print(f"stderr line {label}", file=sys.stderr)
    sys.stdout.buffer.write(f"bytes line {label}\n".encode())
    lines = total_bytes // 100
    for n in range(lines):
        print(f"line {n:09d} {label}".ljust(99, "."))
    if then == "fail":
        raise RuntimeError(f"failed after printing {lines} lines")
    n = lines
    while then == "forever":
        print(f"line {n:09d} {label}".ljust(99, "."), flush=True)
        n += 1
        if n % 100 == 0:
            _record("printed", lines=n, label=label)
            current_task().check_cancelled()
            time.sleep(0.01)
    return lines


@task(name="tasks_for_tests.aprints")
async def aprints(label: str) -> str:
    """A coroutine: prints a line before and after an await, as another coroutine may run
    between them."""
    print(f"before {label}")
    await asyncio.sleep(0.05)
    print(f"after {label}")
    return label


@task(name="tasks_for_tests.spawner")
def spawner(depth: int = 1, gate: str = "", fail: bool = False) -> Any:
    """Starts a child job and ends with it: with depth > 1 the child spawns in turn; at the
    bottom a task that records its run (or blocks on `gate`, or fails)."""
    # imported here: workers of the previous release load this module too (rolling upgrade)
    from jobcenter import spawn

    _record("run", label=f"spawner-{depth}")
    if depth > 1:
        again = {"depth": depth - 1, "gate": gate, "fail": fail}
        inner: dict[str, Any] = {"id": "inner", "task": "tasks_for_tests.spawner", "kwargs": again}
    elif gate:
        inner = {"id": "inner", "task": "tasks_for_tests.block", "args": [gate]}
    elif fail:
        inner = {"id": "inner", "task": "tasks_for_tests.fatal", "args": ["the child fails"]}
    else:
        inner = {"id": "inner", "task": "tasks_for_tests.record", "args": [f"leaf-{depth}"]}
    return spawn({"name": f"child-{depth}", "tasks": [inner]}, result="inner")
