"""The repair path's own executor: recovery runs as an rq job on a system queue.

Every `jobcenter worker` enqueues the round's recovery job (one rq job id per interval,
`unique=True`, so any number of workers enqueue it once) and supervises a child process
running an rq worker for the system queue. The rq worker runs only the recovery function;
jobs use rq's JSON serializer, never pickle.

The child of a worker with a node also keeps that node present while the worker lives
(runtime/presence.py): a stalled worker is not a dead node.

On a Redis Cluster rq cannot run: its keys carry no hash tag and its transactions span
slots. There the same child runs each round's pass itself (`run_rounds`), and singleton.lua's
round number, in shard 0's slot, lets one pass per interval through, whichever worker's child
asks first (ARCHITECTURE.md, Recovery)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from rq import SimpleWorker, get_current_job
from rq.exceptions import DuplicateJobError
from rq.serializers import JSONSerializer

from jobcenter.config import Settings
from jobcenter.errors import RedisUnavailable
from jobcenter.runtime.archiver import PAUSE_AFTER_COMMIT
from jobcenter.storage.server.connection import CLUSTER_SCHEME, OUTAGE_RETRY, connect
from jobcenter.storage.server.errors import REDIS_TROUBLE
from jobcenter.storage.server.system_queue import current_round, recovery_job_id, system_queue
from jobcenter.storage.store import Store

from . import logs
from .lifeline import exit_with
from .presence import keep_node_present
from .recovery import Recovery

log = logging.getLogger(__name__)

RECOVERY_FUNC = "jobcenter.runtime.rq_runner.run_recovery_job"
RQ_STOP_SECONDS = 10  # an rq child finishing a recovery run gets this long at shutdown
ROUND_RETRY_MS = 1_000  # on a cluster: a round Redis refused is tried again this soon
ROUND_WAIT_MIN_MS = 50  # ... and the next round is waited for at least this long


def enqueue_recovery(store: Store) -> bool:
    """Enqueue this round's recovery job unless a worker did already; True if this call did.
    On a cluster nothing is enqueued: the child runs the rounds itself (run_rounds)."""
    if store.cluster:
        return False
    settings = store.settings
    interval = settings.recovery_interval_seconds
    round_no = current_round(store)
    queue = system_queue(store.connection, settings.namespace)
    try:
        queue.enqueue(
            RECOVERY_FUNC,
            settings.namespace,
            round_no,
            job_id=recovery_job_id(settings.namespace, round_no),
            unique=True,
            ttl=int(2 * interval) + 1,  # a round not started within two intervals is moot
            result_ttl=int(3 * interval) + 1,  # keeps the id taken for the whole round
            failure_ttl=int(3 * interval) + 1,
            job_timeout=int(max(interval, 60) * 10),
        )
    except DuplicateJobError:
        return False
    return True


def run_recovery_job(namespace: str, round_no: int) -> dict[str, Any]:
    """The rq job: one recovery pass; its report is the rq result."""
    job = get_current_job()
    assert job is not None
    settings = Settings.from_env(namespace=namespace)
    store = Store(job.connection, settings)
    report = Recovery(store, handler=f"rq:{job.worker_name or os.getpid()}").run(round_no)
    return report.to_dict()


def run_rounds(settings: Settings, stop: threading.Event) -> None:
    """The child's loop on a Redis Cluster: try each round's pass once (the singleton lease
    and round in our Lua let one child's through per round), then wait for the next round.
    A cluster that does not answer (a failover under way) is waited out."""
    handler = f"recovery:{socket.gethostname()}:{os.getpid()}"
    interval_ms = int(settings.recovery_interval_seconds * 1000)
    store: Store | None = None
    while not stop.is_set():
        wait_ms = ROUND_RETRY_MS
        try:
            store = store or Store(connect(settings.redis_url), settings)
            round_no = current_round(store)
            Recovery(store, handler).run(round_no)
            wait_ms = (round_no + 1) * interval_ms - store.now_ms()
        except (*REDIS_TROUBLE, RedisUnavailable) as exc:
            log.warning("recovery round: %s; trying again", exc)
        stop.wait(min(max(wait_ms, ROUND_WAIT_MIN_MS), interval_ms) / 1000)


class RecoveryWorker(SimpleWorker):
    """An rq worker that runs only the recovery function: a job naming anything else that
    someone wrote into the system queue is dropped, never imported."""

    def execute_job(self, job: Any, queue: Any) -> None:
        if job.func_name != RECOVERY_FUNC:
            log.error("dropping rq job %s: %r is not the recovery function", job.id, job.func_name)
            job.delete()
            return
        super().execute_job(job, queue)


def spawn_rq_worker(settings: Settings, node: str | None = None) -> subprocess.Popen[bytes]:
    """Start the rq child of a jobcenter worker (same Redis and settings via the env); for
    a worker of `node`, the child also keeps the node present (runtime/presence.py)."""
    env = {
        **os.environ,
        "JOBCENTER_REDIS_URL": settings.redis_url,
        "JOBCENTER_NAMESPACE": settings.namespace,
    }
    env.pop(PAUSE_AFTER_COMMIT, None)  # a test pauses the worker's archiver, never recovery
    cmd = [sys.executable, "-m", "jobcenter.runtime.rq_runner", "--parent", str(os.getpid())]
    if node:
        cmd += ["--node", node]
    return subprocess.Popen(cmd, env=env)


def stop_rq_worker(
    process: subprocess.Popen[bytes], grace_seconds: float = RQ_STOP_SECONDS
) -> None:
    """SIGTERM, then SIGKILL after `grace_seconds` (0: at once; a pass cut short is safe, the
    next one re-checks everything)."""
    if process.poll() is None:
        if grace_seconds > 0:
            process.terminate()
            try:
                process.wait(grace_seconds)
                return
            except subprocess.TimeoutExpired:
                pass
        process.kill()
        process.wait()


def _connect_when_up(url: str) -> Any:
    """A connection, once Redis answers: a child started while no primary answers (a
    failover under way) waits for one instead of failing. Its commands ride an outage out
    too (OUTAGE_RETRY): rq's loop quits, with a traceback, on a connection error outside its
    dequeue (its suspension check), and logs one there."""
    while True:
        try:
            return connect(url, retry=OUTAGE_RETRY)
        except RedisUnavailable as exc:
            log.warning("rq worker: %s; trying again", exc)
            time.sleep(ROUND_RETRY_MS / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description="jobcenter's rq worker for recovery jobs")
    parser.add_argument("--parent", type=int, default=0)
    parser.add_argument("--node", default="")
    args = parser.parse_args()
    logs.configure(os.environ.get(logs.FORMAT_ENV) or "text", level=logging.WARNING)
    settings = Settings.from_env()
    if args.parent:
        exit_with(args.parent)
        if args.node:
            keep_node_present(settings, args.node)
    if settings.redis_url.startswith(CLUSTER_SCHEME + "://"):
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
        run_rounds(settings, stop)
        return
    queue = system_queue(_connect_when_up(settings.redis_url), settings.namespace)
    worker = RecoveryWorker([queue], connection=queue.connection, serializer=JSONSerializer)
    worker.work(logging_level="WARNING")


if __name__ == "__main__":
    main()
