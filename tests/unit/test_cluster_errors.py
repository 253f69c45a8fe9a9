"""Every error a Redis client of ours raises is a RedisError, the one class the worker's,
leader's, notifier's, ticker's and shard leases' loops wait out: redis-py's cluster client
raises errors of its own outside that class (a slot no node serves while a failover settles,
no node answering), which the Cluster client of storage/server/connection.py translates. The
transient answers of a cluster in a failover count as "unreachable"."""

from __future__ import annotations

import inspect
import socket
from typing import Any

import pytest
import redis.exceptions
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster

from jobcenter.errors import RedisUnavailable
from jobcenter.storage.server import errors
from jobcenter.storage.server.connection import Cluster, connect
from jobcenter.storage.server.errors import RedisError, cluster_errors_as_redis_errors, unreachable

# Every exception class redis-py defines, by name (its cluster client's included).
REDIS_PY_ERRORS = {
    name: cls
    for name, cls in vars(redis.exceptions).items()
    if inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__.startswith("redis")
}
OUTSIDE_REDIS_ERROR = sorted(
    name
    for name, cls in REDIS_PY_ERRORS.items()
    if issubclass(cls, redis.exceptions.RedisClusterException)
)
# A cluster mid-failover or mid-migration answers these: wait it out, as for a lost link.
WAIT_IT_OUT = ["ClusterDownError", "MasterDownError", "TryAgainError", "SlotNotCoveredError"]


def test_redis_py_still_has_cluster_errors_outside_redis_error() -> None:
    """If redis-py ever folds them into RedisError, the translation may go."""
    assert "SlotNotCoveredError" in OUTSIDE_REDIS_ERROR
    assert not issubclass(redis.exceptions.SlotNotCoveredError, RedisError)


def _translated(exc: BaseException) -> BaseException:
    with pytest.raises(BaseException) as raised, cluster_errors_as_redis_errors():
        raise exc
    return raised.value


@pytest.mark.parametrize("name", OUTSIDE_REDIS_ERROR)
def test_every_cluster_client_error_arrives_as_a_redis_error(name: str) -> None:
    translated = _translated(REDIS_PY_ERRORS[name]("no node for slot 42"))
    assert isinstance(translated, RedisError)
    assert "no node for slot 42" in str(translated)
    assert isinstance(translated.__cause__, REDIS_PY_ERRORS[name])


@pytest.mark.parametrize(
    "message",
    ["dictionary changed size during iteration", "dictionary keys changed during iteration"],
)
def test_the_cluster_clients_node_map_race_in_a_failover_is_a_redis_error(message: str) -> None:
    """Threads sharing redis-py's cluster client race on its node maps while a failover
    updates them: that call fails like one whose link dropped; the loop waits it out."""
    translated = _translated(RuntimeError(message))
    assert isinstance(translated, RedisError) and message in str(translated)


def test_any_other_runtime_error_stays_a_bug() -> None:
    exc = RuntimeError("a bug of ours")
    assert _translated(exc) is exc


@pytest.mark.parametrize("name", WAIT_IT_OUT)
def test_a_cluster_settling_counts_as_unreachable(name: str) -> None:
    exc = REDIS_PY_ERRORS[name]("CLUSTERDOWN The cluster is down")
    if not isinstance(exc, RedisError):
        exc = _translated(exc)
    assert isinstance(exc, RedisError) and unreachable(exc)


@pytest.mark.parametrize("name", sorted(REDIS_PY_ERRORS))
def test_a_redis_error_passes_through_unchanged(name: str) -> None:
    cls = REDIS_PY_ERRORS[name]
    if not issubclass(cls, RedisError):
        return  # translated: the tests above
    exc = cls.__new__(cls)  # some take a redirect's "<slot> <host:port>" to be made
    assert _translated(exc) is exc


@pytest.mark.parametrize("name", OUTSIDE_REDIS_ERROR)
def test_the_cluster_client_and_its_pipelines_translate(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cluster's calls and its pipelines' execute go through the translation (redis-py's
    own methods made to raise, as they do when the slots cache lacks a slot)."""

    def fail(*_: Any, **__: Any) -> Any:
        raise REDIS_PY_ERRORS[name]("Slot 42 is not covered by the cluster.")

    monkeypatch.setattr(RedisCluster, "execute_command", fail)
    monkeypatch.setattr(ClusterPipeline, "execute", fail)
    monkeypatch.setattr(
        RedisCluster, "pipeline", lambda *_: ClusterPipeline.__new__(ClusterPipeline)
    )
    client = Cluster.__new__(Cluster)  # no cluster to talk to: only the wrapping is tested
    with pytest.raises(RedisError):
        client.execute_command("GET", "k")
    with pytest.raises(RedisError):
        client.get("k")
    pipe = client.pipeline()
    with pytest.raises(RedisError):
        pipe.execute()


def test_a_cluster_nobody_answers_is_unavailable_redis() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RedisError):
        Cluster(startup_nodes=[ClusterNode("127.0.0.1", port)])
    with pytest.raises(RedisUnavailable):
        connect(f"redis+cluster://127.0.0.1:{port}")


def test_the_errors_module_names_what_callers_catch() -> None:
    assert issubclass(errors.ClusterUnavailable, errors.ConnectionError)
    assert issubclass(errors.ClusterClientError, RedisError)
