"""Whether Redis may evict jobcenter's keys: its `maxmemory-policy`, read on every primary
(ARCHITECTURE.md, Durability). Every policy but `noeviction` may: the allkeys-* ones take
any key (a running job's tasks, a queue), the volatile-* ones a key with a TTL (a finished
job's record and results, which must last their retention). So every evicting policy is
refused, not only the allkeys-* ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .connection import is_cluster
from .errors import ResponseError
from .replies import text

SAFE_POLICY = "noeviction"
POLICY = "maxmemory-policy"


@dataclass(frozen=True)
class EvictionPolicy:
    """What the servers said: each server's policy, and those that would not say."""

    policies: dict[str, str]  # server (host:port) -> its maxmemory-policy
    unreadable: dict[str, str]  # server -> why CONFIG GET was refused (disabled, renamed)

    @property
    def evicting(self) -> dict[str, str]:
        """The servers whose policy may evict keys, with that policy."""
        return {server: p for server, p in self.policies.items() if p != SAFE_POLICY}

    def problem(self) -> str | None:
        """What is wrong, in words, with what to do; None when no server may evict."""
        evicting = self.evicting
        if not evicting:
            return None
        where = ", ".join(f"{policy} on {server}" for server, policy in evicting.items())
        return (
            f"Redis may evict jobcenter's keys (maxmemory-policy {where}): a job whose keys "
            "it evicts is lost; run it with maxmemory-policy noeviction (CONFIG SET "
            "maxmemory-policy noeviction, and in its redis.conf)"
        )


def config_value(client: Any, name: str, **target: Any) -> str | None:
    """One setting of the server, by CONFIG GET (None if it has no such setting); a server
    whose CONFIG is disabled or renamed raises ResponseError. `target`: a cluster's node."""
    reply = client.config_get(name, **target)
    return text(reply.get(name, reply.get(name.encode())))


def read_policy(client: Any) -> EvictionPolicy:
    """Each primary's maxmemory-policy (one server, or every primary of a cluster)."""
    policies: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    targets: list[tuple[str, dict[str, Any]]]
    if is_cluster(client):
        targets = [(node.name, {"target_nodes": node}) for node in client.get_primaries()]
    else:
        kwargs = client.connection_pool.connection_kwargs
        name = f"{kwargs['host']}:{kwargs['port']}" if "host" in kwargs else "the primary"
        targets = [(name, {})]
    for server, target in targets:
        try:
            policy = config_value(client, POLICY, **target)
        except ResponseError as exc:  # CONFIG disabled or renamed, or not allowed (ACL)
            unreadable[server] = str(exc)
            continue
        if policy is None:
            unreadable[server] = f"CONFIG GET {POLICY} answered nothing"
        else:
            policies[server] = policy
    return EvictionPolicy(policies, unreadable)
