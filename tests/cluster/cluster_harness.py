"""The cluster tier's settings and worker pool (tests/cluster/conftest.py puts the
integration tier's harness on the path first)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from helpers import wait_until
from integration_harness import Workers, parents_finished_first
from tasks_for_tests import scratch_key
from test_ordering_random_dags import random_dag

from jobcenter import Client
from jobcenter.errors import NotFound
from jobcenter.model.states import TaskState
from jobcenter.storage.server.embedded_cluster import LocalCluster
from jobcenter.storage.server.errors import RedisError

SHARDS = 6  # two shards per master, so every master holds jobs
FAILOVER_JOBS = 12  # jobs running when a primary is killed
FAILOVER_SECONDS = 90.0  # failover (node timeout 3 s) + leases of lost completions, on 2 cores
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


def master_of_scratch(cluster: LocalCluster, client: Any, namespace: str) -> int:
    """The index of the master that holds the test's scratch keys (one hash tag): the one a
    failover test kills, so the tasks' own writes meet the outage too."""
    port = client.get_node_from_key(scratch_key(namespace, "runs")).port
    return next(i for i, master in enumerate(cluster.masters) if master.port == port)


def spec_deps(spec: dict[str, Any]) -> dict[str, list[str]]:
    """task id -> the ids it depends on."""
    return {t["id"]: list(t.get("depends_on", [])) for t in spec["tasks"]}


def failover_load(seed: int) -> list[dict[str, Any]]:
    """FAILOVER_JOBS random DAGs whose tasks work a little, so a kill lands mid-run, and
    retry: a failover outlasts a lease, so a task may run again."""
    rng = random.Random(seed)
    specs = [random_dag(rng, n) for n in range(FAILOVER_JOBS)]
    for spec in specs:
        for task in spec["tasks"]:
            task["args"][1] = 0.05
            task["retries"] = 3
    return specs


@dataclass
class FailoverOutcome:
    """How the jobs of a failover test ended."""

    problems: list[str] = field(default_factory=list)  # not succeeded, or out of order
    lost: list[str] = field(default_factory=list)  # acknowledged, gone with the primary
    retried: int = 0  # attempts beyond each task's first
    # attempts that ended failed, not by a lease running out: what a task raised. The
    # tasks raise nothing of their own, so each is an outage turned into a task failure
    raised: list[str] = field(default_factory=list)

    def report(self, jobs: int, promoted_after: float, ended_after: float, extra: str = "") -> str:
        """The line a failover test prints and records: what was lost or run again, and
        how long the promotion and the recovery of every job took after the kill."""
        return (
            f"{jobs} jobs, {len(self.lost)} lost, {self.retried} extra attempts, {extra}"
            f"replica promoted after {promoted_after:.1f} s, every job ended "
            f"{ended_after:.1f} s after the kill"
        )


def outcome_after_failover(
    client: Client, job_ids: list[str], specs: list[dict[str, Any]]
) -> FailoverOutcome:
    """Wait for every job through the failover and say how each ended."""
    outcome = FailoverOutcome()
    for job_id, spec in zip(job_ids, specs, strict=True):
        try:
            status = wait_through_failover(client, job_id, FAILOVER_SECONDS)
        except NotFound:  # acknowledged, then lost with the primary before replication
            outcome.lost.append(job_id)
            continue
        if status["state"] != "succeeded":
            outcome.problems.append(f"{job_id} ended {status['state']}")
        outcome.problems += parents_finished_first(status, spec_deps(spec))
        outcome.retried += sum(t["attempts"] - 1 for t in status["tasks"].values())
        outcome.raised += [
            f"{job_id} {h['task']} attempt {h['attempt']}: {h['error'].splitlines()[0]}"
            for h in client.history(job_id)
            if h["state"] in (TaskState.RETRY_WAIT, TaskState.FAILED)
        ]
    return outcome
