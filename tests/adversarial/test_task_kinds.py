"""Hostile tasks against the two runners, in this process (no worker, no Redis): every kind
of callable, every BaseException, every way a process-pool child can die, and errors over
every limit. Each attempt must end in exactly one Outcome (or, once cancelled, in none), its
slot must be freed, and its error must be bounded, valid UTF-8 and name what happened."""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from adversarial import adversarial_tasks as hostile
from adversarial.adversarial_tasks import marks
from helpers import pid_alive, wait_until

from jobcenter import current_task, task
from jobcenter.model import codec
from jobcenter.runtime.execution import processes as execution_module
from jobcenter.runtime.execution.outcome import ERROR_TEXT_MAX, Outcome, attempt_key
from jobcenter.runtime.execution.processes import ProcessRunner
from jobcenter.runtime.execution.threads import ThreadRunner
from jobcenter.runtime.registry import NotATask, UnknownTask, lookup
from jobcenter.runtime.stopping import Stop, StopReason, StopStep
from jobcenter.storage.store import StartedTask

OUTCOME_SECONDS = 30.0  # an attempt's outcome not in by then never comes
TASKS_MODULE = "adversarial.adversarial_tasks"
POOLS = ["thread", "process"]
# The runners' stop bound here: a stopped attempt still running this long after is overdue.
STOP_BOUND_SECONDS = 0.3


@dataclass
class Pool:
    """A runner of two slots, what it reported, and how often it freed a slot."""

    runner: ThreadRunner | ProcessRunner
    outcomes: queue.Queue[Outcome] = field(default_factory=queue.Queue)
    progress: list[str] = field(default_factory=list)
    indexes: Iterator[int] = field(default_factory=lambda: iter(range(1_000_000)))
    stops: list[Stop] = field(default_factory=list)  # what the runner told of its stops

    def submit(
        self, name: str, *args: Any, timeout: float | None = None, run_order: bytes = b""
    ) -> StartedTask:
        index = next(self.indexes)
        payload = {"t": name, "a": list(args), "id": f"t{index}", "to": timeout,
                   "rb": 0.01, "rm": 0.01}  # fmt: skip
        started = StartedTask("job", index, 1, codec.pack(payload), run_order=run_order)
        self.runner.submit(started, lambda _, m: self.progress.append(m), self.ended)
        return started

    def ended(self, *outcomes: Outcome) -> None:
        for outcome in outcomes:
            self.outcomes.put(outcome)

    def outcome(self) -> Outcome:
        try:
            return self.outcomes.get(timeout=OUTCOME_SECONDS)
        except queue.Empty:
            raise AssertionError(f"no outcome within {OUTCOME_SECONDS:g} s") from None

    def run(self, name: str, *args: Any, timeout: float | None = None) -> Outcome:
        started = self.submit(name, *args, timeout=timeout)
        outcome = self.outcome()
        assert outcome.task == started
        return outcome

    def idle(self) -> None:
        """Every slot is free again."""
        wait_until(
            lambda: self.runner.busy == 0, timeout=OUTCOME_SECONDS, message="a slot stays busy"
        )


def make_pool(kind: str) -> Pool:
    stops: list[Stop] = []
    limit = execution_module.DEFAULT_RESULT_MAX_BYTES
    runner: ThreadRunner | ProcessRunner
    if kind == "thread":
        runner = ThreadRunner(2, "h1", lambda: None, limit, stops.append, STOP_BOUND_SECONDS)
    else:
        runner = ProcessRunner(
            2, "h1", [TASKS_MODULE], lambda: None, limit, stops.append, STOP_BOUND_SECONDS
        )
    return Pool(runner, stops=stops)


@pytest.fixture(params=POOLS)
def pool(request: pytest.FixtureRequest) -> Iterator[Pool]:
    made = make_pool(request.param)
    yield made
    made.runner.kill_all()
    made.runner.shutdown()


