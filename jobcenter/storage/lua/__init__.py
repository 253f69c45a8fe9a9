"""Loads the Lua transitions (build.py builds each one's text) and runs them: as EVALSHA,
or on a server with functions as FCALL of its own library (library.py). A server that answers
NOSCRIPT or "Function not found" (restarted, flushed) gets the script loaded again and the
call repeated."""

from __future__ import annotations

import logging
import re
from functools import cache
from typing import Any

from redis.exceptions import (
    MasterDownError,
    NoScriptError,
    RedisError,
    ResponseError,
    TryAgainError,
)

from ..server.connection import is_cluster
from ..server.errors import write_refused
from .build import (
    ALL_SCRIPTS,
    JOB_SCRIPTS,
    RESET_SCRIPTS,
    SHARD_SCRIPTS,
    SLOT_SCRIPTS,
    preludes,
    sha,
    source,
)
from .library import LibraryError, library

log = logging.getLogger(__name__)

__all__ = [
    "ALL_SCRIPTS",
    "JOB_SCRIPTS",
    "RESET_SCRIPTS",
    "SHARD_SCRIPTS",
    "SLOT_SCRIPTS",
    "Batch",
    "Scripts",
    "preludes",
    "round_trip",
    "sha",
    "source",
]


class Scripts:
    """Runs the scripts on one Redis client: `run` for one call, `batch` for a pipeline.

    On a server with functions (Redis 7 and later) each script runs as a function of its own
    library (library.py: its definitions built once, not by every call), loaded on its first
    call that finds it missing; elsewhere (Redis 6.2, a Cluster, a script that does not fit
    a library) as EVALSHA."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        # a Cluster routes each call to its slot's node: it keeps redis-py's own pipeline
        self.direct = not is_cluster(redis)
        # whether the server may have functions: until a call says it has none
        self.functions = self.direct
        # scripts whose library this server refused (its Lua would not compile it): EVALSHA
        self.refused: set[str] = set()

    def load(self, name: str) -> None:
        if self._function(name):
            try:
                self.redis.execute_command("FUNCTION", "LOAD", "REPLACE", library(name)[1])
                return
            except ResponseError as exc:
                if _NO_FUNCTIONS.search(str(exc)):
                    self.functions = False
                elif refused_for_now(exc):
                    raise  # as any write would be now: not the library's fault
                else:
                    self.refused.add(name)
                    log.warning(
                        "script %s runs as EVALSHA: the server refused its library: %s", name, exc
                    )
        self.redis.script_load(source(name))

    def _function(self, name: str) -> str | None:
        """The function script `name` runs as, or None for EVALSHA."""
        if not self.functions or name in self.refused:
            return None
        return _function_of(name)

    def command(self, name: str, keys: list[str], args: list[Any]) -> tuple[Any, ...]:
        """The command that runs script `name`."""
        function = self._function(name)
        if function:
            return ("FCALL", function, len(keys), *keys, *args)
        return ("EVALSHA", sha(name), len(keys), *keys, *args)

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script `name` now and return its reply."""
        try:
            return self._call(name, keys, args)
        except ResponseError as exc:
            if not self.did_not_run(exc):
                raise
            self.load(name)  # as a function, or as a script where that is what runs
            return self._call(name, keys, args)

    def did_not_run(self, error: object) -> bool:
        """Whether `error` says the call did not run: its script or library is not loaded
        (NOSCRIPT, "Function not found"), or the server has no functions for this client
        (from now on: EVALSHA, whose script may need loading)."""
        if isinstance(error, NoScriptError):
            return True
        if not isinstance(error, ResponseError):
            return False
        if _NO_FUNCTIONS.search(str(error)):
            self.functions = False
            return True
        return bool(_FUNCTION_MISSING.search(str(error)))

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        command = self.command(name, keys, args)
        if not self.direct:
            return self.redis.execute_command(*command)
        (reply,) = round_trip(self.redis, [command])
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """The replies of `commands`, sent in one round trip; a refused one's error stands in
        its place."""
        if self.direct:
            return round_trip(self.redis, commands)
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    def batch(self) -> Batch:
        return Batch(self)


@cache
def _function_of(name: str) -> str | None:
    """Script `name`'s function, or None when it does not fit a library (LibraryError)."""
    try:
        return library(name)[0]
    except LibraryError:
        return None


# What a server without functions (Redis 6.2), or a user whose ACL forbids them (a managed
# Redis may), answers FCALL or FUNCTION LOAD; and one that has not loaded a library
# (restarted, flushed, a replica promoted before it got it).
_NO_FUNCTIONS = re.compile(
    r"unknown command .?(FCALL|FUNCTION)\b|no permissions to run the '(fcall|function\|load)'",
    re.I,
)
_FUNCTION_MISSING = re.compile(r"Function not found", re.I)
# What a server refusing every write for now answers with a code redis-py keeps in the
# message (a script runs long, too few replicas)
_NOT_NOW = re.compile(r"^(BUSY|NOREPLICAS)\b")


def refused_for_now(exc: ResponseError) -> bool:
    """Whether the server refused a write for now, whatever the write (out of memory, a
    read-only replica, busy, its primary down): a library it did not load then is tried
    again on the next call, never taken for one it cannot compile."""
    return bool(
        write_refused(exc)
        or isinstance(exc, (MasterDownError, TryAgainError))
        or _NOT_NOW.search(str(exc))
    )


class Batch:
    """Script calls sent in one pipeline (one round trip), replies in call order."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.calls: list[tuple[str, list[str], list[Any]]] = []

    def add(self, name: str, keys: list[str], args: list[Any]) -> None:
        self.calls.append((name, keys, args))

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the calls; their replies in order. A call Redis refused (out of memory,
        read-only, ...) raises its error, or with `raise_on_error` off stands in its place,
        so the caller can keep what the other calls did."""
        if not self.calls:
            return []
        replies = self.scripts.send([self.scripts.command(*call) for call in self.calls])
        for i, reply in enumerate(replies):
            if self.scripts.did_not_run(reply):
                # that call did not run: run it again (the first such run loads its script)
                try:
                    replies[i] = reply = self.scripts.run(*self.calls[i])
                except RedisError as exc:
                    replies[i] = reply = exc
            if raise_on_error and isinstance(reply, Exception):
                raise reply
        return replies


def round_trip(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """What a pipeline of `commands` on a single Redis (or a Sentinel's master) replies, sent
    on one of the client's connections without redis-py's bookkeeping per command (pipeline
    objects, command stacks, observability hooks: a tenth of a worker's CPU per task). A
    refused command's ResponseError stands in its reply's place; a lost connection is retried
    as the client retries its own commands."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        replies: list[Any] = connection.retry.call_with_retry(
            lambda: _send_and_read(connection, commands), lambda _: connection.disconnect()
        )
        return replies
    except BaseException:
        connection.disconnect()  # replies may be left unread on it
        raise
    finally:
        pool.release(connection)


def _send_and_read(connection: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    connection.send_packed_command(connection.pack_commands(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(connection.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies
