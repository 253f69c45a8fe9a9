"""A node worker's presence, kept by its rq child: a worker may be alive yet unable to
heartbeat (a task holding its GIL, the process stopped with SIGSTOP), and recovery must not
take that for a dead node and fail its pinned tasks (ARCHITECTURE.md, Recovery rule 4).
The child is a process of its own, so it renews the node's entry in the nodes zset while
the worker exists; it exits with the worker (runtime/lifeline.py), so a dead worker's node
goes silent within a lifeline check."""

from __future__ import annotations

import logging
import threading
import time

from jobcenter.config import Settings
from jobcenter.errors import RedisUnavailable
from jobcenter.storage.server.connection import connect
from jobcenter.storage.server.errors import REDIS_TROUBLE
from jobcenter.storage.store import Store

log = logging.getLogger(__name__)

# Renewals per worker timeout: a node is dead once silent for a whole timeout, so two
# renewals may fail (Redis away, the child descheduled) before it is taken for dead.
RENEWALS_PER_TIMEOUT = 3


def keep_node_present(settings: Settings, node: str) -> None:
    """Renew `node`'s presence from a daemon thread for as long as this process runs."""
    interval = settings.worker_timeout_seconds / RENEWALS_PER_TIMEOUT

    def renew() -> None:
        store: Store | None = None
        while True:  # until the process ends, with its worker
            try:
                store = store or Store(connect(settings.redis_url), settings)
                store.mark_node_present(node)
            except (*REDIS_TROUBLE, RedisUnavailable) as exc:
                log.warning("presence of node %r not renewed: %s; trying again", node, exc)
            time.sleep(interval)

    threading.Thread(target=renew, name="jobcenter-presence", daemon=True).start()
