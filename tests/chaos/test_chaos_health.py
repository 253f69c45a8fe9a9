"""A worker's health endpoint while Redis goes away under it: stopped, it is not ready but
still alive (a Redis outage is no reason to restart workers, which keep their unreported
results); hung (SIGSTOP), its heartbeat stalls and after the worker timeout it is not alive
either. Both come back when Redis does."""

from __future__ import annotations

import os
import signal

from chaos_harness import WORKER_TIMEOUT_SECONDS, Cluster
from harness import WorkerProcess
from helpers import health_port, probe, wait_probe, wait_until

from jobcenter.storage.server.embedded import RedisServer

OUTAGE_SECONDS = 15.0  # how long a test waits for a worker to notice and get over an outage


def ready_worker(cluster: Cluster) -> tuple[WorkerProcess, int]:
    """A worker with a health endpoint, once it answers ready; and the endpoint's port."""
    worker = cluster.start("--health-port", "0")
    port = health_port(worker.log)
    wait_probe(port, "/readyz", 200)
    return worker, port


def test_readyz_is_503_while_redis_is_down_and_healthz_stays_200(
    private_redis: RedisServer, private_cluster: Cluster
) -> None:
    worker, port = ready_worker(private_cluster)

    private_redis.stop()
    body = wait_probe(port, "/readyz", 503, OUTAGE_SECONDS)
    assert body["reason"].startswith(("redis unreachable", "not registered")), body
    # down for longer than the worker timeout, its heartbeat still goes round: alive
    wait_until(
        lambda: (probe(port, "/readyz")[1]["redis_ok_age_seconds"] or 0) > WORKER_TIMEOUT_SECONDS,
        timeout=OUTAGE_SECONDS,
    )
    code, body = probe(port, "/healthz")
    assert code == 200, body
    assert body["redis_ok_age_seconds"] > WORKER_TIMEOUT_SECONDS

    private_redis.restart()
    body = wait_probe(port, "/readyz", 200, OUTAGE_SECONDS)
    assert body["redis_ok_age_seconds"] < WORKER_TIMEOUT_SECONDS
    assert worker.alive


def test_healthz_is_503_when_a_hung_redis_stalls_the_heartbeat_and_200_again_after(
    private_redis: RedisServer, private_cluster: Cluster
) -> None:
    worker, port = ready_worker(private_cluster)
    redis_pid = private_redis.pid
    assert redis_pid is not None

    os.kill(redis_pid, signal.SIGSTOP)
    try:
        assert wait_probe(port, "/readyz", 503)["reason"]
        body = wait_probe(port, "/healthz", 503, OUTAGE_SECONDS)
        assert body["reason"].startswith("heartbeat stalled"), body
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    wait_probe(port, "/healthz", 200, OUTAGE_SECONDS)
    wait_probe(port, "/readyz", 200, OUTAGE_SECONDS)
    assert worker.alive
