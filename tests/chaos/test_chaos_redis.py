"""Redis itself killed with -9 mid-run and restarted from its AOF (appendfsync always): the
workers ride out the outage, and the job converges with nothing lost."""

from __future__ import annotations

from typing import Any

from chaos_harness import Cluster, chain_of_layers, check_converged
from helpers import wait_until

from jobcenter import Client
from jobcenter.server import RedisServer

JOB_SECONDS = 45.0
UNREACHABLE = "redis unreachable"  # what a worker logs each time it finds Redis gone


def test_redis_killed_9_and_restarted_from_its_aof_mid_run_the_job_still_succeeds(
    private_redis: RedisServer,
    private_cluster: Cluster,
    private_client: Client,
    record_property: Any,
) -> None:
    cluster, client = private_cluster, private_client
    spec = chain_of_layers(width=10, depth=8, work=0.05, fan_in=3, seed=3)
    workers = [cluster.start(concurrency=4) for _ in range(2)]
    job_id = client.submit(spec)
    wait_until(
        lambda: len(cluster.events("finish", job_id)) >= 25,
        timeout=JOB_SECONDS,
        message="the job made no progress",
    )
    before = len(cluster.events(job=job_id))

    noticed = [w.log().count(UNREACHABLE) for w in workers]

    private_redis.kill()
    # Redis stays down until every worker has run into the outage
    wait_until(
        lambda: all(w.log().count(UNREACHABLE) > n for w, n in zip(workers, noticed, strict=True)),
        message="a worker never noticed that Redis was gone",
    )
    private_redis.restart()
    assert len(cluster.events(job=job_id)) >= before  # acknowledged writes survived

    status = client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, "\n".join(result.problems[:30])
    assert status["state"] == "succeeded"
    print(f"\n[chaos] redis kill -9 + AOF restart: {result.reruns} re-runs {result.rerun_tasks}")
    record_property("reruns", result.reruns)
    assert all(w.alive for w in workers), "a worker exited with Redis (see the teardown)"


def test_an_idle_worker_survives_a_redis_restart_and_then_runs_new_work(
    private_redis: RedisServer, private_cluster: Cluster, private_client: Client
) -> None:
    cluster, client = private_cluster, private_client
    worker = cluster.start(name="idle")
    spec = {"name": "before-restart", "tasks": [{"id": "a", "task": "chaos.step"}]}
    assert client.wait(client.submit(spec), JOB_SECONDS)["state"] == "succeeded"
    # the worker is idle now, blocked on its wake-up lists

    private_redis.kill()
    private_redis.restart()

    job_id = client.submit({**spec, "name": "after-restart"})
    wait_until(
        lambda: client.state(job_id) == "succeeded" or not worker.alive,
        timeout=JOB_SECONDS,
        message="the job did not run after the restart",
    )
    assert worker.alive, f"the worker exited {worker.proc.returncode}:\n{worker.log()}"
    assert client.state(job_id) == "succeeded"
