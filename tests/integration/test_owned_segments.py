"""Owned segments (seed 002): N workers share M shards through leases in Redis. Every shard
keeps an owner, a SIGTERM gives a worker's shards back at once, a kill -9'd owner's shards
are taken over within one lease, no task waits longer than a lease plus a poll for a worker,
and an idle fleet's requests grow with the shards owned, not with shards x workers."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from harness import PROCESS_START_SECONDS, WorkerProcess
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers, worker_pool

from jobcenter import Client
from jobcenter.config import IDLE_WAIT_SECONDS
from jobcenter.runtime.notifier import POLL_SECONDS as NOTIFY_POLL_SECONDS
from jobcenter.runtime.segments import RENEWALS_PER_LEASE, assign
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT, Keys
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.server.connection import time_ms
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.server.replies import text
from jobcenter.storage.shard_leases import ShardLeases
from jobcenter.storage.store import Store

SEGMENTS = ("default", LEADER_SEGMENT)  # what the tier's workers serve
STOPPING_LOG = "stopping (signal"
SAMPLE_SECONDS = 0.02  # how often the owner watch reads the leases
SUBMIT_SECONDS = 0.05  # one job submitted this often while owners die
IDLE_SECONDS = 5.0  # the idle period whose requests are counted
# Leases of the kill test: a takeover has a third of it to spare (half a lease of silence,
# found by a round at most a sixth of a lease later), room for a worker slowed by a loaded
# machine.
KILL_TEST_LEASE_SECONDS = 5.0
# Requests an idle worker sends each second whatever it owns: the scheduler tick's lease
# (acquire; release) and its reads.
PER_WORKER_EVALSHA = 2.0


def settings(shards: int, segment_lease: float, task_lease: float = 30.0) -> dict[str, str]:
    return {
        "JOBCENTER_SHARDS": str(shards),
        "JOBCENTER_SEGMENT_LEASE_SECONDS": str(segment_lease),
        "JOBCENTER_LEASE_SECONDS": str(task_lease),
    }


class Owners:
    """The live leases on every segment, read from Redis (Redis TIME decides what is live)."""

    def __init__(self, client: redis.Redis, namespace: str, shards: int) -> None:
        self.redis = client
        self.shards = shards
        self.keys = Keys(namespace, shards)
        self.leases = ShardLeases(client, self.keys, 1)

    def live(self) -> dict[tuple[int, str], set[str]]:
        """One snapshot (MULTI): every segment's leases and the time they are judged at, so
        no lease runs out or is taken between the reads."""
        segments = [(shard, segment) for shard in range(self.shards) for segment in SEGMENTS]
        pipe = self.redis.pipeline(transaction=True)
        for shard, segment in segments:
            pipe.zrange(self.keys.segment_owners(shard, segment), 0, -1, withscores=True)
        pipe.time()
        *found, (seconds, micros) = pipe.execute()
        now = int(seconds) * 1000 + int(micros) // 1000
        return {
            segment: {text(raw).rpartition("|")[0] for raw, deadline in leases if deadline > now}
            for segment, leases in zip(segments, found, strict=True)
        }

    def converged(self, handlers: list[str]) -> bool:
        """Every segment's shards are leased exactly as the rule shares them out."""
        expected = {
            (shard, segment): {h for h in handlers if shard in assign(self.shards, handlers, h)}
            for shard in range(self.shards)
            for segment in SEGMENTS
        }
        return self.live() == expected

    def without_owner(self) -> list[tuple[int, str]]:
        return [segment for segment, owners in self.live().items() if not owners]


@contextmanager
def watch_owners(owners: Owners) -> Iterator[list[str]]:
    """Read the leases all along the block; yields the list of moments a segment had no
    live owner (to be empty)."""
    gaps: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(SAMPLE_SECONDS):
            missing = owners.without_owner()
            if missing:
                gaps.append(f"{time_ms(owners.redis)}: no owner for {missing}")

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield gaps
    finally:
        done.set()
        thread.join()


