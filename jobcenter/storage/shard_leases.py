"""Owned segments in Redis: the live-worker list each segment's shards are shared out by,
the leases on a shard's segments (shard_lease.lua: take, renew, give back, fenced by a
token), and the blocking pop an idle worker waits on one shard's wake-up lists with.

A segment is the tasks of one queue in one shard, or the shard's leader messages
(LEADER_SEGMENT); every lease call touches the keys of its shard alone (one hash slot)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .keyspace import schema
from .keyspace.keys import Keys
from .lua import Scripts
from .server.connection import time_ms
from .server.replies import text

Segment = tuple[int, str]  # (shard, queue name or LEADER_SEGMENT)

LAST_OWNER = schema.code("LAST_OWNER")
STALE_TOKEN = schema.code("STALE_TOKEN")
# A blocking pop ends well within the client's socket timeout (redis-py's default: 5 s), or
# it would read as a dead connection.
BLOCK_MAX_SECONDS = 2.0
# Redis 6.2 cuts a blocking timeout down to whole milliseconds and reads 0 as "for ever": a
# BLPOP of 0.001 s or less blocks until the socket times out. No pop waits less than this.
BLOCK_MIN_SECONDS = 0.01
NUDGE_TOKENS_MAX = 64  # a stopping worker wakes at most this many others' renewals
OWNERS_READ_MAX = 100  # leases read per segment by owners_of (the dashboard's read)


@dataclass(frozen=True)
class Lease:
    """One worker's lease on a segment, as the owners zset holds it."""

    handler: str
    token: int
    deadline_ms: int


@dataclass(frozen=True)
class Members:
    """The live members of every segment, as one `serve` read them."""

    now_ms: int  # Redis TIME of the read
    by_segment: dict[str, list[str]]  # segment -> its live members, sorted
    spoke_ms: dict[str, int]  # member -> the last time it said it serves (Redis ms)


class ShardLeases:
    """The lease calls and the segment-member list of one namespace."""

    def __init__(self, redis: Any, keys: Keys, lease_ms: int) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_ms = lease_ms
        self.scripts = Scripts(redis)

    def _run(self, calls: Mapping[Segment, list[Any]]) -> list[Any]:
        """shard_lease.lua once per segment, with its ARGV, in one pipeline."""
        batch = self.scripts.batch()
        for (shard, segment), args in calls.items():
            keys = [self.keys.segment_owners(shard, segment), self.keys.segment_epoch(shard)]
            batch.add("shard_lease", keys, args)
        return batch.execute()

    def take(self, handler: str, segments: Sequence[Segment]) -> dict[Segment, int]:
        """Take a lease on each segment (beside any other owner's); the token of each."""
        replies = self._run({seg: ["take", handler, self.lease_ms] for seg in segments})
        return {seg: int(reply[1]) for seg, reply in zip(segments, replies, strict=True)}

    def renew(self, handler: str, held: Mapping[Segment, int]) -> set[Segment]:
        """Renew the leases `held` (segment -> token); returns those lost (expired, given
        back, or taken anew: the token is stale), which the caller no longer owns."""
        calls = {seg: ["renew", handler, self.lease_ms, token] for seg, token in held.items()}
        replies = self._run(calls)
        return {seg for seg, reply in zip(calls, replies, strict=True) if reply[0] == STALE_TOKEN}

    def give_back(
        self, handler: str, held: Mapping[Segment, int], *, hand_over: bool
    ) -> set[Segment]:
        """Give back the leases `held`; with `hand_over`, only those another live owner
        keeps (the rest stay leased, so a rebalance never leaves a segment without an
        owner). Returns the segments no longer leased to `handler`."""
        flag = int(hand_over)
        calls = {seg: ["give_back", handler, 0, token, flag] for seg, token in held.items()}
        replies = self._run(calls)
        return {seg for seg, reply in zip(calls, replies, strict=True) if reply[0] != LAST_OWNER}

    def serve(self, handler: str, segments: Sequence[str], live_ms: int) -> Members:
        """Say (with Redis TIME) that `handler` serves `segments`, drop members silent for
        `live_ms`, and return the live members: the lists the shards are shared out by."""
        now_ms = time_ms(self.redis)
        key = self.keys.segment_members()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(key, {f"{segment}|{handler}": now_ms for segment in segments})
        pipe.zremrangebyscore(key, "-inf", f"({now_ms - live_ms}")
        pipe.zrange(key, 0, -1, withscores=True)
        by_segment: dict[str, list[str]] = {}
        spoke_ms: dict[str, int] = {}
        for raw, score in pipe.execute()[-1]:
            segment, _, member = text(raw).rpartition("|")
            by_segment.setdefault(segment, []).append(member)
            spoke_ms[member] = max(spoke_ms.get(member, 0), int(score))
        found = {segment: sorted(members) for segment, members in by_segment.items()}
        return Members(now_ms, found, spoke_ms)

    def leave(self, handler: str, segments: Sequence[str], nudge: int) -> None:
        """Drop `handler` from the member list; wake up to `nudge` other workers' renewals
        so they share its segments out at once."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.segment_members(), *(f"{s}|{handler}" for s in segments))
        tokens = min(nudge, NUDGE_TOKENS_MAX)
        if tokens:
            wake = self.keys.segments_wake()
            pipe.rpush(wake, *[1] * tokens)
            pipe.ltrim(wake, -NUDGE_TOKENS_MAX, -1)
            pipe.pexpire(wake, self.lease_ms)
        pipe.execute()

    def wait_for_changes(self, timeout: float) -> bool:
        """Block until a worker gives segments back (leave's nudge: True) or `timeout`
        passes (held between BLOCK_MIN_SECONDS and BLOCK_MAX_SECONDS)."""
        wake = self.keys.segments_wake()
        return self.redis.blpop([wake], timeout=block_seconds(timeout)) is not None

    def pass_on_nudge(self) -> None:
        """Put back a nudge popped by a worker that has just left: its own renewal loop may
        still have been waiting, and the nudge is for the workers that stay."""
        push_wake(self.redis, self.keys.segments_wake())

    def owners(self, shard: int, segment: str) -> list[Lease]:
        """The leases on a segment, expired ones included (deadline in Redis ms)."""
        key = self.keys.segment_owners(shard, segment)
        return _leases(self.redis.zrange(key, 0, -1, withscores=True))


def owners_of(redis: Any, keys: Keys, segments: Sequence[Segment]) -> dict[Segment, list[Lease]]:
    """The leases on each of `segments`, expired ones included, in one pipeline (the first
    OWNERS_READ_MAX of each: a segment has about workers / shards owners)."""
    pipe = redis.pipeline(transaction=False)
    for shard, segment in segments:
        pipe.zrange(keys.segment_owners(shard, segment), 0, OWNERS_READ_MAX - 1, withscores=True)
    return {seg: _leases(found) for seg, found in zip(segments, pipe.execute(), strict=True)}


def _leases(members: list[tuple[bytes, float]]) -> list[Lease]:
    found = []
    for raw, score in members:
        handler, _, token = text(raw).rpartition("|")
        found.append(Lease(handler, int(token), int(score)))
    return found


def pop_wake(redis: Any, keys: Sequence[str], timeout: float) -> str | None:
    """Block until a wake-up token arrives on one of `keys` (all of one shard: one hash
    slot), or `timeout` seconds pass; the key it came on, or None. A long wait is made of
    pops of BLOCK_MAX_SECONDS at most."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        popped = redis.blpop(list(keys), timeout=block_seconds(left))
        if popped is not None:
            return text(popped[0])
        if left <= BLOCK_MAX_SECONDS:
            return None


def block_seconds(timeout: float) -> float:
    """The timeout to send with a blocking pop for a wait of `timeout` seconds."""
    return min(max(timeout, BLOCK_MIN_SECONDS), BLOCK_MAX_SECONDS)


def push_wake(redis: Any, key: str) -> None:
    """Put back a wake-up token popped by a listener whose loop no longer waits."""
    redis.lpush(key, 1)