@pytest.fixture
def thread_pool() -> Iterator[Pool]:
    made = make_pool("thread")
    yield made
    made.runner.shutdown()


@pytest.fixture
def process_pool() -> Iterator[Pool]:
    made = make_pool("process")
    yield made
    made.runner.kill_all()
    made.runner.shutdown()


def assert_clean_error(error: str) -> None:
    assert len(error) <= ERROR_TEXT_MAX
    error.encode("utf-8")  # Redis clients encode strictly: this must not raise


# -- every BaseException ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(hostile.BASE_EXCEPTIONS))
def test_a_base_exception_raised_by_a_task_fails_its_attempt_and_asks_for_a_retry(
    pool: Pool, kind: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "marks")

    outcome = pool.run("adversarial.raise_base", kind, path)

    assert not outcome.ok
    assert outcome.error.startswith(f"{kind}"), outcome.error
    assert "a task cannot stop its worker" in outcome.error
    assert outcome.retry_delay_ms >= 0, "retried by its policy"
    assert marks(path) == [f"{kind} 1"]
    pool.idle()
    assert pool.run("adversarial.async_mark", path, "after").ok  # the pool serves on
    assert marks(path)[-1].startswith("after")


@pytest.mark.parametrize("code", [0, 3])
def test_sys_exit_in_a_task_is_a_failed_attempt_whatever_its_code(pool: Pool, code: int) -> None:
    outcome = pool.run("adversarial.sys_exit", code)

    assert not outcome.ok
    assert outcome.error.startswith(f"SystemExit: {code}")
    assert outcome.retry_delay_ms >= 0
    pool.idle()


# -- every way a process-pool child can die ----------------------------------------------------


@pytest.mark.parametrize("code", [0, 7])
def test_a_child_that_exits_fails_its_attempt_naming_the_exit_code(
    process_pool: Pool, code: int
) -> None:
    outcome = process_pool.run("adversarial.exit_process", code)

    assert not outcome.ok
    assert outcome.error == f"task process exited with code {code} before reporting an outcome"
    assert outcome.retry_delay_ms >= 0
    process_pool.idle()


@pytest.mark.parametrize("name", sorted(hostile.DEADLY_SIGNALS))
def test_a_child_killed_by_a_signal_fails_its_attempt_naming_the_signal(
    process_pool: Pool, name: str
) -> None:
    signum = hostile.DEADLY_SIGNALS[name]

    outcome = process_pool.run("adversarial.kill_self", int(signum))

    assert not outcome.ok
    assert f"killed by signal {int(signum)} ({name})" in outcome.error, outcome.error
    assert outcome.retry_delay_ms >= 0
    process_pool.idle()


def test_a_child_whose_pipe_breaks_while_relaying_progress_fails_its_attempt(
    process_pool: Pool,
) -> None:
    outcome = process_pool.run("adversarial.close_pipe_then_progress")

    assert not outcome.ok
    assert "its pipe to the worker broke" in outcome.error, outcome.error
    assert outcome.retry_delay_ms >= 0
    process_pool.idle()


def test_a_child_that_closes_its_pipe_and_runs_on_is_killed_and_fails(
    process_pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execution_module, "CHILD_EXIT_WAIT_SECONDS", 0.1)

    outcome = process_pool.run("adversarial.close_pipe_and_run_on")

    assert not outcome.ok
    assert outcome.error == "task process closed its pipe to the worker; it was killed"
    process_pool.idle()


def test_a_child_that_leaves_a_thread_running_still_reports_and_frees_its_slot(
    process_pool: Pool,
) -> None:
    assert process_pool.run("adversarial.leave_a_thread_behind").ok
    process_pool.idle()


