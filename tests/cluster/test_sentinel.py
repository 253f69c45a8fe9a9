"""jobcenter on a Sentinel-run Redis (redis+sentinel://): a primary, a replica and three
Sentinels; the primary killed -9 under load, the replica promoted, every job ending; and the
`replicated` durability (WAIT for one replica on submit), with its cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from cluster_harness import SentinelWorkers, failover_load, outcome_after_failover
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, worker_pool

from jobcenter import Client
from jobcenter.config import REPLICATED, Settings
from jobcenter.storage.server.connection import probe_client
from jobcenter.storage.server.embedded import HOST
from jobcenter.storage.server.embedded_cluster import LocalSentinel

pytestmark = pytest.mark.cluster

SUBMITS_MEASURED = 200


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Any:
    with LocalSentinel(tmp_path / "sentinel") as group:
        yield group


def test_a_primary_killed_under_load_fails_over_and_every_job_ends(
    sentinel_group: LocalSentinel, namespace: str, tmp_path: Path, record_property: Any
) -> None:
    url = sentinel_group.url
    # replicated: a submit returns once the replica has the job, so no job may be lost with
    # the primary (acked submits may be, by the README's durability table)
    client = Client.from_url(url, namespace, durability=REPLICATED)
    specs = failover_load(20261125)
    with worker_pool(url, namespace, tmp_path, SentinelWorkers) as pool:
        pool.start()
        pool.start()
        # the kill must not land under a recovery pass: rq logs a traceback when the primary
        # dies beneath one; the next round is a minute away
        pool.wait_recovery_round_done(Settings().recovery_interval_seconds)
        job_ids = client.submit_many(specs)
        scratch = Scratch(pool.redis, namespace)
        wait_until(lambda: len(scratch.events("run")) >= 20, timeout=JOB_SECONDS)

        old = sentinel_group.master_port()
        assert old is not None
        killed_at = time.monotonic()
        sentinel_group.server_on(old).kill()
        sentinel_group.wait_failover(old)
        promoted_after = time.monotonic() - killed_at

        outcome = outcome_after_failover(client, job_ids, specs)
        report = outcome.report(len(job_ids), promoted_after, time.monotonic() - killed_at)
        print(f"\n[sentinel] primary killed -9 under load: {report}")
        record_property("failover", report)
        assert not outcome.problems, outcome.problems[:20]
        # the tasks' own writes went to the killed primary too: they wait the outage out
        # (tasks_for_tests), so no attempt may have failed of it
        assert not outcome.raised, outcome.raised[:20]
        assert not outcome.lost, f"jobs gone with the primary: {outcome.lost}"


def test_replicated_durability_returns_once_the_replica_has_the_job(
    sentinel_group: LocalSentinel, namespace: str, record_property: Any
) -> None:
    url = sentinel_group.url
    spec = {"name": "one", "tasks": [{"id": "a", "task": "tasks_for_tests.record"}]}
    replica = sentinel_group.replicas[0]
    on_replica = probe_client(1.0, host=HOST, port=replica.port)
    figures = {}
    for mode in ("acked", REPLICATED):
        client = Client.from_url(url, namespace, durability=mode)
        started = time.perf_counter()
        client.submit(spec)  # connected, scripts loaded: only the submits are timed
        for _ in range(SUBMITS_MEASURED):
            job_id = client.submit(spec)
            if mode == REPLICATED:  # WAIT 1 returned: the replica holds the job already
                assert on_replica.exists(client.store.keys.job(job_id).job)
        figures[mode] = (time.perf_counter() - started) / SUBMITS_MEASURED * 1000
    on_replica.close()
    report = ", ".join(f"{mode} {ms:.2f} ms" for mode, ms in figures.items())
    print(f"\n[sentinel] one submit after another, per submit: {report}")
    record_property("submit_ms", report)
