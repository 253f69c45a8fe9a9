"""Connections to Redis and the one clock every decision uses: Redis TIME, never a worker's.

`connect` is the one factory: every client of a deployment comes from it, so one setting
(JOBCENTER_REDIS_URL / --redis-url) picks a single Redis, a Redis Cluster or a Sentinel-run
primary:

- ``redis://[user:password@]host:port[/db]`` (``rediss://`` for TLS): one Redis;
- ``redis+cluster://[user:password@]host:port[,host:port...]``: a Redis Cluster, reached
  through any of the nodes listed (redis-py's RedisCluster learns the rest);
- ``redis+sentinel://[password@]host:port[,host:port...]/master-name[/db]``: the primary the
  Sentinels at those addresses name (redis-py's Sentinel.master_for follows failovers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis import Redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from jobcenter.errors import RedisUnavailable

from .errors import UNREACHABLE, ClusterClientError, cluster_errors_as_redis_errors

CLUSTER_SCHEME = "redis+cluster"
SENTINEL_SCHEME = "redis+sentinel"
# For `connect(url, retry=OUTAGE_RETRY)`: a command meeting a lost connection tries again for
# about a minute (a Sentinel failover or a Redis restart) before its caller sees the error.
OUTAGE_RETRY = Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), retries=60)
DEFAULT_PORT = 6379


@dataclass(frozen=True)
class Address:
    """A cluster or sentinel URL taken apart: the seed addresses, the credentials, and for
    Sentinel the master's name and database."""

    nodes: list[tuple[str, int]]
    username: str | None = None
    password: str | None = None
    master: str = ""
    db: int = 0


def parse_multi_host(url: str) -> Address:
    """Take apart a ``redis+cluster://`` or ``redis+sentinel://`` URL (urllib cannot: its
    netloc holds several host:port pairs); a ValueError names what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in (CLUSTER_SCHEME, SENTINEL_SCHEME):
        raise ValueError(f"not a {CLUSTER_SCHEME}:// or {SENTINEL_SCHEME}:// URL: {url!r}")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = (unquote(user) or None, unquote(secret)) if colon else (None, user)
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ValueError(f"{url!r}: {item!r} is not host:port")
        nodes.append((host, int(port)))
    parts = [p for p in path.split("/") if p]
    if scheme == CLUSTER_SCHEME:
        if parts:
            raise ValueError(f"{url!r}: a cluster URL has no path (a cluster has only db 0)")
        return Address(nodes, username, password)
    if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError(f"{url!r}: a sentinel URL ends in /<master name>[/<db>]")
    return Address(nodes, username, password, parts[0], int(parts[1]) if len(parts) == 2 else 0)


# redis-py leaves these two untyped
_cluster_node: Any = ClusterNode
_sentinel: Any = Sentinel


class Cluster(RedisCluster):
    """redis-py's cluster client raising only RedisErrors (storage/server/errors.py): its own
    errors (a slot no node serves while a failover settles, no node answering) are no
    RedisErrors there, and a loop that waits out Redis trouble would die of them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with cluster_errors_as_redis_errors():
            super().__init__(*args, **kwargs)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        with cluster_errors_as_redis_errors():
            return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        with cluster_errors_as_redis_errors():
            pipe = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = _ClusterPipeline  # the same object, its execute translated
        return pipe


class _ClusterPipeline(ClusterPipeline):
    def execute(self, raise_on_error: bool = True) -> Any:
        with cluster_errors_as_redis_errors():
            return super().execute(raise_on_error)


def client_for(url: str, **kwargs: Any) -> Any:
    """A client for `url` (any of the forms above), not yet checked to answer."""
    scheme = url.partition("://")[0]
    if scheme == CLUSTER_SCHEME:
        address = parse_multi_host(url)
        return Cluster(
            startup_nodes=[_cluster_node(host, port) for host, port in address.nodes],
            username=address.username,
            password=address.password,
            **kwargs,
        )
    if scheme == SENTINEL_SCHEME:
        address = parse_multi_host(url)
        options = {k: v for k, v in kwargs.items() if k != "health_check_interval"}
        sentinel: Any = _sentinel(address.nodes, **options)
        return sentinel.master_for(
            address.master,
            db=address.db,
            username=address.username,
            password=address.password,
            **kwargs,
        )
    return Redis.from_url(url, **kwargs)


def connect(url: str, **kwargs: Any) -> Any:
    """A client for `url` that answered PING (redis://, rediss:// for TLS, ACL user:password
    in the URL; redis+cluster://, redis+sentinel://: see the module's doc)."""
    kwargs.setdefault("health_check_interval", 30)
    try:
        client = client_for(url, **kwargs)
        client.ping()
    except (*UNREACHABLE, OSError) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {exc}") from exc
    except ClusterClientError as exc:  # RedisCluster finds no node of the cluster it can use
        raise RedisUnavailable(f"cannot reach Redis at {url}: {exc}") from exc
    return client


def server_addresses(url: str, client: Any = None) -> set[tuple[str, int]]:
    """The (host, port) of every Redis server of a deployment: those `url` names (a
    Sentinel URL's Sentinels), and those `client` talks to (every node a cluster knows)."""
    found: set[tuple[str, int]] = set()
    scheme = url.partition("://")[0]
    if scheme in (CLUSTER_SCHEME, SENTINEL_SCHEME):
        found.update(parse_multi_host(url).nodes)
    elif scheme in ("redis", "rediss") and urlsplit(url).hostname:
        found.add((urlsplit(url).hostname or "", urlsplit(url).port or DEFAULT_PORT))
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes()  # type: ignore[no-untyped-call]
        found.update((node.host, int(node.port)) for node in nodes)
    elif client is not None:
        options = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if options.get("host"):
            found.add((str(options["host"]), int(options.get("port") or DEFAULT_PORT)))
    return found


def is_cluster(client: Any) -> bool:
    """Whether `client` talks to a Redis Cluster (keys of one call must share one slot)."""
    return isinstance(client, RedisCluster)


def probe_client(timeout: float, url: str | None = None, **kwargs: Any) -> Any:
    """A client for quick checks (health probes, a server starting): short timeouts and one
    try, since a probe that waits is a probe that times out. By `url`, or host/port kwargs."""
    options: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        **kwargs,
    }
    return client_for(url, **options) if url is not None else Redis(**options)


def time_ms(client: Any) -> int:
    """Redis TIME in milliseconds (on a cluster, its default node's: nodes keep NTP time)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
