"""The cluster tier's settings and worker pool (tests/cluster/conftest.py puts the
integration tier's harness on the path first)."""

from __future__ import annotations

from integration_harness import Workers

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
