"""Workers and nodes in Redis: registration, the task names they serve, wakes and server
checks."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis

from ..server.eviction import config_value
from ..server.replies import text
from ..shard_leases import ShardLeases, pop_wake, push_wake
from .base import StoreBase

log = logging.getLogger(__name__)


def served_member(queue: str, task_name: str) -> str:
    """How the served-tasks zset names a task name served on a queue (queue names hold no
    '|')."""
    return f"{queue}|{task_name}"


class Presence(StoreBase):
    """Workers and nodes: registration, served task names, wakes, server checks."""

    # -- workers --------------------------------------------------------------------------

    def poke(self, handler: str, shards: Sequence[int], tokens: int = 2) -> None:
        """End a stopping worker's blocking waits on `shards`: `tokens` on its own wake
        list of each (one per wait listening there: the claim loop's and the leader's)."""
        if not shards:
            return
        pipe = self.redis.pipeline(transaction=False)
        for shard in shards:
            key = self.keys.worker_wake(shard, handler)
            pipe.rpush(key, *["stop"] * tokens)
            pipe.expire(key, 60)
        pipe.execute()

    def shard_leases(self) -> ShardLeases:
        """The leases of owned segments (shards), at the settings' lease length."""
        return ShardLeases(self.redis, self.keys, self.settings.segment_lease_ms)

    def pop_wake(self, keys: Sequence[str], timeout: float) -> str | None:
        """Block up to `timeout` s on wake-up lists of one shard; the key that woke, if any."""
        return pop_wake(self.redis, keys, timeout)

    def push_wake(self, key: str) -> None:
        """Put back a wake-up a listener took for a loop that was not waiting."""
        push_wake(self.redis, key)

    def idle(self, queues: Sequence[str]) -> bool:
        """Nothing ready, waiting out a backoff, or waiting for a leader, in any shard."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.keys.shards):
            pipe.zcard(self.keys.leader(shard))
            for q in queues:
                pipe.zcard(self.keys.queue(shard, q))
                pipe.zcard(self.keys.delayed(shard, q))
        return not any(pipe.execute())

    def register_worker(self, handler: str, info: dict[str, Any], node: str | None) -> None:
        """Heartbeat the handler (and its node) with Redis TIME, so no worker clock counts."""
        now_ms = self.now_ms()
        ttl = int(self.settings.worker_timeout_seconds * 1000)
        pipe = self.redis.pipeline(transaction=False)
        # a worker killed without deregistering (kill -9, power loss) stops heartbeating:
        # drop it once silent past the timeout, so restarts do not grow the registry
        pipe.zremrangebyscore(self.keys.workers(), "-inf", now_ms - ttl)
        pipe.zadd(self.keys.workers(), {handler: now_ms})
        pipe.hset(self.keys.worker_info(handler), mapping={**info, "seen_at": now_ms})
        pipe.pexpire(self.keys.worker_info(handler), ttl)
        if node:
            pipe.zadd(self.keys.nodes(), {node: now_ms})
        pipe.execute()

    def mark_node_present(self, node: str) -> None:
        """Say (with Redis TIME) that a worker of `node` lives, whether or not it heartbeats:
        its rq child, a process of its own, calls this (runtime/presence.py)."""
        self.redis.zadd(self.keys.nodes(), {node: self.now_ms()})

    def publish_served(self, queues: Sequence[str], names: Sequence[str], keep_ms: int) -> None:
        """Say (with Redis TIME) that a live worker serves each of `queues` with each task name
        in `names`; entries nobody renewed for `keep_ms` are dropped (recovery reads them)."""
        now_ms = self.now_ms()
        key = self.keys.served_tasks()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now_ms - keep_ms)
        if names:
            pipe.zadd(key, {served_member(q, name): now_ms for q in queues for name in names})
        pipe.execute()

    def served_since(self, since_ms: int) -> set[str]:
        """The served_member()s some live worker published at or after `since_ms`."""
        members = self.redis.zrangebyscore(self.keys.served_tasks(), since_ms, "+inf")
        return {m.decode() for m in members}

    def live_worker_fields(self, *names: str) -> list[tuple[str, ...]]:
        """The fields `names` of every worker heartbeating within the timeout ('' if absent)."""
        since = self.now_ms() - int(self.settings.worker_timeout_seconds * 1000)
        handlers = self.redis.zrangebyscore(self.keys.workers(), since, "+inf")
        pipe = self.redis.pipeline(transaction=False)
        for handler in handlers:
            pipe.hmget(self.keys.worker_info(handler.decode()), *names)
        return [tuple(text(v) for v in values) for values in pipe.execute() if values[0]]

    def deregister_worker(self, handler: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers(), handler)
        pipe.delete(self.keys.worker_info(handler))
        pipe.execute()

    def check_server(self) -> list[str]:
        """Warn about server settings that weaken the guarantees (ARCHITECTURE.md,
        Durability). An evicting maxmemory-policy is no warning: workers refuse it
        (storage/server/eviction.py)."""
        warnings = []
        try:
            aof = config_value(self.redis, "appendonly")
        except redis.ResponseError:
            warnings.append(
                "cannot read the server's config (CONFIG is disabled); make sure "
                "it runs with appendonly yes"
            )
        else:
            if aof != "yes":
                warnings.append("appendonly is off: a Redis restart loses what it held")
        if self.cluster and self.keys.shards < len(self.redis.get_primaries()):
            warnings.append(
                f"JOBCENTER_SHARDS={self.keys.shards} on a cluster of "
                f"{len(self.redis.get_primaries())} masters: jobs live on {self.keys.shards} of "
                "them at most; a new namespace with 8 or more shards per master spreads them"
            )
        for warning in warnings:
            log.warning(warning)
        return warnings
