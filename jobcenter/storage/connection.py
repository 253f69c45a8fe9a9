"""Connections to Redis and the one clock every decision uses: Redis TIME, never a worker's."""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobcenter.errors import RedisUnavailable

from .errors import UNREACHABLE


def connect(url: str, **kwargs: Any) -> Redis:
    """A Redis client for `url` (redis://, rediss:// for TLS, ACL user:password in the URL)."""
    kwargs.setdefault("health_check_interval", 30)
    client = Redis.from_url(url, **kwargs)
    try:
        client.ping()
    except (*UNREACHABLE, OSError) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {exc}") from exc
    return client


def probe_client(timeout: float, url: str | None = None, **kwargs: Any) -> Any:
    """A client for quick checks (health probes, a server starting): short timeouts and one
    try, since a probe that waits is a probe that times out. By `url`, or host/port kwargs."""
    options: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        **kwargs,
    }
    return Redis.from_url(url, **options) if url is not None else Redis(**options)


def time_ms(client: Any) -> int:
    """Redis TIME in milliseconds."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