def start_fleet(workers: Workers, count: int) -> list[WorkerProcess]:
    return [workers.start(name=f"w{k}") for k in range(count)]


def wait_converged(owners: Owners, fleet: list[WorkerProcess], lease: float) -> None:
    handlers = [w.handler for w in fleet]
    wait_until(
        lambda: owners.converged(handlers),
        timeout=PROCESS_START_SECONDS + 2 * lease,
        message=f"the leases never matched the rule: {owners.live()}",
    )


@pytest.mark.parametrize(("count", "shards"), [(1, 3), (2, 5), (3, 2)])
def test_the_shards_are_shared_out_by_the_rule_and_every_shard_has_an_owner(
    count: int, shards: int, workers: Workers, namespace: str
) -> None:
    workers.settings = settings(shards, segment_lease=3.0)
    fleet = start_fleet(workers, count)
    owners = Owners(workers.redis, namespace, shards)
    wait_converged(owners, fleet, 3.0)
    live = owners.live()
    assert all(live.values()), f"a segment has no owner: {live}"
    per_worker = {w.name: {seg for seg, held in live.items() if w.handler in held} for w in fleet}
    assert all(per_worker.values()), f"a worker owns nothing: {per_worker}"


def test_sigterm_gives_the_shards_back_at_once_and_the_others_take_them(
    workers: Workers, redis_url: str, namespace: str, scratch: Scratch
) -> None:
    """The lease is long (30 s, renewed every 10 s): the other worker owns everything within
    a few seconds only because the stopping one gave its leases back and woke it."""
    shards, lease = 4, 30.0
    workers.settings = settings(shards, segment_lease=lease)
    fleet = start_fleet(workers, 2)
    owners = Owners(workers.redis, namespace, shards)
    wait_converged(owners, fleet, lease)
    client = Client.from_url(redis_url, namespace, shards=shards)
    client.submit(
        {"name": "busy", "tasks": [{"id": "b", "task": "tasks_for_tests.block", "args": ["b"]}]}
    )
    (started,) = wait_until(lambda: scratch.events("started", "b"), timeout=JOB_SECONDS)
    busy = next(w for w in fleet if w.name == started["worker"])
    other = next(w for w in fleet if w is not busy)

    busy.signal(signal.SIGTERM)
    wait_until(lambda: STOPPING_LOG in busy.log(), message="no SIGTERM reached the worker")
    wait_until(
        lambda: all(held == {other.handler} for held in owners.live().values()),
        timeout=lease / RENEWALS_PER_LEASE / 2,
        message=f"the shards were not handed over at once: {owners.live()}",
    )
    assert busy.alive, "the stopping worker still runs its task, yet owns nothing"
    kept = [
        lease
        for segment in owners.live()
        for lease in owners.leases.owners(*segment)
        if lease.handler == busy.handler
    ]
    assert not kept, f"the stopping worker kept leases: {kept}"
    scratch.open_gate("b")
    assert busy.wait() == 0


