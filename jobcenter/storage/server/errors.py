"""The Redis errors callers above storage catch, named here so that only storage imports
redis: a worker backs off on any of them, the CLI tells "unreachable" from "refused". The
clients storage/server/connection.py makes raise nothing else: a Redis Cluster client's own errors
(not RedisErrors in redis-py) come translated."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis
from redis.exceptions import (
    ClusterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

RedisError = redis.RedisError  # anything Redis or the link to it did
ConnectionError = redis.ConnectionError  # noqa: A001 (redis-py's name)
TimeoutError = redis.TimeoutError  # noqa: A001 (redis-py's name)
ResponseError = redis.ResponseError  # Redis answered with an error (a refusal, a bad call)


class ClusterUnavailable(ConnectionError):
    """The cluster client found no node serving a slot (a failover under way): redis-py's
    SlotNotCoveredError, which is no RedisError, as one a loop waits out."""


class ClusterClientError(RedisError):
    """Any other error of redis-py's cluster client (its RedisClusterException is no
    RedisError): no node of the cluster answers, or a call it cannot route."""


# Redis could not be reached, or a cluster cannot serve the call until a failover or a
# slot migration settles (CLUSTERDOWN, MASTERDOWN, TRYAGAIN): wait it out
UNREACHABLE = (ConnectionError, TimeoutError, ClusterDownError, TryAgainError)
REDIS_TROUBLE = (RedisError, RedisClusterException)  # what a client may raise, translated or not


@contextlib.contextmanager
def cluster_errors_as_redis_errors() -> Iterator[None]:
    """Raise redis-py's cluster client errors as RedisErrors, so every loop that waits out
    a RedisError waits them out too (storage/server/connection.py's Cluster client)."""
    try:
        yield
    except SlotNotCoveredError as exc:
        raise ClusterUnavailable(str(exc)) from exc
    except RedisClusterException as exc:
        raise ClusterClientError(f"{type(exc).__name__}: {exc}") from exc
    except RuntimeError as exc:
        # redis-py's cluster client iterates its node maps while another thread's call
        # updates them in a failover (valkey-py#332 fixes the same code): that call failed,
        # as one whose link dropped would, and the next finds the maps settled
        if "during iteration" not in str(exc):
            raise
        raise ClusterClientError(f"RuntimeError: {exc}") from exc


__all__ = [
    "REDIS_TROUBLE",
    "UNREACHABLE",
    "ClusterClientError",
    "ClusterUnavailable",
    "ConnectionError",
    "NoScriptError",
    "OutOfMemoryError",
    "ReadOnlyError",
    "RedisError",
    "ResponseError",
    "TimeoutError",
    "cluster_errors_as_redis_errors",
    "trouble",
    "unreachable",
    "write_refused",
]


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says Redis could not be reached (as opposed to refusing a command)."""
    return isinstance(exc, UNREACHABLE)


# Redis's words for a write refused at maxmemory: a command's, and a script's on Redis 7.0
# (which refuses the script's first write: nothing is written)
OUT_OF_MEMORY_REPLIES = ("OOM command not allowed", "command not allowed when used memory >")


def write_refused(exc: ResponseError) -> str | None:
    """Why Redis refused to write, if that is what `exc` says. A command's refusal comes as
    its own class; a script's wraps the reply in a plain ResponseError (Redis < 7.2)."""
    message = str(exc)
    if isinstance(exc, OutOfMemoryError) or any(m in message for m in OUT_OF_MEMORY_REPLIES):
        return "out of memory: maxmemory reached and eviction is off"
    if isinstance(exc, ReadOnlyError) or "READONLY" in message:
        return "it is a read-only replica"
    return None


def trouble(exc: BaseException) -> str:
    """How a log names a Redis error a loop waits out, with the reason of a refused write
    (Redis words it differently across versions)."""
    if unreachable(exc):
        return f"redis unreachable ({exc})"
    why = write_refused(exc) if isinstance(exc, ResponseError) else None
    if why is not None:
        return f"redis refused the write: {why} ({exc})"
    return f"redis refused ({exc})"
