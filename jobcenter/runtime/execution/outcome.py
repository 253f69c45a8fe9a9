"""The outcome policy of one attempt: its payload decoded, the task called, and every way it
can end turned into an Outcome (a return, any exception, BaseException too: SystemExit,
KeyboardInterrupt, ...), with its error text and its retry delay. The runners (threads.py,
processes.py) call `execute` or `execute_async`; this module knows nothing of threads or
processes."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import traceback
import types
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from jobcenter.config import DEFAULT_RESULT_MAX_BYTES
from jobcenter.errors import Fatal, Retry, SpecError
from jobcenter.model import codec
from jobcenter.model.fire_times import fire_datetime
from jobcenter.model.spawn import Spawn
from jobcenter.storage.keyspace.records import TaskPayload
from jobcenter.storage.store import NO_RESULT, StartedTask

from .. import registry
from ..context import TaskContext, set_current, valid_utf8
from ..stopping import AttemptKey, Stop
from ..tasklogs import AttemptLog, ended_line

log = logging.getLogger(__name__)

ERROR_TEXT_MAX = 4_000  # characters of an error (with its traceback) kept in Redis
ERROR_MESSAGE_MAX = 1_000  # characters of an exception's message on the error's first line
ERROR_LINE_MAX = 500  # characters kept of each traceback line (a huge message is one line)
Progress = Callable[[StartedTask, str], None]


class Done(Protocol):
    """Where a runner sends the outcomes of the attempts it was given: one or more at a time."""

    def __call__(self, *outcomes: Outcome) -> None: ...


@dataclass
class Outcome:
    task: StartedTask
    ok: bool
    error: str = ""
    retry_delay_ms: int = -1  # < 0: do not retry
    # set when this worker has no code for the task: the attempt is given back, unused
    missing_task: str = ""
    # set when a gate the task requires said no: the attempt goes back, unused, to wait
    gate: str = ""
    gate_backoff_ms: int = 0
    gate_give_up_ms: int = 0
    result: bytes = NO_RESULT  # what the task returned, packed (stored with its success)
    seconds: float = 0.0  # how long it ran (ThreadRunner): what prefetching and learning go by
    log: bytes = b""  # the attempt's output, bounded (tasklogs.py); empty: nothing to store


def with_log(outcome: Outcome, output: AttemptLog, handler: str) -> Outcome:
    """The outcome with its attempt's log, closed by the worker's line on how it ended; a
    silent attempt that succeeded stores none."""
    if not (outcome.ok and output.empty()):
        line = ended_line(outcome.ok, outcome.error, outcome.task.attempt, handler)
        output.note(line)
        outcome.log = output.render()
    return outcome


class ResultRefused(Exception):
    """A task returned a value that cannot be stored: not msgpack-able, or over the limit.
    Running it again would return the same, so it fails the task without a retry."""


def pack_result(task_name: str, value: object, max_bytes: int) -> bytes:
    """The task's return value as stored in Redis; ResultRefused names what is wrong."""
    if value is None:
        return NO_RESULT
    if isinstance(value, Spawn):  # a child job to start: the store starts it (model/spawn.py)
        return value.packed()
    try:
        return codec.pack(value, what="the result", max_bytes=max_bytes)
    except codec.TooLarge:
        raise ResultRefused(
            f"ResultTooLarge: task {task_name!r} returned a result of more than {max_bytes} "
            "bytes packed (JOBCENTER_RESULT_MAX_BYTES); it is not stored cut short: keep "
            "bulk data elsewhere and return a reference to it"
        ) from None
    except SpecError as exc:
        raise ResultRefused(
            f"TypeError: task {task_name!r} returned a {type(value).__name__} that cannot be "
            f"stored as its result ({exc}); a result must be msgpack-able: None, bool, int, "
            "float, str, bytes, and lists and dicts of them"
        ) from None


def attempt_key(task: StartedTask) -> AttemptKey:
    return (task.job_id, task.index, task.token)