@pytest.mark.parametrize(("count", "shards"), [(2, 3), (3, 2), (3, 5)])
def test_a_killed_owners_shards_are_taken_within_one_lease_and_no_task_waits_longer(
    count: int, shards: int, workers: Workers, redis_url: str, namespace: str
) -> None:
    lease = KILL_TEST_LEASE_SECONDS
    workers.settings = settings(shards, segment_lease=lease, task_lease=lease)
    fleet = start_fleet(workers, count)
    owners = Owners(workers.redis, namespace, shards)
    wait_converged(owners, fleet, lease)
    client = Client.from_url(redis_url, namespace, shards=shards)
    victim = random.choice(fleet)
    victim.expect_exit.add(-signal.SIGKILL)
    theirs = [seg for seg, held in owners.live().items() if victim.handler in held]

    submitted: list[str] = []
    stop = threading.Event()

    def submit() -> None:
        while not stop.wait(SUBMIT_SECONDS):
            one = {"id": "t", "task": "tasks_for_tests.record"}
            submitted.append(client.submit({"name": "trickle", "tasks": [one]}))

    feeder = threading.Thread(target=submit, daemon=True)
    with watch_owners(owners) as gaps:
        feeder.start()
        try:
            wait_until(lambda: len(submitted) >= 10, timeout=JOB_SECONDS)
            victim.kill9()
            killed_ms = time_ms(workers.redis)

            def taken_over() -> int | None:
                live = owners.live()
                if all(live[seg] - {victim.handler} for seg in theirs):
                    return time_ms(workers.redis)
                return None

            taken_ms = wait_until(
                taken_over,
                timeout=2 * lease,
                interval=SAMPLE_SECONDS,
                message=f"the killed worker's shards {theirs} were not taken over",
            )
            seen = len(submitted)
            wait_until(lambda: len(submitted) >= seen + 10, timeout=JOB_SECONDS)
        finally:
            stop.set()
            feeder.join()
    assert not gaps, gaps[:5]
    assert taken_ms - killed_ms <= lease * 1000, (
        f"the killed worker's shards {theirs} were taken {taken_ms - killed_ms} ms after the "
        f"kill: more than one lease ({lease} s)"
    )
    waits = task_waits(client.store, submitted)
    bound_ms = (lease + IDLE_WAIT_SECONDS) * 1000
    late = {job: ms for job, ms in waits.items() if ms > bound_ms}
    assert not late, f"tasks waited longer than a lease plus a poll ({bound_ms} ms): {late}"


def task_waits(store: Store, job_ids: list[str]) -> dict[str, int]:
    """Each job's task: ms from ready (queued at) to started, once the job finished."""
    waits = {}
    for job_id in job_ids:
        wait_until(
            lambda j=job_id: store.progress(j).left == 0,  # type: ignore[misc]
            timeout=JOB_SECONDS,
            message=f"job {job_id} never finished",
        )
        fields = store.task_fields(job_id, TaskField.QUEUED_AT, TaskField.STARTED_AT)
        queued, started = fields[TaskField.QUEUED_AT]["0"], fields[TaskField.STARTED_AT]["0"]
        waits[job_id] = int(started) - int(queued)
    return waits


@pytest.fixture
def private_workers(
    private_redis: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[Workers]:
    """Workers on a Redis of this test's own: its command counts are theirs alone."""
    with worker_pool(private_redis.url, namespace, tmp_path) as pool:
        yield pool


def test_an_idle_fleet_sends_requests_for_the_shards_it_owns_not_shards_times_workers(
    private_workers: Workers, namespace: str
) -> None:
    count, shards, lease = 3, 12, 10.0
    workers = private_workers
    workers.settings = settings(shards, segment_lease=lease)
    fleet = start_fleet(workers, count)
    owners = Owners(workers.redis, namespace, shards)
    wait_converged(owners, fleet, lease)
    before, start_ms = commandstats(workers.redis), time_ms(workers.redis)
    time.sleep(IDLE_SECONDS)  # the period measured, not a wait for a condition
    after, end_ms = commandstats(workers.redis), time_ms(workers.redis)
    seconds = (end_ms - start_ms) / 1000
    rates = {cmd: (after.get(cmd, 0) - before.get(cmd, 0)) / seconds for cmd in after}
    owned = shards * len(SEGMENTS)  # each segment's shards have one owner each here
    # each owned shard: a claim and a listener's pop per idle wait, a lease renewal per third
    # of a lease; each owned leader shard: the notifier's look for due deliveries; each
    # worker: its scheduler tick
    notifier = shards / NOTIFY_POLL_SECONDS
    per_second = owned / IDLE_WAIT_SECONDS + notifier + owned * RENEWALS_PER_LEASE / lease
    bound = 1.25 * per_second + PER_WORKER_EVALSHA * count
    without_ownership = count * (owned / IDLE_WAIT_SECONDS + notifier)  # every worker, all
    assert bound < without_ownership
    script_calls = rates.get("evalsha", 0) + rates.get("fcall", 0)  # FCALL: Redis 7 functions
    assert script_calls <= bound, rates
    assert rates.get("blpop", 0) <= 1.25 * owned / IDLE_WAIT_SECONDS + count, rates


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }
