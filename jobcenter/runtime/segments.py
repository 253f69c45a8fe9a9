"""Owned segments (seed 002): a worker polls only the shards it holds a lease on.

A *segment* is one queue's tasks in one shard, or one shard's leader messages
(LEADER_SEGMENT). Every worker serving a segment writes itself into the segment's member
list each renewal (every third of JOBCENTER_SEGMENT_LEASE_SECONDS); the shards are shared out
by `assign`, a deterministic rule over the sorted live members, so every worker computes the
same split: with fewer workers than shards each owns several, with more each owns one and
shards are shared. A worker takes the leases of the shards assigned to it, renews what it
holds, and gives back what is no longer its own only once another live owner has it (so a
rebalance never leaves a segment unowned). A member silent for half a lease drops out of the
list, so its shards are taken over before its leases expire: a worker that sees another miss
its renewal runs its next round as that one turns silent, so a killed worker's shards are
owned again within two thirds of a lease of its last word (a third of a lease to spare). A
stopping worker gives its leases back at once and wakes the others' renewals.

An idle loop waits per owned shard (`ShardWaits`): one listener thread per shard blocks on
that shard's wake-up lists alone (one hash slot per blocking call, as Redis Cluster needs)
while the loop waits, and rings it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from jobcenter.storage.server.errors import RedisError, trouble
from jobcenter.storage.shard_leases import Members, Segment
from jobcenter.storage.store import Store

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 3  # a lease is renewed this often per lease length
# A member silent for this part of a lease is gone: the next renewal of another worker shares
# its shards out again before its leases expire.
MEMBER_LEASE_FRACTION = 0.5
# A round due when a member turns silent runs this much after, so Redis has it silent then.
SILENT_SLACK_SECONDS = 0.05
LISTEN_SECONDS = 2.0  # a listener's blocking pop, renewed while its loop waits
ERROR_PAUSE_SECONDS = 0.5  # a listener or renewal Redis refused tries again after this


def assign(shards: int, members: Sequence[str], handler: str) -> set[int]:
    """The shards of one segment `handler` owns among `members` (the live workers serving
    it): worker i of the sorted list owns every shard s with s % W == i when W <= shards,
    else shard i % shards (each shard then has ceil or floor of W / shards owners)."""
    ordered = sorted(set(members))
    if handler not in ordered:
        return set()
    i, w = ordered.index(handler), len(ordered)
    if w <= shards:
        return set(range(i, shards, w))
    return {i % shards}


class Ownership:
    """The segments this worker holds leases on, kept by `renew_round` (its own thread)."""

    def __init__(
        self,
        store: Store,
        handler: str,
        segments: Sequence[str],
        on_change: Callable[[set[Segment]], None],
    ) -> None:
        settings = store.settings
        self.leases = store.shard_leases()
        self.shards = store.keys.shards
        self.handler = handler
        self.segments = list(segments)
        self.interval = settings.segment_lease_seconds / RENEWALS_PER_LEASE
        self.member_ms = int(settings.segment_lease_ms * MEMBER_LEASE_FRACTION)
        self.next_round = self.interval  # seconds from the end of a round to the next
        self.on_change = on_change  # called with the segments newly taken
        self.held: dict[Segment, int] = {}  # segment -> fencing token; changed by rounds only
        self.snapshot: frozenset[Segment] = frozenset()  # what the loops read, never locked
        self.peers = 0  # other live workers seen by the last round
        self.lock = threading.RLock()  # one round (or the final give-back) at a time
        self.closed = False

    def owned(self, segment: str) -> list[int]:
        """The shards whose `segment` this worker holds, in shard order."""
        return sorted(shard for shard, seg in self.snapshot if seg == segment)

    def queues_by_shard(self, queues: Sequence[str]) -> dict[int, list[str]]:
        """For each shard where it holds some of `queues`, those queues in the given order."""
        held = self.snapshot
        by_shard: dict[int, list[str]] = {}
        for shard in range(self.shards):
            mine = [q for q in queues if (shard, q) in held]
            if mine:
                by_shard[shard] = mine
        return by_shard

    def renew_round(self) -> None:
        """Say this worker serves its segments, renew its leases, take the shards assigned
        to it, hand over the ones no longer its own."""
        with self.lock:
            if self.closed:
                return
            members = self.leases.serve(self.handler, self.segments, self.member_ms)
            self.peers = len(members.spoke_ms.keys() - {self.handler})
            self.next_round = self._next_round_in(members)
            wanted = {
                (shard, segment)
                for segment in self.segments
                for shard in assign(self.shards, members.by_segment.get(segment, []), self.handler)
            }
            for segment in self.leases.renew(self.handler, self.held):
                log.warning("lost the lease on shard %d (%s): taking it again", *segment)
                del self.held[segment]
            taken = self.leases.take(self.handler, sorted(wanted - self.held.keys()))
            self.held.update(taken)
            surplus = {seg: token for seg, token in self.held.items() if seg not in wanted}
            for segment in self.leases.give_back(self.handler, surplus, hand_over=True):
                del self.held[segment]
            changed = self.snapshot != self.held.keys()
            self.snapshot = frozenset(self.held)
        if changed:
            log.info("owned shards now %s", self._describe())
        self.on_change(set(taken))

    def _next_round_in(self, members: Members) -> float:
        """An interval; or, when another worker has missed its renewal, the moment it turns
        silent: that round drops it and takes its shards half a lease after its last word,
        not up to a third of a lease later (a third of a lease to spare, not a sixth)."""
        missed = [
            spoke_ms
            for member, spoke_ms in members.spoke_ms.items()
            if member != self.handler and members.now_ms - spoke_ms > self.interval * 1000
        ]
        if not missed:
            return self.interval
        silent_in = (min(missed) + self.member_ms - members.now_ms) / 1000
        return min(self.interval, max(silent_in, 0.0) + SILENT_SLACK_SECONDS)

    def give_back_all(self) -> None:
        """A stopping worker: give back every lease at once, leave the member lists and
        wake the other workers' renewals so they take them now. No lease is taken after."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.snapshot = frozenset()
            self.on_change(set())
            held, self.held = self.held, {}
            self.leases.give_back(self.handler, held, hand_over=False)
            self.leases.leave(self.handler, self.segments, nudge=self.peers)
        log.info("gave back every owned shard")

    def run(self, stopped: threading.Event) -> None:
        """Renew every interval, or at once when another worker gives its segments back. A
        round Redis refused is tried again after ERROR_PAUSE_SECONDS, not an interval later:
        the leases are that much nearer their end already."""
        retry = False
        while not stopped.is_set() and not self.closed:
            try:
                if not retry:
                    self._wait_for_round(stopped)
                retry = False
                self.renew_round()
            except RedisError as exc:  # the leases outlive a few refused renewals
                log.warning("shard leases: %s; trying again", trouble(exc))
                retry = True
                stopped.wait(ERROR_PAUSE_SECONDS)

    def _wait_for_round(self, stopped: threading.Event) -> None:
        """Until the next round is due (`next_round`), or a worker gave segments back."""
        deadline = time.monotonic() + self.next_round
        while (left := deadline - time.monotonic()) > 0 and not stopped.is_set():
            if self._wait_for_changes(left):
                return

    def _wait_for_changes(self, timeout: float) -> bool:
        """Whether a worker gave segments back within `timeout`. Once this worker has left,
        a nudge it pops is its own leave's, meant for the others: it is put back."""
        if not self.leases.wait_for_changes(timeout):
            return False
        if self.closed:
            self.leases.pass_on_nudge()
        return True

    def _describe(self) -> str:
        by_segment: dict[str, list[int]] = {}
        for shard, segment in sorted(self.snapshot):
            by_segment.setdefault(segment, []).append(shard)
        return "; ".join(f"{seg}: {shards}" for seg, shards in by_segment.items()) or "none"


