"""Small helpers shared by the test tiers."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
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


def pid_alive(pid: int) -> bool:
    """True while the process runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
