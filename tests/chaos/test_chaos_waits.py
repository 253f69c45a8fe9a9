"""Every wait rides out a Redis restart: `submit --wait`, `Client.wait` and `events --follow`
reconnect with backoff while the job runs on, and end as the job does. A wait whose timeout
runs out while Redis is down exits 4 (the job goes on), never 3 (which says "nothing
happened, submit it again")."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from chaos_harness import Cluster
from helpers import wait_until

from jobcenter import Client
from jobcenter.storage.server.embedded import RedisServer

JOB_SECONDS = 45.0
GATED = {"name": "rides-out", "tasks": [{"id": "a", "task": "chaos.step", "kwargs": {"gate": "a"}}]}
UNREACHABLE = "redis unreachable"  # what a wait logs each time it finds Redis gone
OUTAGE_TIMEOUT_SECONDS = 8.0  # the --timeout that runs out while Redis is down


def spawn_cli(cluster: Cluster, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`jobcenter ARGS` as a process of its own, its stdout and stderr in a log file."""
    proc = cluster.spawn("-m", "jobcenter", *args)
    return proc, cluster.log_dir / f"helper-{len(cluster.helpers)}.log"


def write_spec(tmp_path: Path) -> str:
    path = tmp_path / "gated.json"
    path.write_text(json.dumps(GATED))
    return str(path)


def the_only_job(client: Client) -> str:
    (job,) = client.list()
    return str(job["id"])


def test_every_wait_rides_out_a_redis_restart_and_ends_as_the_job_does(
    private_redis: RedisServer,
    outage_cluster: Cluster,
    private_client: Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, client = outage_cluster, private_client
    cluster.start()
    submit, submit_log = spawn_cli(cluster, "submit", write_spec(tmp_path), "--wait")
    wait_until(lambda: cluster.events("start"), JOB_SECONDS, message="the task never started")
    job_id = the_only_job(client)
    follow, follow_log = spawn_cli(cluster, "events", "--job", job_id, "--follow", "--json")
    wait_until(lambda: '"started"' in follow_log.read_text(), JOB_SECONDS)
    waited: dict[str, Any] = {}

    def wait_in_python() -> None:
        try:
            waited["status"] = client.wait(job_id, JOB_SECONDS)
        except BaseException as exc:
            waited["error"] = exc

    caplog.set_level(logging.WARNING, logger="jobcenter")
    python_wait = threading.Thread(target=wait_in_python, daemon=True)
    python_wait.start()

    private_redis.stop()  # graceful: Redis writes its AOF and exits; nothing is lost
    outage = f"waiting for job {job_id}: {UNREACHABLE}"
    wait_until(
        lambda: (
            (outage in submit_log.read_text() or submit.poll() is not None)
            and (UNREACHABLE in follow_log.read_text() or follow.poll() is not None)
            and (outage in caplog.text or not python_wait.is_alive())
        ),
        JOB_SECONDS,
        message="a wait never met the outage",
    )
    private_redis.restart()
    cluster.open_gate("a")

    assert submit.wait(JOB_SECONDS) == 0, submit_log.read_text()
    assert f"job {job_id} succeeded" in submit_log.read_text()
    python_wait.join(JOB_SECONDS)
    assert "error" not in waited, waited
    assert waited["status"]["state"] == "succeeded"
    # `events --follow --job` ends by itself once the job ended: exit 0
    assert follow.wait(JOB_SECONDS) == 0, follow_log.read_text()
    kinds = [json.loads(line)["kind"] for line in follow_log.read_text().splitlines()
             if line.startswith("{")]  # fmt: skip
    assert kinds.count("finalized") == 1 and kinds.count("submitted") == 1, kinds
    assert the_only_job(client) == job_id  # submitted once


def test_a_wait_whose_timeout_runs_out_while_redis_is_down_exits_4_and_the_job_stays(
    private_redis: RedisServer, outage_cluster: Cluster, private_client: Client, tmp_path: Path
) -> None:
    cluster, client = outage_cluster, private_client  # no worker: the job waits in its queue
    timeout = str(OUTAGE_TIMEOUT_SECONDS)
    submit, submit_log = spawn_cli(
        cluster, "submit", write_spec(tmp_path), "--wait", "--timeout", timeout
    )
    job_id = wait_until(lambda: client.list(), JOB_SECONDS)[0]["id"]

    private_redis.stop()
    code = submit.wait(JOB_SECONDS)
    private_redis.restart()

    output = submit_log.read_text()
    assert code == 4, output
    assert f"waiting for job {job_id}: {UNREACHABLE}" in output
    assert "the job goes on" in output
    assert client.state(job_id) == "running"  # it goes on: a worker would run it now
    assert the_only_job(client) == job_id