class ShardWaits:
    """An idle loop's wait for wake-up tokens on the shards it owns, one shard (one hash
    slot) per blocking call: on its only shard the loop blocks itself, as it always did; on
    several, one listener thread per shard blocks on that shard's lists (`keys_of(shard)`
    and the worker's own wake list there) while the loop waits, and rings the loop. A token
    a listener pops once the loop got busy is pushed back for another worker. Tokens pushed
    while the loop is busy wait in Redis, so its next wait returns at once: a burst is never
    slept through."""

    def __init__(
        self,
        store: Store,
        handler: str,
        keys_of: Callable[[int], list[str]],
        spawn: Callable[[Callable[[], None], str], threading.Thread],
        name: str,
    ) -> None:
        self.store = store
        self.keys = store.keys
        self.handler = handler
        self.keys_of = keys_of
        self.spawn = spawn
        self.name = name
        self.cond = threading.Condition()
        self.owned: set[int] = set()
        self.listening: dict[int, threading.Event] = {}  # shard -> its listener's stop flag
        self.rung: set[int] = set()
        self.waiting = False
        self.closed = False

    def listen_to(self, shards: Iterable[int], ring: Iterable[int] = ()) -> None:
        """Wait on exactly `shards` from now on; ring `ring` (shards just taken, whose work
        may be waiting already)."""
        wanted = set(shards)
        with self.cond:
            if self.closed:
                return
            self.owned = wanted
            listeners = wanted if len(wanted) > 1 else set()
            for shard in set(self.listening) - listeners:
                self.listening.pop(shard).set()
            for shard in listeners - set(self.listening):
                done = threading.Event()
                self.listening[shard] = done
                listen = functools.partial(self._listen, shard, done)
                self.spawn(listen, f"{self.name}-{shard}").start()
            self.rung |= set(ring) & wanted
            self.cond.notify_all()

    @property
    def shards(self) -> list[int]:
        with self.cond:
            return sorted(self.owned)

    def wait(self, timeout: float) -> set[int]:
        """Until an owned shard rings, or `timeout` seconds pass; the shards that rang."""
        with self.cond:
            alone = next(iter(self.owned)) if len(self.owned) == 1 else None
            if not self.rung and not self.closed and alone is None:
                self.waiting = True
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.rung or self.closed, timeout)
                self.waiting = False
            if self.rung or self.closed or alone is None:
                rung, self.rung = self.rung, set()
                return rung
        own = self.keys.worker_wake(alone, self.handler)  # poked when the worker stops
        popped = self.store.pop_wake([*self.keys_of(alone), own], timeout)
        return {alone} if popped is not None and popped != own else set()

    def close(self) -> None:
        """Stop listening; every wait from now on returns at once."""
        with self.cond:
            self.closed = True
            for done in self.listening.values():
                done.set()
            self.listening = {}
            self.owned = set()
            self.cond.notify_all()

    def _listen(self, shard: int, done: threading.Event) -> None:
        own = self.keys.worker_wake(shard, self.handler)  # poked when the worker stops
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.waiting or done.is_set())
                if done.is_set():
                    return
            try:
                popped = self.store.pop_wake([*self.keys_of(shard), own], LISTEN_SECONDS)
            except RedisError as exc:  # the loop's own wait times out and it claims anyway
                log.debug("wake-up wait on shard %d: %s", shard, exc)
                done.wait(ERROR_PAUSE_SECONDS)
                continue
            if popped is None or popped == own:
                continue
            with self.cond:
                if self.waiting:
                    self.rung.add(shard)
                    self.cond.notify_all()
                    continue
            # the loop got busy meanwhile: leave the token to another idle worker (or to
            # this loop's next wait), as a loop that is not waiting takes none
            try:
                self.store.push_wake(popped)
            except RedisError as exc:  # claim.lua wakes another worker when it leaves work
                log.debug("wake-up token of shard %d not handed on: %s", shard, exc)
