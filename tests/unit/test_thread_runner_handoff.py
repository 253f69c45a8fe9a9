"""ThreadRunner's hand-offs: the task thread whose report took the next attempt runs it itself
(no other thread woken for it, as in a chain), unless it reports on first."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
from helpers import wait_until

from jobcenter import task
from jobcenter.model import codec
from jobcenter.runtime.execution.outcome import Outcome
from jobcenter.runtime.execution.threads import ThreadRunner
from jobcenter.storage.store import StartedTask

CHAIN = 40
SLOTS = 4
WAIT_SECONDS = 10.0
ran_on: list[int] = []


@task(name="handoff.record_thread")
def record_thread() -> None:
    ran_on.append(threading.get_ident())


def started(index: int) -> StartedTask:
    payload = codec.pack({"t": "handoff.record_thread", "id": f"t{index}"})
    return StartedTask("job", index, 1, payload)


@pytest.fixture
def runner() -> Iterator[ThreadRunner]:
    made = ThreadRunner(SLOTS, "h1", lambda: None)
    ran_on.clear()
    # every thread asleep in the inbox: a submit then wakes one (none, were one still
    # on its way there: it would find the attempt itself)
    wait_until(lambda: made.inbox.sleeping == SLOTS, WAIT_SECONDS, message="threads not idle")
    yield made
    made.shutdown()


class CountedWakes:
    """The inbox's wake-up queue (its threads sleep on it already), counting the wakes sent."""

    def __init__(self, wakes: queue.SimpleQueue[None]) -> None:
        self.wakes = wakes
        self.sent = 0

    def put(self, item: None) -> None:
        self.sent += 1
        self.wakes.put(item)

    def get(self) -> None:
        self.wakes.get()


def test_a_chain_runs_on_the_thread_whose_report_took_each_next_task(
    runner: ThreadRunner,
) -> None:
    counted = CountedWakes(runner.inbox.wakes)
    runner.inbox.wakes = counted  # type: ignore[assignment]
    finished: queue.SimpleQueue[int] = queue.SimpleQueue()

    def ended(*outcomes: Outcome) -> None:
        for outcome in outcomes:
            assert outcome.ok, outcome.error
            index = outcome.task.index
            if index + 1 < CHAIN:  # what a completion that takes the child does
                runner.submit(started(index + 1), lambda *_: None, ended)
            else:
                finished.put(index)

    runner.submit(started(0), lambda *_: None, ended)
    assert finished.get(timeout=WAIT_SECONDS) == CHAIN - 1
    assert len(ran_on) == CHAIN
    assert len(set(ran_on)) == 1
    assert counted.sent == 1, "threads were woken for tasks the reporting thread took"


def test_a_thread_that_reports_on_hands_the_task_it_kept_to_another(
    runner: ThreadRunner,
) -> None:
    second_ran = threading.Event()

    def first_ended(*outcomes: Outcome) -> None:
        runner.submit(started(1), lambda *_: None, second_ended)
        runner.hand_over_deferred()  # what a reporter with more outcomes to send does
        # this thread is busy until the kept task ran: only another thread can run it
        assert second_ran.wait(WAIT_SECONDS), "the kept task waited for this thread"

    def second_ended(*outcomes: Outcome) -> None:
        second_ran.set()

    runner.submit(started(0), lambda *_: None, first_ended)
    assert second_ran.wait(WAIT_SECONDS + 1)
    assert len(set(ran_on)) == 2
