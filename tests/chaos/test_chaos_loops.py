"""A bug in one of a worker's loops (claim, leader, reporter, heartbeat) must not leave a live
process that does no work: the worker gives its running tasks back and exits non-zero, so its
supervisor restarts it, and another worker finishes the job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from chaos_harness import PROCESS_START_SECONDS, Cluster
from chaos_tasks import BREAK_LOOP_ENV
from harness import rq_children_of
from helpers import pid_alive, wait_until

from jobcenter import Client
from jobcenter.runtime.rq_runner import RQ_STOP_SECONDS
from jobcenter.runtime.worker import EXIT_LOOP_FAILED
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX

JOB_SECONDS = 45.0
FORCED_STOP_SECONDS = 30.0  # its start (imports, a connection) and the stop, with room
# A worker object whose second SIGTERM comes while its main thread holds the connection pool's
# lock (as a command taking a connection does), and its graceful stop's thread, holding the
# shard leases' lock, waits for that pool lock: a forced stop run in the interrupted frame
# waits for the leases' lock for ever.
SIGNAL_IN_POOL_LOCK = """
import logging, os, signal, sys, threading, time
from jobcenter.config import Settings
from jobcenter.runtime.worker import Options, Worker
from jobcenter.storage.store import Store, connect
url, namespace = sys.argv[1:]
logging.basicConfig(level=logging.INFO)
store = Store(connect(url), Settings(redis_url=url, namespace=namespace))
worker = Worker(store, Options(leader=False, recovery=False, concurrency=1))
worker.install_signal_handlers()
with store.redis.connection_pool._lock:
    os.kill(os.getpid(), signal.SIGTERM)
    while not worker.ownership.closed:  # its thread is giving the shards back
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Event().wait(60)
"""


def job_for(loop: str) -> dict[str, Any]:
    """A job that makes the broken loop do its work: a split for the leader, a task that
    runs (until its gate opens, for the heartbeat) for the others."""
    if loop == "leader":
        count = INLINE_SPLIT_MAX + 1  # split by a leader, not by its submit
        return {
            "name": "large",
            "tasks": [{"id": f"t{k}", "task": "chaos.step"} for k in range(count)],
        }
    kwargs = {"gate": "go"} if loop == "heartbeat" else {}
    return {"name": f"for-{loop}", "tasks": [{"id": "a", "task": "chaos.step", "kwargs": kwargs}]}


@pytest.mark.parametrize("loop", ["claim", "leader", "reporter", "heartbeat"])
def test_a_worker_whose_loop_fails_gives_its_tasks_back_and_exits_non_zero(
    cluster: Cluster, client: Client, loop: str
) -> None:
    # not waited for: it may exit before a readiness check sees it registered
    broken = cluster.start(name="broken", env={BREAK_LOOP_ENV: loop}, wait_ready=False)
    job_id = client.submit(job_for(loop))

    code = broken.proc.wait(PROCESS_START_SECONDS)
    broken.stopped_by_test = True
    assert code == EXIT_LOOP_FAILED, broken.log()
    assert f"its {loop} loop failed" in broken.log()
    assert f"the {loop} loop is broken by the test" in broken.log()
    if loop in ("reporter", "heartbeat"):  # it held a running task: given back, not left to expire
        history = client.history(job_id)
        assert [h["error"] for h in history] == ["given back by a stopping worker"], history

    cluster.start(name="healthy")
    cluster.open_gate("go")
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded", (status, client.history(job_id))


def test_a_second_sigterm_stops_at_once_while_the_rq_child_will_not(cluster: Cluster) -> None:
    """A graceful stop waits up to RQ_STOP_SECONDS for its rq child; the second SIGTERM is the
    forced stop and must not wait for that child again (it is killed)."""
    worker = cluster.start()
    wait_until(lambda: rq_children_of(worker.pid), message="the worker started no rq child")
    worker.note_rq_children()
    for pid in worker.rq_pids:
        os.kill(pid, signal.SIGSTOP)  # a child that cannot answer its SIGTERM
    # serving: its graceful stop then waits for that child (the case under test), rather
    # than the stop meeting the worker still starting its loops
    wait_until(lambda: " serving " in worker.log(), message="the worker never said it serves")
    worker.stopped_by_test = True
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping (signal 15)" in worker.log(), message="no graceful stop")
    worker.signal(signal.SIGTERM)
    # Well inside one rq grace: a forced stop that waited for the child again would not be.
    worker.wait(RQ_STOP_SECONDS / 2)
    assert "exiting" in worker.log()
    wait_until(lambda: not any(pid_alive(p) for p in worker.rq_pids), message="rq child lives")


def test_a_second_sigterm_that_interrupts_a_frame_holding_a_lock_still_stops_at_once(
    redis_url: str, namespace: str
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_IN_POOL_LOCK, redis_url, namespace],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = worker.communicate(timeout=FORCED_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        worker.kill()
        pytest.fail("the forced stop waited for a lock the interrupted frame held")
    assert worker.returncode == 0, stderr
    assert "gave 0 running tasks back; exiting" in stderr
