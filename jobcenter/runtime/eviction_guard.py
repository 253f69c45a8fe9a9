"""A worker serves only a Redis that never evicts its keys (ARCHITECTURE.md, Durability).
At start it refuses a server whose maxmemory-policy may evict (storage/server/eviction.py); at
run time (each heartbeat) it checks again, and while the policy evicts it claims nothing,
neither tasks nor leader steps, and logs an error at each check, until someone fixes it.
It pauses rather than exits: its running tasks still finish and report, and a fleet comes
back by itself once the policy is fixed, instead of restarting into the same refusal. A
server whose CONFIG is disabled or renamed cannot be checked: that is said once."""

from __future__ import annotations

import logging
import threading

from jobcenter.errors import Refused
from jobcenter.storage.server.errors import RedisError
from jobcenter.storage.server.eviction import read_policy
from jobcenter.storage.store import Store

log = logging.getLogger(__name__)


class EvictionGuard:
    """The worker's view of whether Redis may evict: `safe` is set while it may not."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.safe = threading.Event()
        self.safe.set()
        self.problem: str | None = None  # while Redis may evict: what is wrong, in words
        self._unreadable_said = False

    def check_at_start(self) -> None:
        """Refused (the CLI exits 5) if Redis may evict keys."""
        problem = self._read()
        if problem is not None:
            raise Refused(f"worker refuses to start: {problem}")

    def check(self) -> None:
        """Read the policy again: pause claiming while it evicts, go on once it does not.
        A server that does not answer now (a failover) is asked again at the next check."""
        try:
            problem = self._read()
        except RedisError as exc:
            log.warning("cannot read maxmemory-policy now (%s); asking again later", exc)
            return
        if problem is not None:
            log.error("claiming nothing while %s", problem)
            self.problem = problem
            self.safe.clear()
        elif self.problem is not None:
            log.warning("Redis evicts no keys any more (maxmemory-policy noeviction): claiming")
            self.problem = None
            self.safe.set()

    def _read(self) -> str | None:
        """What is wrong with the policy, in words (None: nothing); a server that will not
        say is named once."""
        policy = read_policy(self.store.redis)
        if policy.unreadable and not self._unreadable_said:
            self._unreadable_said = True
            servers = ", ".join(f"{s} ({why})" for s, why in policy.unreadable.items())
            log.warning(
                "cannot read maxmemory-policy on %s: CONFIG is disabled or renamed; make "
                "sure it is noeviction, or Redis may evict jobcenter's keys",
                servers,
            )
        return policy.problem()
