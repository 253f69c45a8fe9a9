"""What makes submitting cheap (issue 15.3) changes nothing a caller sees: submit_many's
batches overlap (one in Redis while the next is encoded) yet a refused batch stops every
batch after it; a bad spec still writes nothing; a job split at submit goes straight into the
running index, without passing through the pending one."""

from __future__ import annotations

import pytest
from helpers import CommandLog

from jobcenter import Client
from jobcenter.errors import IdempotencyConflict, SpecError
from jobcenter.model.states import JobState
from jobcenter.storage.store import Store

ONE = {"name": "one", "tasks": [{"id": "a", "task": "t.a"}]}
BATCH = 3


def jobs_in(store: Store) -> int:
    return sum(int(store.redis.zcard(store.keys.jobs(s))) for s in range(store.keys.shards))


def test_a_refused_batch_stops_the_batches_after_it(store: Store) -> None:
    client = Client(store)
    client.submit({**ONE, "idempotency_key": "k"})
    before = jobs_in(store)
    clash = {"name": "other", "tasks": [{"id": "b", "task": "t.b"}], "idempotency_key": "k"}
    specs = [ONE] * BATCH + [ONE, clash, ONE] + [ONE] * (4 * BATCH)

    with pytest.raises(IdempotencyConflict):
        client.submit_many(specs, batch=BATCH)

    # the first batch, and the calls of the refused one Redis ran; none of the later ones
    assert jobs_in(store) - before == BATCH + 2


def test_many_batches_come_back_in_order(store: Store) -> None:
    client = Client(store)
    specs = [{**ONE, "name": f"job-{i}"} for i in range(5 * BATCH + 1)]

    job_ids = client.submit_many(specs, batch=BATCH)

    names = [store.redis.hget(store.keys.job(job_id).job, "name") for job_id in job_ids]
    assert names == [f"job-{i}".encode() for i in range(5 * BATCH + 1)]


def test_a_bad_spec_among_many_writes_nothing(store: Store) -> None:
    client = Client(store)
    bad = {"name": "bad", "tasks": [{"id": "a", "task": "t.a", "depends_on": ["nope"]}]}

    with pytest.raises(SpecError, match="nope"):
        client.submit_many([ONE] * (2 * BATCH) + [bad], batch=BATCH)

    assert jobs_in(store) == 0


def test_a_job_split_at_submit_goes_straight_to_the_running_index(
    store: Store, redis_url: str
) -> None:
    with CommandLog(redis_url) as log:
        job_id = Client(store).submit(ONE)

    shard = store.keys.job_shard(job_id)
    pending = store.keys.state_jobs(shard, JobState.PENDING)
    assert log.count({"ZADD", "ZREM"}, pending, in_script=True) == 0
    assert store.redis.zscore(store.keys.state_jobs(shard, JobState.RUNNING), job_id)
