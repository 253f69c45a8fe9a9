"""Small helpers shared by the test tiers."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis

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


@dataclass(frozen=True)
class Command:
    name: str  # upper case
    args: tuple[str, ...]
    in_script: bool  # run by a Lua script, not sent by a client

    @property
    def key(self) -> str | None:
        return self.args[0] if self.args else None


class CommandLog:
    """Every command Redis runs while this is open, seen through MONITOR in a thread: what a
    test counts to prove that a read is bounded. Use as a context manager."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.commands: list[Command] = []
        self._marker = f"command-log-end-{uuid.uuid4().hex}"
        self._client = redis.Redis.from_url(redis_url)
        self._monitor = self._client.monitor()
        self._thread = threading.Thread(target=self._run, name="command-log", daemon=True)

    def __enter__(self) -> CommandLog:
        self._monitor.__enter__()  # MONITOR is on once this returns
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Redis runs commands in order: once the thread has read this marker, it has read
        # every command sent before it.
        with redis.Redis.from_url(self.redis_url) as poke:
            poke.echo(self._marker)
        self._thread.join(10)
        self._client.close()

    def _run(self) -> None:
        while True:
            try:
                line = self._monitor.next_command()
            except (redis.ConnectionError, OSError, ValueError):
                return
            if line is None:
                continue
            name, *args = line["command"].split(" ")
            if name.upper() == "ECHO" and args == [self._marker]:
                return
            self.commands.append(Command(name.upper(), tuple(args), line["client_type"] == "lua"))

    def count(self, names: set[str], key: str, *, in_script: bool = False) -> int:
        """How many commands named one of `names` touched `key` (as their first argument),
        sent by clients (or, with in_script, run by scripts)."""
        return sum(
            1
            for c in list(self.commands)
            if c.name in names and c.key == key and c.in_script == in_script
        )
