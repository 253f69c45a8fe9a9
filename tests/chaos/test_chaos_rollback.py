"""Redis forgets its last writes while a worker runs a task: it restarts from an older
snapshot, as after a power loss under `appendfsync everysec` or a failover to a replica that
lagged. The worker claims the task again, as the same attempt number; the two runs must have
different fencing tokens, and the first run's result, reported under a token Redis does not
know, must be refused loudly (an error naming the task, counted in the metrics, the result
kept in the worker's log), never stored over the second run's nor dropped without a trace.

jobcenter's Redis here keeps no AOF: its state is the last `SAVE`, so a kill -9 and a restart
roll it back to that snapshot. The test's own records (starts, gates) live on the session's
Redis, which keeps them through the rollback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from chaos_harness import Cluster, close_cluster, short_settings
from helpers import wait_until

from jobcenter import Client
from jobcenter.storage.metrics import read_counters
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import Store, connect

JOB_SECONDS = 30.0
RDB_FILE = "dump.rdb"  # redis-server's default dbfilename


def _runs(cluster: Cluster, job_id: str, n: int) -> list[dict[str, Any]]:
    """The task's runs (starts, each with its token) once there are `n`, else []."""
    starts = cluster.starts(job_id, "held")
    return starts if len(starts) >= n else []


@pytest.fixture
def forgetful_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis without an AOF: a restart brings back its last snapshot (SAVE), no more."""
    server = RedisServer(tmp_path / "forgetful-redis", appendonly=False).start()
    yield server
    server.stop()


def test_a_claim_redis_forgot_runs_again_under_a_new_token_and_the_stale_result_is_refused(
    forgetful_redis: RedisServer, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    server = forgetful_redis
    cluster = Cluster(server.url, namespace, tmp_path, events_url=redis_url)
    store = Store(connect(server.url), short_settings(server.url, namespace))
    client = Client(store)
    try:
        held = {"id": "held", "task": "chaos.hold", "args": ["g"]}
        job_id = client.submit({"name": "rolled-back", "tasks": [held]})
        redis.Redis.from_url(server.url).save()  # the snapshot Redis comes back to: queued
        snapshot = (server.data_dir / RDB_FILE).read_bytes()
        worker = cluster.start()
        (first,) = wait_until(lambda: _runs(cluster, job_id, 1), JOB_SECONDS)

        server.kill()  # the power loss: every write since the snapshot is gone
        (server.data_dir / RDB_FILE).write_bytes(snapshot)
        server.restart()
        _, second = wait_until(
            lambda: _runs(cluster, job_id, 2), JOB_SECONDS, message="no second run of the task"
        )

        # the same worker, the same attempt number (Redis lost the first claim's count) ...
        assert (second["worker"], second["handler"]) == (first["worker"], first["handler"])
        assert second["token"].split(":")[0] == first["token"].split(":")[0] == "1"
        # ... but another token: the two runs are told apart
        assert second["token"] != first["token"], "two runs of the task share a fencing token"

        cluster.open_gate(f"g:{first['token']}")  # the first run ends and reports its result
        loud = (
            f"result refused: Redis does not know attempt 1 of task 'held' (token {first['token']}"
        )
        (line,) = wait_until(
            lambda: [line for line in worker.log().splitlines() if loud in line],
            JOB_SECONDS,
            message=f"no error about the stale result:\n{worker.log()}",
        )
        assert "ERROR" in line and job_id in line and "lost writes" in line
        assert f"it returned '{first['token']}'" in line  # its result: kept in the log
        assert read_counters(store).unknown_attempts.get(("result",)) == 1
        assert client.status(job_id)["tasks"]["held"]["state"] == "running"  # the second run

        cluster.open_gate(f"g:{second['token']}")
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
        assert client.result(job_id, "held") == second["token"]  # the run Redis knows
    finally:
        store.redis.close()
        close_cluster(cluster)
