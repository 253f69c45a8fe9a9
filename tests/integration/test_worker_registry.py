"""The worker registry holds the workers alive now: a worker killed without deregistering
(kill -9, power loss) is dropped once silent past the worker timeout, so restarts do not
grow it."""

from __future__ import annotations

import signal

from harness import PROCESS_START_SECONDS
from helpers import wait_until
from integration_harness import Workers

RESTARTS = 3
# Short settings, so dead entries age out within a test: heartbeats every 0.2 s.
FAST = {"JOBCENTER_LEASE_SECONDS": "0.6", "JOBCENTER_WORKER_TIMEOUT_SECONDS": "1"}


def registered(workers: Workers) -> set[str]:
    return {m.decode() for m in workers.redis.zrange(workers.keys.workers(), 0, -1)}


def test_workers_killed_by_restarts_leave_the_registry(workers: Workers) -> None:
    dead = set()
    for k in range(RESTARTS):
        worker = workers.start(name=f"crashed{k}", env=FAST)
        handler = workers.handler_of(worker)
        assert handler is not None
        worker.expect_exit = {-signal.SIGKILL}
        worker.signal(signal.SIGKILL)
        worker.wait()
        assert handler in registered(workers)  # it could not deregister itself
        dead.add(handler)

    live = workers.start(name="live", env=FAST)
    handler = workers.handler_of(live)

    wait_until(
        lambda: registered(workers) == {handler},
        timeout=PROCESS_START_SECONDS,
        message=f"the registry still holds dead workers: {registered(workers) - {handler}}",
    )
    for gone in dead:
        assert not workers.redis.exists(workers.keys.worker_info(gone))
