"""Local Redis Clusters and Sentinel groups from the managed redis-server (embedded.py): what
the cluster and sentinel test tiers and `make bench BENCH_ARGS=--cluster` run on.

The cluster is built with plain commands (CLUSTER MEET, ADDSLOTS, REPLICATE) rather than
`redis-cli --cluster create`, so it works with any redis-server binary we find, redis-cli
or not, and we know which replica follows which master.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobcenter.errors import JobcenterError

from .connection import CLUSTER_SCHEME, SENTINEL_SCHEME, probe_client
from .embedded import HOST, RedisServer, find_redis_server, free_port, port_is_free
from .errors import RedisError

SLOTS = 16384
CLUSTER_BUS_OFFSET = 10_000  # Redis < 7 has no cluster-port: the bus is port + 10000
READY_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.05
PROBE_TIMEOUT_SECONDS = 1.0
# Short enough that a test sees a failover within seconds; long enough not to misfire on a
# loaded two-core machine.
NODE_TIMEOUT_MS = 3_000
SENTINEL_DOWN_AFTER_MS = 2_000
SENTINEL_FAILOVER_TIMEOUT_MS = 10_000
SENTINEL_QUORUM = 2


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + CLUSTER_BUS_OFFSET < 65536 and port_is_free(port + CLUSTER_BUS_OFFSET):
            return port


def _poll(condition: Any, what: str, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except RedisError:
            pass  # a node still starting or just killed: ask again
        if time.monotonic() > deadline:
            raise JobcenterError(f"local cluster: {what} not within {timeout:g} s")
        time.sleep(POLL_SECONDS)


def _cluster_ok(client: Any) -> bool:
    return str(client.execute_command("CLUSTER INFO").get("cluster_state")) == "ok"


def _probe(server: RedisServer) -> Any:
    return probe_client(PROBE_TIMEOUT_SECONDS, host=HOST, port=server.port)


class LocalCluster:
    """`masters` masters with `replicas` replicas each, on free loopback ports under
    `data_dir`, every node an AOF-persisted redis-server of ours."""

    def __init__(
        self,
        data_dir: Path | str,
        masters: int = 3,
        replicas: int = 1,
        *,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
        binary: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.binary = binary or find_redis_server()
        self.node_timeout_ms = node_timeout_ms
        self.masters = [self._node(f"m{i}") for i in range(masters)]
        # replicas[i] follow masters[i]
        self.replicas = [[self._node(f"m{i}r{j}") for j in range(replicas)] for i in range(masters)]
        self.ids: dict[int, str] = {}  # port -> cluster node id

    def _node(self, name: str) -> RedisServer:
        conf = [
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            f"cluster-node-timeout {self.node_timeout_ms}",
            "cluster-replica-validity-factor 0",  # a replica may always take over
        ]
        return RedisServer(
            self.data_dir / name, binary=self.binary, extra_conf=conf, pick_port=free_cluster_port
        )

    @property
    def nodes(self) -> list[RedisServer]:
        return self.masters + [r for group in self.replicas for r in group]

    @property
    def url(self) -> str:
        """redis+cluster:// with every node as a seed (any one answering is enough)."""
        seeds = ",".join(f"{HOST}:{node.port}" for node in self.nodes)
        return f"{CLUSTER_SCHEME}://{seeds}"

    def start(self) -> LocalCluster:
        try:
            for node in self.nodes:
                node.start()
            self._form()
        except BaseException:
            self.stop()
            raise
        return self

    def _form(self) -> None:
        clients = {node.port: _probe(node) for node in self.nodes}
        try:
            for port, client in clients.items():
                self.ids[port] = client.execute_command("CLUSTER MYID").decode()
            first = self.masters[0]
            for node in self.nodes[1:]:
                clients[node.port].execute_command("CLUSTER MEET", HOST, first.port)
            per_master = SLOTS // len(self.masters)
            for i, master in enumerate(self.masters):
                end = SLOTS if i == len(self.masters) - 1 else (i + 1) * per_master
                clients[master.port].execute_command(
                    "CLUSTER ADDSLOTS", *range(i * per_master, end)
                )

            def everyone_met() -> bool:
                for client in clients.values():
                    known = client.execute_command("CLUSTER NODES").values()
                    if len(known) < len(self.nodes) or any(
                        "handshake" in node["flags"] or not node["connected"] for node in known
                    ):
                        return False
                return True

            _poll(everyone_met, "every node knowing every other")
            for master, group in zip(self.masters, self.replicas, strict=True):
                for replica in group:
                    _poll(
                        lambda r=replica, m=master: clients[r.port].execute_command(
                            "CLUSTER REPLICATE", self.ids[m.port]
                        ),
                        "a replica following its master",
                    )
            _poll(lambda: self._settled(clients.values()), "cluster_state:ok with replicas")
        finally:
            for client in clients.values():
                client.close()

    def _settled(self, clients: Any) -> bool:
        """cluster_state:ok everywhere, and every node's slot map names each master's
        replicas (what a client learns the cluster from)."""
        for client in clients:
            if not _cluster_ok(client):
                return False
            ranges = client.execute_command("CLUSTER SLOTS")
            if any(len(r) - 3 < len(self.replicas[0]) for r in ranges):
                return False
        for master, group in zip(self.masters, self.replicas, strict=True):
            if not master.running:
                continue
            client = _probe(master)
            try:
                if int(client.info("replication").get("connected_slaves", 0)) < len(group):
                    return False
            finally:
                client.close()
        return True

    def kill_master(self, i: int) -> RedisServer:
        """kill -9 master i; returns it (its replica takes over: wait_promoted)."""
        master = self.masters[i]
        master.kill()
        return master

    def wait_promoted(self, i: int, timeout: float = READY_TIMEOUT_SECONDS) -> RedisServer:
        """Wait until a replica of master i is a master and every live node says
        cluster_state:ok; returns the promoted replica."""
        promoted: list[RedisServer] = []

        def done() -> bool:
            for replica in self.replicas[i]:
                client = _probe(replica)
                try:
                    if client.info("replication").get("role") == "master":
                        promoted[:] = [replica]
                finally:
                    client.close()
            if not promoted:
                return False
            for node in self.nodes:
                if node.running:
                    client = _probe(node)
                    try:
                        if not _cluster_ok(client):
                            return False
                    finally:
                        client.close()
            return True

        _poll(done, f"a replica of master {i} promoted", timeout)
        return promoted[0]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalSentinel:
    """A primary, `replicas` replicas and `sentinels` Sentinels watching them as `master`."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        master: str = "jobcenter",
        binary: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.binary = binary or find_redis_server()
        self.name = master
        self.primary = RedisServer(self.data_dir / "primary", binary=self.binary)
        self.replicas = [
            RedisServer(self.data_dir / f"replica{j}", binary=self.binary) for j in range(replicas)
        ]
        self.sentinels = [
            RedisServer(self.data_dir / f"sentinel{k}", binary=self.binary, sentinel=True)
            for k in range(sentinels)
        ]

    @property
    def url(self) -> str:
        seeds = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"{SENTINEL_SCHEME}://{seeds}/{self.name}"

    def start(self) -> LocalSentinel:
        try:
            self.primary.start()
            for replica in self.replicas:
                replica.extra_conf = [f"replicaof {HOST} {self.primary.port}"]
                replica.start()
            for sentinel in self.sentinels:
                sentinel.extra_conf = [
                    f"sentinel monitor {self.name} {HOST} {self.primary.port} {SENTINEL_QUORUM}",
                    f"sentinel down-after-milliseconds {self.name} {SENTINEL_DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {self.name} {SENTINEL_FAILOVER_TIMEOUT_MS}",
                ]
                sentinel.start()
            _poll(self._watching, "the replicas synced, every sentinel seeing them and the others")
        except BaseException:
            self.stop()
            raise
        return self

    def _watching(self) -> bool:
        for sentinel in self.sentinels:
            client = _probe(sentinel)
            try:
                state = client.sentinel_master(self.name)
                if int(state["num-slaves"]) < len(self.replicas):
                    return False
                if int(state["num-other-sentinels"]) < len(self.sentinels) - 1:
                    return False
            finally:
                client.close()
        for replica in self.replicas:  # and each replica synced: a failover can promote it
            client = _probe(replica)
            try:
                if client.info("replication").get("master_link_status") != "up":
                    return False
            finally:
                client.close()
        return True

    def master_port(self) -> int | None:
        """The port the sentinels name as the primary now (None if they cannot say)."""
        client = _probe(self.sentinels[0])
        try:
            reply = client.sentinel_get_master_addr_by_name(self.name)
        finally:
            client.close()
        return int(reply[1]) if reply else None

    def wait_failover(self, old_port: int, timeout: float = READY_TIMEOUT_SECONDS) -> int:
        """Wait until the sentinels name a primary other than `old_port` and it is writable;
        returns its port."""
        found: list[int] = []

        def done() -> bool:
            port = self.master_port()
            if port is None or port == old_port:
                return False
            client = probe_client(PROBE_TIMEOUT_SECONDS, host=HOST, port=port)
            try:
                if client.info("replication").get("role") != "master":
                    return False
            finally:
                client.close()
            found[:] = [port]
            return True

        _poll(done, "a failover", timeout)
        return found[0]

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def server_on(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def stop(self) -> None:
        for server in [*self.sentinels, *self.replicas, self.primary]:
            server.stop()

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
