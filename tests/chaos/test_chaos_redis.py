"""Redis itself killed with -9 mid-run and restarted from its AOF (appendfsync always), or
refusing every write for want of memory: the workers ride out the outage, and the job
converges with nothing lost and no task failed for it."""

from __future__ import annotations

import time
from typing import Any

import redis
from chaos_harness import LEASE_SECONDS, Cluster, chain_of_layers, check_converged
from helpers import wait_until

from jobcenter import Client
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.server.embedded import RedisServer

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


OUT_OF_MEMORY = "out of memory"  # how a worker logs a write Redis refused at maxmemory
OOM_SECONDS = 4.0  # the outage of the issue: longer than a lease, so leases run out meanwhile
OOM_AFTER_FINISHED = 100  # tasks finished before Redis runs out of memory


def layers_with_failures(width: int, depth: int, failing: int) -> dict[str, Any]:
    """A layered DAG of chaos.step tasks without retries (a task that Redis's refusals made
    fail would stay failed), plus `failing` tasks that fail by design, each with a child."""
    spec = chain_of_layers(width=width, depth=depth, work=0.05, fan_in=2, seed=5)
    for task in spec["tasks"]:
        task["retries"] = 0
        task["kwargs"]["progress"] = True  # a progress report Redis refuses fails no task
    for k in range(failing):
        parent = f"L{depth // 2}.{k}"
        spec["tasks"].append({"id": f"doomed{k}", "task": "chaos.fail", "depends_on": [parent]})
        spec["tasks"].append(
            {"id": f"orphan{k}", "task": "chaos.step", "depends_on": [f"doomed{k}"]}
        )
    return spec


def test_redis_out_of_memory_mid_run_every_task_still_ends_with_its_true_outcome(
    private_redis: RedisServer, outage_cluster: Cluster, private_client: Client
) -> None:
    """Redis under noeviction refuses every write for a few seconds in the middle of a
    600-task job (maxmemory set below its use, then raised again): the workers keep their
    results and try again, no task fails for it, and every loop of both workers goes on."""
    cluster, client = outage_cluster, private_client
    spec = layers_with_failures(width=60, depth=10, failing=2)
    expected = {t["id"]: "succeeded" for t in spec["tasks"]}
    expected.update({f"doomed{k}": "failed" for k in range(2)})
    expected.update({f"orphan{k}": "upstream_failed" for k in range(2)})
    workers = [cluster.start(concurrency=4) for _ in range(2)]
    job_id = client.submit(spec)
    wait_until(
        lambda: len(cluster.events("finish", job_id)) >= OOM_AFTER_FINISHED,
        timeout=JOB_SECONDS,
        message="the job made no progress",
    )
    noticed = [w.log().count(OUT_OF_MEMORY) for w in workers]

    admin = redis.Redis.from_url(private_redis.url)
    admin.config_set("maxmemory", 1)  # below what Redis uses: every write is refused
    out_until = time.monotonic() + OOM_SECONDS
    wait_until(
        lambda: (
            time.monotonic() >= out_until
            and all(w.log().count(OUT_OF_MEMORY) > n for w, n in zip(workers, noticed, strict=True))
        ),
        timeout=JOB_SECONDS,
        message="a worker never met Redis's out-of-memory refusals",
    )
    admin.config_set("maxmemory", 0)
    freed_at_ms = _redis_ms(admin)
    events_before = len(cluster.events())

    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "failed")
    assert not result.problems, "\n".join(result.problems[:30])
    wrong = {t: s for t, s in result.task_states.items() if s != expected[t]}
    assert not wrong, f"tasks that did not end with their true outcome: {wrong}"

    # every loop of both workers still works: heartbeats (the registry and long leases), the
    # leader (a job too large for its submit to split), claims and reports
    long_and_large = {
        "name": "after-the-outage",
        "tasks": [
            {"id": "long", "task": "chaos.step", "kwargs": {"work": 3 * LEASE_SECONDS}},
            *({"id": f"t{k}", "task": "chaos.step"} for k in range(INLINE_SPLIT_MAX + 1)),
        ],
    }
    assert client.wait(client.submit(long_and_large), JOB_SECONDS)["state"] == "succeeded"
    ran_after = {e["worker"] for e in cluster.events("start")[events_before:]}
    assert ran_after == {w.name for w in workers}, "a worker stopped running tasks"
    for w in workers:
        seen = admin.hget(cluster.keys.worker_info(w.handler), "seen_at")
        assert seen is not None and int(seen) > freed_at_ms, f"{w.name} stopped heartbeating"
    assert all(w.alive for w in workers), "a worker exited (see the teardown)"


def _redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
