"""Group commit (jobcenter.storage.server.durability): writers that wait together share one
durability round, and no writer is let go by a round that started before it arrived. The round
here is a function the test holds open; what Redis does in a round is tested in
tests/integration/test_durability.py against real servers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from helpers import wait_until

from jobcenter.cli import EXIT_BAD_INPUT, main
from jobcenter.config import Settings
from jobcenter.storage.server.durability import GroupCommit

WRITERS = 6


class HeldRounds:
    """A round function: the first round blocks until released; a round may be told to fail."""

    def __init__(self, fail_first: bool = False) -> None:
        self.release = threading.Event()
        self.fail_first = fail_first
        self.started = 0

    def __call__(self) -> bool:
        self.started += 1
        if self.started == 1:
            self.release.wait(10)
            if self.fail_first:
                raise ConnectionError("round one failed")
        return True


def in_threads(count: int, fn: Callable[[], bool]) -> tuple[list[threading.Thread], list[object]]:
    outcomes: list[object] = []

    def run() -> None:
        try:
            outcomes.append(fn())
        except Exception as exc:  # what the waiter saw
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    return threads, outcomes


def test_writers_who_arrive_during_a_round_share_the_next_one() -> None:
    rounds = HeldRounds()
    commit = GroupCommit(rounds)
    first, first_outcome = in_threads(1, commit.wait)
    wait_until(lambda: rounds.started == 1)
    others, outcomes = in_threads(WRITERS, commit.wait)
    wait_until(lambda: commit.waiting == WRITERS + 1)  # all wait; none let go by round one

    rounds.release.set()
    for t in first + others:
        t.join(10)

    assert first_outcome == [True] and outcomes == [True] * WRITERS
    assert commit.rounds == 2  # round one, then one round for all six


def test_a_failed_round_fails_its_own_waiters_only() -> None:
    rounds = HeldRounds(fail_first=True)
    commit = GroupCommit(rounds)
    first, first_outcome = in_threads(1, commit.wait)
    wait_until(lambda: rounds.started == 1)
    others, outcomes = in_threads(WRITERS, commit.wait)
    wait_until(lambda: commit.waiting == WRITERS + 1)

    rounds.release.set()
    for t in first + others:
        t.join(10)

    assert [type(o) for o in first_outcome] == [ConnectionError]
    assert outcomes == [True] * WRITERS  # their round came after the failed one
    assert commit.rounds == 2 and commit.waiting == 0


def test_one_writer_alone_runs_a_round_of_its_own_each_time() -> None:
    rounds = HeldRounds()
    rounds.release.set()
    commit = GroupCommit(rounds)
    assert [commit.wait() for _ in range(3)] == [True] * 3
    assert commit.rounds == 3


def test_durability_is_acked_or_fsynced() -> None:
    assert Settings().durability == "fsynced"
    assert Settings(durability="acked").durability == "acked"
    with pytest.raises(ValueError, match="JOBCENTER_DURABILITY.*acked, fsynced.*'sometimes'"):
        Settings(durability="sometimes")


def test_the_cli_refuses_an_unknown_durability_with_exit_2() -> None:
    result = CliRunner().invoke(main, ["list"], env={"JOBCENTER_DURABILITY": "sometimes"})
    assert result.exit_code == EXIT_BAD_INPUT
    assert "JOBCENTER_DURABILITY" in result.output and "'sometimes'" in result.output
