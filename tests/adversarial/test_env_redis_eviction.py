"""Redis set up to evict keys (a maxmemory-policy other than noeviction), on a private
redis-server. A worker refuses to start on it, and one that finds it at run time stops
claiming until it is fixed. Keys Redis lost all the same (evicted, or deleted as eviction
would) leave no job running for ever: recovery settles the job, failed with an error naming
the lost key, and a cancel of it works."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import CLI_TIMEOUT_SECONDS, subprocess_env
from helpers import health_port, wait_probe, wait_until
from integration_harness import Workers, worker_pool
from lua_helpers import claim, job_field, submit

from jobcenter import Client
from jobcenter.cli.options import EXIT_REFUSED
from jobcenter.config import Settings
from jobcenter.model import codec
from jobcenter.runtime.leader import PUBLISH_CHUNK, Leader
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.keyspace.layout import Layout
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import Store

HANDLER = "eviction-handler"
JOBS = 40  # submitted before Redis evicts: some of their keys go, some stay
FILLER_BYTES = 20_000  # one filler key written to make Redis evict
FILLERS_MAX = 5_000  # a server that evicts nothing of the namespace after these fails the test
# Headroom over what the server uses once the jobs are in: the first fillers fit.
MAXMEMORY_HEADROOM_BYTES = 300_000
IDLE_SECONDS = 2  # the jobs' keys idle this long before the fill: LRU takes them first
# A worker heartbeats (and checks the policy) every third of a lease: a few times a second.
SHORT_LEASE = {"JOBCENTER_LEASE_SECONDS": "1"}
PAUSED = "claiming nothing while Redis may evict"  # what a worker logs at each check
JOB_SECONDS = 30.0


@pytest.fixture
def store(private_redis: RedisServer) -> Iterator[Store]:
    store = Store.from_settings(Settings(redis_url=private_redis.url, namespace="evict"))
    yield store
    store.redis.close()


@pytest.fixture
def workers(private_redis: RedisServer, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes on the private server; each must stop well at the end."""
    with worker_pool(private_redis.url, "evict", tmp_path) as pool:
        yield pool


