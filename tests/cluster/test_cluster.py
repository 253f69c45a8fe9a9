"""jobcenter on a real Redis Cluster: the seed-000 runs, random DAGs with the ordering
checks, retries, a schedule, recovery after a worker's kill -9, and a master killed -9 while
jobs run (its replica is promoted)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_harness import (
    CLUSTER_ENV,
    SHARDS,
    ClusterWorkers,
    failover_load,
    master_of_scratch,
    outcome_after_failover,
    spec_deps,
)
from harness import Cli
from helpers import wait_until
from integration_harness import (
    EXAMPLES,
    JOB_SECONDS,
    Scratch,
    Workers,
    parents_finished_first,
    worker_pool,
)
from redis.cluster import RedisCluster
from test_ordering_random_dags import random_dag

from jobcenter import Client
from jobcenter import schedules as sched
from jobcenter.cli.options import EXIT_REFUSED
from jobcenter.config import Settings
from jobcenter.errors import SettingsMismatch
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage import admin, views
from jobcenter.storage.keyspace.upgrade import SCHEMA_VERSION
from jobcenter.storage.server.connection import connect
from jobcenter.storage.server.embedded_cluster import LocalCluster
from jobcenter.storage.server.system_queue import current_round
from jobcenter.storage.store import Store

pytestmark = pytest.mark.cluster

DAGS = 10  # the integration tier runs 30; a few cover every shard here


def _deps(spec_path: Path) -> dict[str, list[str]]:
    spec = yaml.safe_load(spec_path.read_text())
    return {t["id"]: list(t.get("depends_on", [])) for t in spec["tasks"]}


def test_the_session_cluster_has_three_masters_with_a_replica_each(redis_client: Any) -> None:
    nodes = redis_client.get_nodes()
    assert len(redis_client.get_primaries()) == 3
    assert len(nodes) == 6
    assert redis_client.cluster_info()["cluster_state"] == "ok"


def test_the_shard_count_is_fixed_per_namespace_on_a_cluster(
    redis_url: str, namespace: str
) -> None:
    Client.from_url(redis_url, namespace, shards=SHARDS)

    with pytest.raises(SettingsMismatch, match=f"JOBCENTER_SHARDS={SHARDS}"):
        Client.from_url(redis_url, namespace, shards=SHARDS + 1)


def test_a_worker_warns_when_the_shards_are_fewer_than_the_masters(
    redis_url: str, namespace: str
) -> None:
    few = Client.from_url(redis_url, namespace, shards=2).store.check_server()
    enough = Client.from_url(redis_url, namespace + "x", shards=SHARDS).store.check_server()

    assert any("JOBCENTER_SHARDS=2 on a cluster of 3 masters" in w for w in few), few
    assert not any("JOBCENTER_SHARDS" in w for w in enough), enough


def test_a_worker_refuses_to_start_when_one_primary_of_the_cluster_may_evict(
    redis_client: Any, cli: Cli
) -> None:
    primary = redis_client.get_primaries()[1]  # not the node a plain CONFIG GET asks
    redis_client.config_set("maxmemory-policy", "allkeys-lru", target_nodes=primary)
    try:
        done = cli("worker", "--burst", "tasks_for_tests")
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction", target_nodes=primary)

    assert done.code == EXIT_REFUSED, done.stderr
    assert f"(maxmemory-policy allkeys-lru on {primary.name})" in done.stderr


def test_seed000_success_on_a_cluster(cli: Cli, workers: Workers) -> None:
    workers.start()
    workers.start()
    spec = EXAMPLES / "seed000.yaml"

    result = cli("submit", str(spec), "--wait", "--json", "--timeout", str(JOB_SECONDS))

    assert result.code == 0, result.stderr
    status = result.json()
    assert status["state"] == "succeeded"
    assert all(t["state"] == "succeeded" for t in status["tasks"].values())
    assert parents_finished_first(status, _deps(spec)) == []


def test_seed000_failure_on_a_cluster(cli: Cli, workers: Workers) -> None:
    workers.start()
    spec = EXAMPLES / "seed000_fail.yaml"

    result = cli("submit", str(spec), "--wait", "--json", "--timeout", str(JOB_SECONDS))

    assert result.code == 1, result.stderr
    tasks = result.json()["tasks"]
    assert tasks["t4"]["state"] == "failed"
    assert tasks["t7"]["state"] == tasks["t9"]["state"] == "upstream_failed"
    assert tasks["t8"]["state"] == "succeeded"


def test_a_failed_job_is_compacted_then_retried_and_the_schema_version_kept_on_a_cluster(
    cli: Cli, workers: Workers, client: Client, redis_client: Any
) -> None:
    assert redis_client.get(client.store.keys.schema_version()) == str(SCHEMA_VERSION).encode()
    workers.start()
    failed = cli("submit", str(EXAMPLES / "seed000_fail.yaml"), "--wait", "--json")
    assert failed.code == 1, failed.stderr
    job_id = failed.json()["id"]
    job_key = client.store.keys.job(job_id).job
    # compact.lua and restore.lua name the packed record and the shard's stream in one slot
    wait_until(lambda: redis_client.hget(job_key, "packed") == b"1", JOB_SECONDS)
    assert client.status(job_id)["tasks"]["t4"]["state"] == "failed"

    assert client.retry(job_id) >= 1  # unpacked first (restore.lua), then revived
    events = cli("events", "--job", job_id, "--json").stdout.splitlines()
    kinds = [json.loads(line)["kind"] for line in events]
    assert kinds.index("compacted") < kinds.index("restored") < kinds.index("revived")


def test_random_dags_on_every_shard_run_each_task_once_after_its_parents(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    rng = random.Random(20261123)
    specs = [random_dag(rng, n) for n in range(DAGS)]
    workers.start()
    workers.start()

    job_ids = client.submit_many(specs)

    assert {client.store.keys.job_shard(j) for j in job_ids} != {0}  # not all in one shard
    problems = []
    for job_id, spec in zip(job_ids, specs, strict=True):
        status = client.wait(job_id, JOB_SECONDS)
        if status["state"] != "succeeded":
            problems.append(f"{job_id} ended {status['state']}")
        problems += parents_finished_first(status, spec_deps(spec))
    runs = Counter((r["job"], r["task"]) for r in scratch.events("run"))
    for job_id, spec in zip(job_ids, specs, strict=True):
        problems += [
            f"{t['id']} ran {runs[(job_id, t['id'])]}x"
            for t in spec["tasks"]
            if runs[(job_id, t["id"])] != 1
        ]
    assert not problems, problems[:20]


def test_a_task_failing_twice_succeeds_on_its_third_attempt(
    client: Client, workers: Workers
) -> None:
    workers.start()
    spec = {
        "name": "retried",
        "tasks": [
            {
                "id": "flaky",
                "task": "tasks_for_tests.fail_times",
                "args": [2, "flaky"],
                "retries": 2,
                "retry_backoff": 0.05,
            },
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["flaky"]},
        ],
    }

    status = client.wait(client.submit(spec), JOB_SECONDS)

    assert status["state"] == "succeeded"
    assert status["tasks"]["flaky"]["attempts"] == 3


def test_a_schedule_fires_jobs_on_a_cluster(
    client: Client, workers: Workers, redis_url: str, namespace: str
) -> None:
    spec = {"name": "every-second", "tasks": [{"id": "a", "task": "tasks_for_tests.record"}]}
    schedule = sched.add_schedule(client.store, spec, every="PT1S")
    workers.start()

    def fired() -> list[dict[str, Any]]:
        jobs = client.list(schedule_id=schedule.id)
        return [j for j in jobs if j["state"] == "succeeded"]

    done = wait_until(lambda: len(fired()) >= 2, timeout=JOB_SECONDS, message="no two fires")
    assert done


def test_the_recovery_pass_runs_once_per_round_without_rq(client: Client, workers: Workers) -> None:
    store = client.store
    round_no = current_round(store) + 1_000_000  # a round no worker's child will reach

    first = Recovery(store, "test:first").run(round_no)
    second = Recovery(Store(connect(store.settings.redis_url), store.settings), "test:second").run(
        round_no
    )

    assert first.ran and not second.ran
    assert second.skipped == "this round ran already"
    # and the workers' children run the rounds themselves: the round key moves on
    workers.start()
    store.redis.delete(store.keys.singleton_round("recovery"))
    workers.wait_recovery_round_done(float(CLUSTER_ENV["JOBCENTER_RECOVERY_INTERVAL_SECONDS"]))
    rq_keys = store.redis.keys("rq:*", target_nodes=RedisCluster.PRIMARIES)
    assert not rq_keys  # rq never wrote to the cluster


def test_a_kill9d_workers_task_runs_again_on_another_worker(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    first = workers.start(name="first")
    spec = {
        "name": "gated",
        "tasks": [
            {"id": "a", "task": "tasks_for_tests.block", "args": ["a"], "retries": 1},
            {"id": "b", "task": "tasks_for_tests.record", "depends_on": ["a"]},
        ],
    }
    job_id = client.submit(spec)
    wait_until(lambda: scratch.events("started", "a"), timeout=JOB_SECONDS, message="a idle")
    workers.start(name="second")
    first.expect_exit = {-9}
    first.kill9()

    again = wait_until(
        lambda: [e for e in scratch.events("started", "a") if e["worker"] == "second"],
        timeout=JOB_SECONDS,
        message="a never ran again",
    )
    scratch.open_gate("a")
    status = client.wait(job_id, JOB_SECONDS)

    assert again[0]["attempt"] == 2
    assert status["state"] == "succeeded"
    assert parents_finished_first(status, spec_deps(spec)) == []


def test_a_master_killed_while_jobs_run_loses_no_job_and_breaks_no_ordering(
    private_cluster: LocalCluster, namespace: str, tmp_path: Path, record_property: Any
) -> None:
    url = private_cluster.url
    settings = Settings.from_env(redis_url=url, namespace=namespace, shards=SHARDS)
    client = Client(Store(connect(url), settings))
    specs = failover_load(20261124)
    with worker_pool(url, namespace, tmp_path, ClusterWorkers) as pool:
        pool.start()
        pool.start()
        job_ids = client.submit_many(specs)
        scratch = Scratch(pool.redis, namespace)
        wait_until(lambda: len(scratch.events("run")) >= 20, timeout=JOB_SECONDS)
        # the master holding the tasks' own log of their runs: their writes meet the outage
        victim = master_of_scratch(private_cluster, pool.redis, namespace)

        killed_at = time.monotonic()
        private_cluster.kill_master(victim)
        private_cluster.wait_promoted(victim)
        promoted_after = time.monotonic() - killed_at

        outcome = outcome_after_failover(client, job_ids, specs)
        recovered_after = time.monotonic() - killed_at
        runs = Counter((r["job"], r["task"]) for r in scratch.events("run"))
        ran_again = sum(n - 1 for n in runs.values())
        report = outcome.report(
            len(job_ids), promoted_after, recovered_after, f"{ran_again} task runs repeated, "
        )
        print(f"\n[cluster] master killed -9 while jobs ran: {report}")
        record_property("failover", report)
        assert not outcome.problems, outcome.problems[:20]
        # the tasks' own writes went to the killed master too: they wait the outage out
        # (tasks_for_tests), so no attempt may have failed of it
        assert not outcome.raised, outcome.raised[:20]
        # the submits had replicated long before the kill: none may be missing
        assert not outcome.lost, f"jobs gone with the master: {outcome.lost}"


def test_the_read_models_and_admin_calls_work_on_a_cluster(
    client: Client, workers: Workers
) -> None:
    workers.start()
    spec = yaml.safe_load((EXAMPLES / "seed000_fail.yaml").read_text())
    job_id = client.submit(spec)
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    store = client.store

    assert views.job_summary(store, job_id).state == "failed"
    assert [j.id for j in views.jobs_page(store, views.JobFilter()).jobs] == [job_id]
    assert len(views.job_graph(store, job_id).ids) == 9
    assert views.live_states(store, job_id)
    assert views.task_detail(store, job_id, 3)
    assert views.workers(store)
    assert "default" in views.known_queues(store)
    assert views.queues(store)
    assert views.dead_letter_count(store) == 1
    assert views.recovery(store).rounds == []
    assert [d["job"] for d in admin.dead_letters(store)] == [job_id]
    assert admin.retry_job(store, job_id) >= 1  # t4 fails again: the demo fails every time
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    assert len([h for h in client.history(job_id) if h["task"] == "t4"]) == 2