def ignore_stop(_: Stop) -> None:
    """A runner's default listener of its stops (the worker passes its own)."""


def backoff_ms(attempt: int, base: float, cap: float) -> int:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    return int(random.uniform(0, min(cap, base * 2 ** (attempt - 1))) * 1000)


def describe(exc: BaseException, note: str = "") -> str:
    """`Type: message` (and `note`), then the traceback: valid UTF-8, at most ERROR_TEXT_MAX
    characters (its start and end kept). Never raises, whatever the exception: huge, holding
    text UTF-8 cannot encode, or with a str() that raises."""
    name = type(exc).__name__
    try:
        head = f"{name}: {_clip(_safe_str(exc), ERROR_MESSAGE_MAX)}" + (f"\n{note}" if note else "")
        lines = "".join(traceback.format_exception(exc)).replace("\t", "  ").splitlines()
        text = "\n".join([head, *(_clip(line, ERROR_LINE_MAX) for line in lines)])
    except BaseException as failure:  # a description must not end the attempt
        text = f"{name} (its traceback could not be formatted: {type(failure).__name__})"
    return valid_utf8(_clip(text, ERROR_TEXT_MAX))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException as failure:  # a hostile __str__ may raise anything
        return f"<str() of the exception raised {type(failure).__name__}>"


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, keeping its start and its end (a traceback's end
    names the failing line)."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} characters cut ...] "
    keep = max(0, limit - len(marker))
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


def decode(task: StartedTask) -> TaskPayload:
    """The task's payload, its kwargs joined by its inputs (the parents' results)."""
    payload = TaskPayload.unpack(task.payload)
    if task.inputs:
        payload = replace(payload, kwargs={**payload.kwargs, **task.input_kwargs()})
    return payload


def task_label(task: StartedTask) -> str:
    """The task's id for a log line (its index, '#3', when its payload cannot say)."""
    try:
        name = TaskPayload.unpack(task.payload).id
    except Exception:
        name = None
    return name if name is not None else f"#{task.index}"


def retry_delay(task: StartedTask, payload: TaskPayload) -> int:
    return backoff_ms(task.attempt, payload.retry_backoff, payload.retry_backoff_max)


def context_for(
    task: StartedTask, payload: TaskPayload, handler: str, report: Callable[[str], None]
) -> TaskContext:
    return TaskContext(
        task.job_id,
        payload.id if payload.id is not None else str(task.index),
        task.attempt,
        handler,
        report,
        task.token,
        fire_datetime(payload.fire_time),
        payload.schedule_id,
    )


def execute(
    task: StartedTask,
    payload: TaskPayload,
    ctx: TaskContext,
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
) -> Outcome:
    """Run one attempt and turn what happened into an Outcome; never raises."""
    closed = gate_outcome(task, payload)
    if closed is not None:
        return closed
    set_current(ctx)
    try:
        value = _call(registry.lookup(payload.task), payload, ctx)
        return Outcome(task, True, result=pack_result(payload.task, value, result_max_bytes))
    except BaseException as exc:
        return failed(task, payload, exc)
    finally:
        set_current(None)


async def execute_async(
    task: StartedTask,
    payload: TaskPayload,
    ctx: TaskContext,
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
) -> Outcome:
    """execute() for a coroutine function's attempt, awaited on the runner's event loop (as
    an asyncio task: current_task() is its own); never raises."""
    closed = gate_outcome(task, payload)
    if closed is not None:
        return closed
    set_current(ctx)
    try:
        fn = registry.lookup(payload.task)
        value = await _until_stopped(fn(*payload.args, **payload.kwargs), ctx)
        return Outcome(task, True, result=pack_result(payload.task, value, result_max_bytes))
    except BaseException as exc:
        return failed(task, payload, exc)


