"""Group commit: one durability wait (an fsync confirmation) shared by every write in flight.

Each writer whose write Redis has acknowledged calls `GroupCommit.wait()`. A round confirms
everything acknowledged before it started, so a writer that arrives while a round runs waits
for the next one; the first writer to find no round running leads it for all who wait. With
`appendfsync everysec` a round takes up to a second: N concurrent submits then cost one wait,
not N waits in a row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GroupCommit:
    """Runs `confirm` (an fsync wait covering every write acknowledged before it starts) in
    rounds shared by all waiting threads."""

    def __init__(self, confirm: Callable[[], bool]) -> None:
        self._confirm = confirm
        self._changed = threading.Condition()
        self._started = 0  # rounds started
        self._finished = 0  # rounds finished; a round runs while this trails _started
        self._outcome: bool | BaseException = False  # of the last finished round
        self.rounds = 0  # rounds run so far (what a test or a metric can read)
        self.waiting = 0  # threads inside wait() now, leaders included

    def wait(self) -> bool:
        """Block until a round that started after this call has finished; its outcome (True:
        confirmed). A round's error is raised in every thread that waited on it."""
        with self._changed:
            self.waiting += 1
            needed = self._started + 1  # a round already running may have missed our write
            while self._finished < needed:
                if self._finished == self._started:
                    self._lead()
                else:
                    self._changed.wait()
            outcome = self._outcome
            self.waiting -= 1
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _lead(self) -> None:
        """Run one round with the lock released (called and returning with it held)."""
        self._started += 1
        self.rounds += 1
        self._changed.release()
        try:
            outcome: bool | BaseException = self._confirm()
        except BaseException as exc:  # handed to every waiter of this round, then raised
            outcome = exc
        finally:
            self._changed.acquire()
        self._finished = self._started
        self._outcome = outcome
        self._changed.notify_all()
