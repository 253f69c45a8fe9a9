"""The rq child (the recovery executor) rides a Redis outage out: a failover or a restart
does not kill it, nor fill the worker's log with rq's errors and tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import redis
from helpers import wait_until

from jobcenter.storage.server.embedded import RedisServer

# How long Redis stays down: longer than redis-py's default retries ride out (10 tries,
# backoff capped at 1 s), as a Sentinel failover is. The outage is the scenario, not a wait.
OUTAGE_SECONDS = 5.0
BLOCKED_SECONDS = 30.0  # the child is back in its dequeue (a blocked client) by then


def blocked_clients(url: str) -> int:
    """Clients blocked in a command: the rq child waiting on its queue."""
    client = redis.Redis.from_url(url)
    try:
        return sum("b" in c.get("flags", "") for c in client.client_list())
    finally:
        client.close()


def test_the_rq_child_rides_a_redis_restart_out_without_an_error(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    log_path = tmp_path / "rq-child.log"
    env = {**os.environ, "JOBCENTER_REDIS_URL": server.url, "JOBCENTER_NAMESPACE": "rq-outage"}
    with log_path.open("wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "jobcenter.runtime.rq_runner"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: blocked_clients(server.url) > 0, BLOCKED_SECONDS, message="no dequeue")
        server.kill()
        time.sleep(OUTAGE_SECONDS)
        server.restart()
        wait_until(
            lambda: blocked_clients(server.url) > 0,
            BLOCKED_SECONDS,
            message=f"the rq child did not come back to its queue:\n{log_path.read_text()}",
        )
        assert child.poll() is None, log_path.read_text()
        text = log_path.read_text()
        assert "ERROR" not in text and "Traceback" not in text, text
    finally:
        child.kill()
        child.wait()
        server.stop()
