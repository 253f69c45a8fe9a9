"""The cluster tier's settings and worker pool (tests/cluster/conftest.py puts the
integration tier's harness on the path first)."""

from __future__ import annotations

from typing import Any

from helpers import wait_until
from integration_harness import Workers

from jobcenter import Client
from jobcenter.storage.errors import RedisError

SHARDS = 6  # two shards per master, so every master holds jobs
# Short leases: a killed worker's task, or one whose completion a lost master took with it,
# runs again within seconds.
CLUSTER_ENV = {
    "JOBCENTER_SHARDS": str(SHARDS),
    "JOBCENTER_LEASE_SECONDS": "1.5",
    "JOBCENTER_WORKER_TIMEOUT_SECONDS": "3",
    "JOBCENTER_RECOVERY_INTERVAL_SECONDS": "1",
}


class ClusterWorkers(Workers):
    settings = CLUSTER_ENV


# A Sentinel-run Redis is one primary: one shard, the same short leases. Recovery runs on rq
# there, at its default interval: rq logs a traceback (and its child is restarted) when the
# primary dies under a pass it runs, which a pass each second would make the likely case.
SENTINEL_ENV = {
    k: v
    for k, v in CLUSTER_ENV.items()
    if k not in ("JOBCENTER_SHARDS", "JOBCENTER_RECOVERY_INTERVAL_SECONDS")
}


class SentinelWorkers(Workers):
    settings = SENTINEL_ENV


def wait_through_failover(client: Client, job_id: str, timeout: float) -> dict[str, Any]:
    """client.wait, riding out the errors the test's own client meets while no primary
    answers (the workers ride them out themselves)."""

    def finished() -> dict[str, Any] | None:
        try:
            return client.wait(job_id, timeout)
        except RedisError:
            return None

    return wait_until(finished, timeout=timeout, message=f"job {job_id} never ended")
