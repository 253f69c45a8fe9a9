"""Small helpers shared by the test tiers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
) -> T:
    """Poll predicate until it returns something truthy, and return that.

    Raises AssertionError (with message) if it has not within timeout seconds. This waits for a
    condition to hold; it is not a sleep standing in for synchronisation.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(
                message or f"condition not met within {timeout:g} s: {predicate!r}"
            )
        time.sleep(interval)