def gate_outcome(task: StartedTask, payload: TaskPayload) -> Outcome | None:
    """The outcome of an attempt one of whose gates says no (it does not run), or None."""
    closed = closed_gate(payload.gates)
    if closed is None:
        return None
    return Outcome(
        task,
        False,
        f"gate {closed.name!r} said no",
        gate=closed.name,
        gate_backoff_ms=int(closed.backoff * 1000),
        gate_give_up_ms=int(closed.give_up_after * 1000),
    )


def failed(task: StartedTask, payload: TaskPayload, exc: BaseException) -> Outcome:
    """The outcome of an attempt whose task raised `exc`."""
    if isinstance(exc, ResultRefused):
        return Outcome(task, False, str(exc))
    if isinstance(exc, registry.UnknownTask):  # not the task failing: a worker with it may come
        return Outcome(task, False, str(exc), missing_task=payload.task)
    if isinstance(exc, Fatal):
        return Outcome(task, False, describe(exc))
    if isinstance(exc, Retry):
        delay = exc.delay if exc.delay is not None else payload.retry_backoff
        return Outcome(task, False, describe(exc), int(delay * 1000))
    if isinstance(exc, Exception):
        return Outcome(task, False, describe(exc), retry_delay(task, payload))
    # SystemExit, KeyboardInterrupt, GeneratorExit, CancelledError...
    note = "(raised by the task: it fails this attempt; a task cannot stop its worker)"
    return Outcome(task, False, describe(exc, note), retry_delay(task, payload))


def is_async_task(name: str) -> bool:
    """Whether task `name` is a coroutine function (an unknown one is not: execute() says
    it is unknown)."""
    try:
        return inspect.iscoroutinefunction(registry.lookup(name))
    except registry.UnknownTask:
        return False


def closed_gate(names: Iterable[str]) -> registry.Gate | None:
    """The first of a task's gates that says no, if any. A gate this worker has not
    registered says no (it cannot vouch for it), with the default timings; a check that
    raises says no too."""
    for name in names:
        gate = registry.lookup_gate(name)
        if gate is None:
            log.warning("gate %r is not registered on this worker: its tasks wait", name)
            return registry.Gate(
                name, bool, registry.GATE_BACKOFF_SECONDS, registry.GATE_GIVE_UP_SECONDS
            )
        try:
            if gate.check():
                continue
        except Exception as exc:
            log.warning("gate %r check raised (%s): taken as no", name, exc)
        return gate
    return None


def _call(fn: Callable[..., Any], payload: TaskPayload, ctx: TaskContext) -> Any:
    """Call the task and return its return value; run what it returns if that is a
    coroutine (or other awaitable), and return what that returns."""
    result = fn(*payload.args, **payload.kwargs)
    if inspect.isawaitable(result):
        return asyncio.run(_until_stopped(result, ctx))
    if isinstance(result, types.GeneratorType | types.AsyncGeneratorType):
        # @task refuses generator functions; this catches wrappers that return one
        raise Fatal(
            f"task {payload.task!r} returned a {type(result).__name__} instead of doing its "
            "work: a generator runs nothing until iterated; make the task a plain function"
        )
    return result


async def _until_stopped(awaitable: Awaitable[Any], ctx: TaskContext) -> Any:
    """Await the task's coroutine; stopping the attempt cancels it at its next await."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    ctx.on_stop(lambda: loop.call_soon_threadsafe(me.cancel))
    return await awaitable


def relay(progress: Progress, task: StartedTask, message: str) -> None:
    """Pass a progress report on. Progress is advisory (the next heartbeat carries it
    again), so a failure to send it must not fail the attempt nor stop its supervisor."""
    try:
        progress(task, message)
    except Exception as exc:
        log.warning(
            "job %s task %s: progress report not sent (%s)", task.job_id, task_label(task), exc
        )


def timed_out(task: StartedTask, payload: TaskPayload, note: str) -> Outcome:
    error = f"TimeoutError: task ran past its timeout of {payload.timeout}s; {note}"
    return Outcome(task, False, error, retry_delay(task, payload))