# -- errors at and over every limit ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "starts"),
    [
        ("adversarial.huge_error", [10 * 1024 * 1024], "ValueError: xxx"),
        ("adversarial.deep_error", [], "RecursionError: maximum recursion depth exceeded"),
        ("adversarial.non_utf8_error", [], "ValueError: caf\\udce9 \\udcff\\udcfe\n"),
        ("adversarial.bytes_error", [], "ValueError: b'\\xff\\xfe raw'\n"),
        ("adversarial.str_raises", [], "StrRaises: <str() of the exception raised RuntimeError>"),
    ],
    ids=["10MB-message", "recursion", "non-utf8", "bytes", "str-raises"],
)
def test_an_error_over_any_limit_is_reported_bounded_and_valid_utf8(
    pool: Pool, name: str, args: list[Any], starts: str
) -> None:
    outcome = pool.run(name, *args)

    assert not outcome.ok
    assert outcome.error.startswith(starts), outcome.error[:200]
    assert_clean_error(outcome.error)
    assert "Traceback (most recent call last)" in outcome.error
    assert name.split(".")[1] in outcome.error, "the traceback names the task's function"
    assert outcome.retry_delay_ms >= 0


def test_a_10mb_message_is_cut_in_the_middle_saying_how_much(pool: Pool) -> None:
    outcome = pool.run("adversarial.huge_error", 10 * 1024 * 1024)

    assert "characters cut ...]" in outcome.error
    assert 'in huge_error\n    raise ValueError("x" * size)' in outcome.error


def test_progress_utf8_cannot_encode_arrives_escaped(pool: Pool, tmp_path: Path) -> None:
    path = str(tmp_path / "marks")

    assert pool.run("adversarial.non_utf8_progress", path).ok

    assert pool.progress == ["\\udcff\\udcfe"]
    assert marks(path) == ["reported"]


def test_progress_the_worker_cannot_send_does_not_fail_the_attempt(
    pool: Pool, tmp_path: Path
) -> None:
    def refuse(_task: StartedTask, _message: str) -> None:
        raise ConnectionError("Redis refused the report")

    path = str(tmp_path / "marks")
    started = StartedTask("job", 0, 1, codec.pack({"t": "adversarial.non_utf8_progress",
                                                    "a": [path], "to": None}))  # fmt: skip
    pool.runner.submit(started, refuse, pool.ended)

    assert pool.outcome().ok
    assert marks(path) == ["reported"]


# -- every kind of callable --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mark"),
    [
        ("adversarial.callable_object", "callable object"),
        ("adversarial.bound_method", "bound method"),
        ("adversarial.static_method", "static method"),
        ("adversarial.class_method", "class method of Methods"),
        ("adversarial.partial", "a partial"),
        ("adversarial.lambda", "lambda"),
        ("adversarial.async_partial", "async partial t0"),
        ("adversarial.returns_a_coroutine", "awaited"),
    ],
)
def test_every_kind_of_callable_registered_as_a_task_runs(
    pool: Pool, name: str, mark: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "marks")

    outcome = pool.run(name, path)

    assert outcome.ok, outcome.error
    assert marks(path) == [mark]


def test_an_async_task_runs_to_its_end_before_it_is_reported(pool: Pool, tmp_path: Path) -> None:
    path = str(tmp_path / "marks")

    assert pool.run("adversarial.async_mark", path, "ran").ok

    assert marks(path) == ["ran t0"]


def test_async_attempts_run_side_by_side_on_one_event_loop_thread_within_the_slots(
    thread_pool: Pool, tmp_path: Path
) -> None:
    """The thread pool runs coroutine functions on one event loop of its own (no thread per
    attempt), and no more of them at once than it has slots (two)."""
    path = str(tmp_path / "marks")
    hostile.OVERLAP.update(inside=0, peak=0)

    for _ in range(5):
        thread_pool.submit("adversarial.async_overlap", path, 2)
    outcomes = [thread_pool.outcome() for _ in range(5)]

    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    assert hostile.OVERLAP["peak"] == 2, "more attempts ran at once than the pool has slots"
    threads = {line.split()[1] for line in marks(path)}
    assert len(threads) == 1, f"async attempts ran on {len(threads)} threads"
    assert str(threading.get_ident()) not in threads  # not on the submitting thread
    thread_pool.idle()