def cli(store: Store, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A real `jobcenter ARGS` process against the private server."""
    return subprocess.run(
        [sys.executable, "-m", "jobcenter", *args],
        env=subprocess_env(store.settings.redis_url, store.settings.namespace, **env),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def three_tasks(name: str = "j") -> dict[str, Any]:
    return {"name": name, "tasks": [{"id": t, "task": "app.run", "retries": 2} for t in "abc"]}


def recover(store: Store) -> dict[str, Any]:
    report = Recovery(store, "cli:test").run()
    assert report.ran, report.skipped
    return report.to_dict()


def indexed_as(store: Store, job_id: str) -> set[str]:
    """The job indexes (active, and per state) that list the job."""
    shard = store.keys.job_shard(job_id)
    found = {"active"} if store.redis.zscore(store.keys.active(shard), job_id) else set()
    for state in ("pending", "running", "succeeded", "failed", "cancelled"):
        if store.redis.zscore(store.keys.state_jobs(shard, state), job_id) is not None:
            found.add(state)
    return found


def assert_settled_lost(store: Store, job_id: str, state: str, lost_key: str) -> None:
    """The job ended `state`, its error naming `lost_key`, out of the unfinished indexes."""
    status = Client(store).status(job_id)
    assert status["state"] == state
    assert status["error"].startswith("lost: Redis no longer holds"), status["error"]
    assert lost_key in status["error"]
    assert indexed_as(store, job_id) == {state}
    assert store.redis.pttl(store.keys.job(job_id).job) > 0  # kept for the retention


# -- the worker and the policy --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-random"])
def test_a_worker_refuses_to_start_on_a_redis_that_may_evict(store: Store, policy: str) -> None:
    store.redis.config_set("maxmemory-policy", policy)
    port = store.redis.connection_pool.connection_kwargs["port"]

    done = cli(store, "worker", "--burst", "tasks_for_tests")

    assert done.returncode == EXIT_REFUSED, done
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(
        f"error: worker refuses to start: Redis may evict jobcenter's keys (maxmemory-policy "
        f"{policy} on 127.0.0.1:{port}): "
    ), done.stderr
    assert "maxmemory-policy noeviction" in done.stderr
    assert store.redis.zcard(store.keys.workers()) == 0  # it never registered


def test_a_worker_claims_nothing_while_redis_may_evict_and_goes_on_once_it_is_fixed(
    store: Store, workers: Workers
) -> None:
    worker = workers.start("--health-port", "0", env=SHORT_LEASE)
    port = health_port(worker.log)
    store.redis.config_set("maxmemory-policy", "allkeys-lru")

    body = wait_probe(port, "/readyz", 503)
    assert body["reason"].startswith(
        "claiming nothing: Redis may evict jobcenter's keys (maxmemory-policy allkeys-lru on "
    ), body
    assert body["redis_evicts"] in body["reason"]
    checks = worker.log().count(PAUSED)
    client = Client(store)
    job_id = client.submit(
        {"name": "paused", "tasks": [{"id": "a", "task": "tasks_for_tests.record"}]}
    )
    # two more checks said so: a whole heartbeat round went by with the task there
    wait_until(lambda: worker.log().count(PAUSED) >= checks + 2, message="no error logged again")
    assert client.status(job_id)["tasks"]["a"]["state"] == "queued"

    store.redis.config_set("maxmemory-policy", "noeviction")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert wait_probe(port, "/readyz", 200)["redis_evicts"] is None
    assert "Redis evicts no keys any more (maxmemory-policy noeviction): claiming" in worker.log()


def test_a_worker_on_a_redis_whose_config_command_is_disabled_says_so_once_and_serves(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis", extra_conf=['rename-command CONFIG ""']).start()
    try:
        store = Store.from_settings(Settings(redis_url=server.url, namespace="noconfig"))
        job_id = Client(store).submit(
            {
                "name": "j",
                "tasks": [{"id": "a", "task": "tasks_for_tests.record", "kwargs": {"pause": 1.5}}],
            }
        )
        done = cli(store, "worker", "--burst", "tasks_for_tests", **SHORT_LEASE)
        assert done.returncode == 0, done
        assert Client(store).status(job_id)["state"] == "succeeded"
        log = done.stdout + done.stderr
        assert log.count("cannot read maxmemory-policy") == 1, log  # at start, not each check
        assert "CONFIG is disabled or renamed" in log
        store.redis.close()
    finally:
        server.stop()


# -- keys deleted as eviction would -------------------------------------------------------


def test_recovery_fails_a_running_job_whose_tasks_hash_is_gone_and_cancel_then_says_so(
    store: Store,
) -> None:
    job_id = submit(store, three_tasks())
    claim(store, HANDLER, 1)  # one attempt running, with a lease
    tasks_key = store.keys.job(job_id).tasks
    store.redis.delete(tasks_key)

    report = recover(store)

    assert_settled_lost(store, job_id, "failed", tasks_key)
    assert report["lost"] == 1
    done = cli(store, "cancel", job_id)
    assert done.returncode == 0, done
    assert done.stdout.strip() == f"job {job_id} failed"
    assert recover(store)["lost"] == 0  # settled once


def test_a_cancel_ends_a_job_whose_tasks_hash_is_gone_at_once(store: Store) -> None:
    job_id = submit(store, three_tasks())
    tasks_key = store.keys.job(job_id).tasks
    store.redis.delete(tasks_key)

    done = cli(store, "cancel", job_id)

    assert done.returncode == 0, done
    assert done.stdout.strip() == f"job {job_id} cancelled"
    assert_settled_lost(store, job_id, "cancelled", tasks_key)
    assert recover(store)["lost"] == 0


def test_recovery_fails_a_job_listed_as_running_whose_job_hash_is_gone(store: Store) -> None:
    job_id = submit(store, three_tasks())
    claim(store, HANDLER, 1)
    job_key = store.keys.job(job_id).job
    store.redis.delete(job_key)

    report = recover(store)

    assert_settled_lost(store, job_id, "failed", job_key)
    assert report["lost"] == 1
    assert not store.redis.exists(store.keys.job(job_id).tasks)  # nothing runs it any more
    assert Client(store).list(state="running") == []
    done = cli(store, "cancel", job_id)
    assert done.returncode == 0, done
    assert done.stdout.strip() == f"job {job_id} failed"


def test_recovery_finds_a_running_job_the_active_index_lost(store: Store) -> None:
    job_id = submit(store, three_tasks())
    shard = store.keys.job_shard(job_id)
    tasks_key = store.keys.job(job_id).tasks
    store.redis.delete(store.keys.active(shard), tasks_key)

    report = recover(store)

    assert_settled_lost(store, job_id, "failed", tasks_key)
    assert report["lost"] == 1


def test_recovery_fails_a_job_whose_tasks_hash_went_mid_split_though_the_split_went_on(
    store: Store,
) -> None:
    """A job a leader splits loses its tasks hash after the first chunk; the leader that
    takes the split over writes the other chunks (creating the hash again) and queues its
    roots: task 0 is still missing, and recovery settles the job."""
    n = INLINE_SPLIT_MAX + 40
    tasks = [{"id": f"t{i}", "task": "app.run"} for i in range(n)]
    job_id = submit(store, {"name": "big", "tasks": tasks})
    jk = store.keys.job(job_id)
    stored = codec.unpack(store.redis.hget(jk.job, "spec"))
    ranks = store.redis.hget(jk.job, "ranks")
    layout = Layout(stored, codec.unpack(ranks) if ranks else None)
    chunk = layout.pairs(0, PUBLISH_CHUNK)
    assert store.publish_tasks(job_id, HANDLER, 0, PUBLISH_CHUNK, chunk) == 0
    store.redis.delete(jk.tasks)
    Leader(store, "next-leader").split(job_id)
    assert job_field(store, job_id, "state") == "running"
    assert store.redis.exists(jk.tasks)

    report = recover(store)

    assert_settled_lost(store, job_id, "failed", jk.tasks)
    assert report["lost"] == 1
    assert not store.redis.exists(jk.tasks)


def test_recovery_leaves_an_intact_job_alone(store: Store) -> None:
    running = submit(store, three_tasks("running"))
    before = store.redis.hgetall(store.keys.job(running).tasks)

    report = recover(store)

    assert report["lost"] == 0
    assert job_field(store, running, "state") == "running"
    assert store.redis.hgetall(store.keys.job(running).tasks) == before


# -- real eviction ------------------------------------------------------------------------


def namespace_keys(store: Store) -> set[bytes]:
    return set(store.redis.scan_iter(match=f"jc:{store.settings.namespace}:*", count=1_000))


def evict_some_job_keys(store: Store, job_ids: list[str]) -> list[str]:
    """Make Redis evict (allkeys-lru, maxmemory just above its use) until keys of some jobs
    are gone; the namespace's other keys (indexes, queues) are read before each filler, so
    LRU takes the idle job keys first. Returns the jobs that lost a key."""
    client = store.redis
    job_keys = {
        job_id: [store.keys.job(job_id).job.encode(), store.keys.job(job_id).tasks.encode()]
        for job_id in job_ids
    }
    every_job_key = {k for keys in job_keys.values() for k in keys}
    hot = sorted(namespace_keys(store) - every_job_key)
    wait_until(
        lambda: all(client.object("idletime", k) >= IDLE_SECONDS for k in every_job_key),
        timeout=IDLE_SECONDS + 10,
        message="the jobs' keys never went idle",
    )
    client.config_set("maxmemory-samples", 64)  # LRU as exact as Redis makes it
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("maxmemory", client.info("memory")["used_memory"] + MAXMEMORY_HEADROOM_BYTES)
    lost: list[str] = []
    for i in range(FILLERS_MAX):
        pipe = client.pipeline(transaction=False)
        for key in hot:
            pipe.touch(key)
        pipe.set(f"filler:{i}", b"x" * FILLER_BYTES)
        pipe.execute()
        exists = client.pipeline(transaction=False)
        for key in every_job_key:
            exists.exists(key)
        if not all(exists.execute()):
            break
    client.config_set("maxmemory", 0)
    client.config_set("maxmemory-policy", "noeviction")
    assert client.info("stats")["evicted_keys"] > 0
    for job_id, keys in job_keys.items():
        if not all(client.exists(k) for k in keys):
            lost.append(job_id)
    assert lost, "Redis evicted no key of the jobs"
    missing_hot = [k for k in hot if not client.exists(k)]
    assert not missing_hot, f"LRU evicted a key the test kept in use: {missing_hot}"
    return lost


def test_jobs_whose_keys_redis_evicted_are_settled_by_recovery_and_cancel_works(
    store: Store,
) -> None:
    job_ids = [submit(store, three_tasks(f"j{n}")) for n in range(JOBS)]
    claim(store, HANDLER, 5)  # a few attempts running too

    lost = evict_some_job_keys(store, job_ids)
    report = recover(store)

    client = Client(store)
    for job_id in lost:
        jk = store.keys.job(job_id)
        status = client.status(job_id)
        assert status["state"] == "failed", status
        assert jk.job in status["error"] or jk.tasks in status["error"], status["error"]
        assert client.cancel(job_id) == "failed"
    kept = [job_id for job_id in job_ids if job_id not in lost]
    for job_id in kept:
        assert client.status(job_id)["state"] == "running"
    running = {row["id"] for row in client.list(state="running", limit=JOBS)}
    assert running == set(kept)
    assert report["lost"] == len(lost)
    print(f"\n[eviction] {len(lost)} of {JOBS} jobs lost a key; recovery settled each")