def test_a_waiting_attempt_starts_in_run_order_whether_it_is_async_or_not(
    thread_pool: Pool, tmp_path: Path
) -> None:
    """Attempts waiting for a slot start in run order across both kinds: a low one taken
    first (an async one, for the event loop) never starts before a higher one taken after it
    (a plain one, for a thread)."""
    running = [str(tmp_path / f"running{k}") for k in range(2)]
    started = [thread_pool.submit("adversarial.wait_until_cancelled", path) for path in running]
    for path in running:
        started_pid(path)  # both slots busy: what comes next waits for one
    order = str(tmp_path / "order")
    thread_pool.submit("adversarial.async_mark", order, "low", run_order=b"9")
    # a plain function (for a thread) that marks "awaited"
    thread_pool.submit("adversarial.returns_a_coroutine", order, run_order=b"1")

    assert thread_pool.runner.stop(attempt_key(started[0]), StopReason.CANCELLED)  # one slot frees
    wait_until(lambda: marks(order), timeout=OUTCOME_SECONDS, message="nothing started")
    assert marks(order)[0] == "awaited", "the lower attempt started first"
    assert thread_pool.runner.stop(attempt_key(started[1]), StopReason.CANCELLED)
    wait_until(lambda: len(marks(order)) == 2, timeout=OUTCOME_SECONDS, message="low never ran")
    thread_pool.idle()


def test_an_async_task_that_raises_is_a_failure_with_its_error(pool: Pool) -> None:
    outcome = pool.run("adversarial.async_fail", "async boom")

    assert not outcome.ok
    assert outcome.error.startswith("RuntimeError: async boom")
    assert outcome.retry_delay_ms >= 0


def test_an_async_task_past_its_timeout_fails_and_is_stopped(pool: Pool, tmp_path: Path) -> None:
    path = str(tmp_path / "marks")

    outcome = pool.run("adversarial.async_wait_until_cancelled", path, timeout=0.3)

    assert not outcome.ok
    assert outcome.error.startswith("TimeoutError: task ran past its timeout of 0.3s")
    pool.idle()  # even the thread pool got its thread back: the coroutine was cancelled
    if isinstance(pool.runner, ThreadRunner):
        assert marks(path)[-1] == "cancelled"


def test_a_wrapper_returning_a_generator_fails_without_retry_and_nothing_is_reported_done(
    pool: Pool, tmp_path: Path
) -> None:
    path = str(tmp_path / "marks")

    outcome = pool.run("adversarial.returns_a_generator", path)

    assert not outcome.ok
    assert "returned a generator instead of doing its work" in outcome.error
    assert outcome.retry_delay_ms < 0, "a retry would not run it either"
    assert marks(path) == []


def _generator() -> Iterator[int]:
    yield 1


async def _async_generator() -> Any:
    yield 1


class _GeneratorCall:
    def __call__(self) -> Iterator[int]:
        yield 1


class _SomeClass:
    def __init__(self) -> None:
        pass


@pytest.mark.parametrize(
    ("thing", "says"),
    [
        (_generator, "is a generator function"),
        (functools.partial(_generator), "is a generator function"),
        (_GeneratorCall(), "is a generator function"),
        (_async_generator, "is an async generator function"),
        (_SomeClass, "is a class"),
        (classmethod(lambda cls: None), "is not callable (a classmethod)"),
        ("module.function", "is not callable (a str)"),
    ],
    ids=[
        "generator",
        "partial-generator",
        "generator-call",
        "async-generator",
        "class",
        "classmethod-object",
        "string",
    ],  # fmt: skip
)
def test_a_callable_that_would_not_do_its_work_is_refused_at_registration(
    thing: Any, says: str
) -> None:
    with pytest.raises(NotATask, match="adversarial.refused") as refused:
        task(name="adversarial.refused")(thing)

    assert says in str(refused.value)
    with pytest.raises(UnknownTask):
        lookup("adversarial.refused")


def test_a_generator_function_refusal_says_what_to_do() -> None:
    with pytest.raises(NotATask) as refused:
        task(_generator)

    message = str(refused.value)
    assert "'_generator' is a generator function" in message
    assert "make it a plain function" in message


def test_a_callable_without_a_name_of_its_own_needs_one() -> None:
    with pytest.raises(NotATask, match=r"use @task\(name=\.\.\.\)"):
        task(functools.partial(print, "x"))
    assert task(name="adversarial.builtin")(len) is len
    assert lookup("adversarial.builtin") is len


# -- cancel ------------------------------------------------------------------------------------


def started_pid(path: str) -> int:
    lines = wait_until(lambda: marks(path), timeout=OUTCOME_SECONDS, message="never started")
    return int(lines[0].split()[1])


@pytest.mark.parametrize("name", ["adversarial.wait_until_cancelled",
                                  "adversarial.async_wait_until_cancelled"])  # fmt: skip
def test_cancel_tells_a_thread_pool_task_and_stops_waiting_for_it(
    thread_pool: Pool, name: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "marks")
    started = thread_pool.submit(name, path)
    started_pid(path)

    assert thread_pool.runner.stop(attempt_key(started), StopReason.CANCELLED)

    wait_until(lambda: marks(path)[-1] in ("saw cancel", "cancelled"), message="not told")
    thread_pool.idle()
    assert thread_pool.outcomes.empty(), "a cancelled attempt reports nothing"
    assert not thread_pool.runner.stop(attempt_key(started), StopReason.CANCELLED), (
        "cancelled once only"
    )


def test_cancel_kills_a_process_pool_child(process_pool: Pool, tmp_path: Path) -> None:
    path = str(tmp_path / "marks")
    started = process_pool.submit("adversarial.wait_until_cancelled", path)
    pid = started_pid(path)

    assert process_pool.runner.stop(attempt_key(started), StopReason.CANCELLED)

    process_pool.idle()
    wait_until(lambda: not pid_alive(pid), message="the child still runs")
    assert process_pool.outcomes.empty(), "a cancelled attempt reports nothing"
    assert marks(path) == [f"started {pid}"]


@pytest.mark.parametrize(
    ("kind", "name", "runner"),
    [
        ("thread", "adversarial.wait_until_cancelled", "thread"),
        ("thread", "adversarial.async_wait_until_cancelled", "async"),
        ("process", "adversarial.run_on", "process"),
    ],
)
def test_a_stopped_attempt_is_told_of_then_seen_to_end_with_its_reason(
    kind: str, name: str, runner: str, tmp_path: Path
) -> None:
    pool = make_pool(kind)
    try:
        path = str(tmp_path / "marks")
        started = pool.submit(name, path)
        started_pid(path)

        assert pool.runner.stop(attempt_key(started), StopReason.TAKEN_OVER)

        pool.idle()
        wait_until(lambda: len(pool.stops) == 2, message="the stop's end was not told")
        told, ended = pool.stops
        assert told == Stop(attempt_key(started), StopReason.TAKEN_OVER, runner, StopStep.TOLD)
        assert (ended.key, ended.reason, ended.runner, ended.step) == (
            attempt_key(started), StopReason.TAKEN_OVER, runner, StopStep.ENDED,
        )  # fmt: skip
        assert pool.outcomes.empty(), "a stopped attempt reports nothing"
    finally:
        pool.runner.kill_all()
        pool.runner.shutdown()


@pytest.mark.parametrize(
    ("name", "runner"),
    [("adversarial.run_on", "thread"), ("adversarial.swallow_cancel", "async")],
)
def test_a_stopped_attempt_still_running_past_the_bound_is_told_of_then_seen_to_end(
    thread_pool: Pool, name: str, runner: str, tmp_path: Path
) -> None:
    """A thread that never looks at its stop, a coroutine that swallows its cancel: the
    runner says so once the bound has passed, and again when they end at last."""
    path = str(tmp_path / "marks")
    started = thread_pool.submit(name, path, 3 * STOP_BOUND_SECONDS)
    started_pid(path)

    assert thread_pool.runner.stop(attempt_key(started), StopReason.CANCELLED)

    wait_until(lambda: len(thread_pool.stops) == 3, message="its end was not told")
    steps = [(s.step, s.reason, s.runner) for s in thread_pool.stops]
    assert steps == [(step, StopReason.CANCELLED, runner) for step in StopStep]
    assert thread_pool.stops[1].seconds >= STOP_BOUND_SECONDS
    assert thread_pool.stops[2].seconds >= thread_pool.stops[1].seconds
    assert marks(path)[-1] in ("ran to its end", "done")
    assert thread_pool.outcomes.empty()


def test_a_stopped_attempt_no_thread_has_begun_never_runs_and_frees_its_slot_at_once(
    thread_pool: Pool, tmp_path: Path
) -> None:
    running = [str(tmp_path / f"running{k}") for k in range(2)]
    started = [thread_pool.submit("adversarial.wait_until_cancelled", path) for path in running]
    for path in running:
        started_pid(path)  # both threads busy: what comes next waits for one
    waiting = str(tmp_path / "waiting")
    queued = thread_pool.submit("adversarial.async_mark", waiting, "w")

    assert thread_pool.runner.stop(attempt_key(queued), StopReason.CANCELLED)

    assert thread_pool.runner.busy == 2, "its slot was not freed at once"
    assert [s.step for s in thread_pool.stops] == [StopStep.TOLD, StopStep.ENDED]
    for attempt in started:
        assert thread_pool.runner.stop(attempt_key(attempt), StopReason.CANCELLED)
    thread_pool.idle()
    assert marks(waiting) == [], "a stopped attempt ran"
    assert thread_pool.outcomes.empty()


def test_cancel_of_an_attempt_that_is_not_running_here_is_refused(pool: Pool) -> None:
    assert pool.run("adversarial.async_mark", os.devnull, "x").ok

    assert not pool.runner.stop(("job", 0, 1), StopReason.CANCELLED)
    assert not pool.runner.stop(("other-job", 0, 1), StopReason.CANCELLED)


def test_a_task_outside_its_attempt_has_no_context() -> None:
    with pytest.raises(Exception, match="outside a running task"):
        current_task()


# -- prefetched attempts -------------------------------------------------------------------


def test_attempts_no_thread_has_begun_are_withdrawn_and_never_run(
    thread_pool: Pool, tmp_path: Path
) -> None:
    """A stopping worker takes its prefetched attempts back (to give them back to their
    queues): they never run, their slots are free, and the running ones are untouched."""
    running = [str(tmp_path / f"running{k}") for k in range(2)]
    started = [thread_pool.submit("adversarial.wait_until_cancelled", path) for path in running]
    for path in running:
        started_pid(path)  # both threads busy: what comes next waits for one
    waiting = str(tmp_path / "waiting")
    queued = [thread_pool.submit("adversarial.async_mark", waiting, f"w{k}") for k in range(2)]

    assert thread_pool.runner.withdraw_waiting() == queued
    assert thread_pool.runner.withdraw_waiting() == []  # once only
    for attempt in started:
        assert thread_pool.runner.stop(attempt_key(attempt), StopReason.CANCELLED)
    thread_pool.idle()
    assert marks(waiting) == [], "a withdrawn attempt ran"
    assert thread_pool.outcomes.empty()
    assert not thread_pool.runner.stop(attempt_key(queued[0]), StopReason.CANCELLED), (
        "withdrawn: not here"
    )
