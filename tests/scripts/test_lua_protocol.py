"""Version skew: what a newer release wrote (a queue entry, a job of a protocol above this
release's, schema.PROTOCOL) is never popped, run or changed by this one. The newer release's
writes are made here by hand, as its scripts would: an entry marked with its protocol
("...|v2", schema.PROTOCOL_MARK), and its job hash's protocol field."""

from __future__ import annotations

import pytest
from lua_helpers import (
    H1,
    claim,
    own_argv,
    queued_indexes,
    run_job_script,
    submit_and_split,
    untouched,
)
from test_lua_error_paths import UNKNOWN_JOB_CALLS

from jobcenter.runtime.recovery import Recovery
from jobcenter.storage import limits
from jobcenter.storage.keyspace import schema
from jobcenter.storage.keyspace.schema import JobField
from jobcenter.storage.store import Store

NEWER = schema.PROTOCOL + 1
NEWER_PROTOCOL = schema.code("NEWER_PROTOCOL")


def _flat(name: str, n: int, **task: object) -> dict[str, object]:
    return {"name": name, "tasks": [{"id": f"t{i}", "task": "t.x", **task} for i in range(n)]}


def _as_newer(store: Store, job_id: str) -> list[bytes]:
    """Make the job one a newer release wrote: its protocol in its hash, its queued tasks'
    entries marked with it (same scores: same places in the queue). Its new entries."""
    queue = store.keys.queue(store.keys.job_shard(job_id), "default")
    mark = f"{schema.PROTOCOL_MARK}{NEWER}".encode()
    entries = []
    for member, score in store.redis.zrange(queue, 0, -1, withscores=True):
        if f"|{job_id}|".encode() in member:
            store.redis.zrem(queue, member)
            store.redis.zadd(queue, {member + mark: score})
            entries.append(member + mark)
    store.redis.hset(store.keys.job(job_id).job, JobField.PROTOCOL, NEWER)
    return entries


def _queue(store: Store) -> list[tuple[bytes, float]]:
    return store.redis.zrange(store.keys.queue(0, "default"), 0, -1, withscores=True)


def test_a_claim_leaves_a_newer_releases_entries_in_place_and_takes_those_behind(
    store: Store,
) -> None:
    newer, _ = submit_and_split(store, _flat("newer", 2))  # submitted first: heads the queue
    mine, _ = submit_and_split(store, _flat("mine", 2))
    entries = _as_newer(store, newer)
    before = {m: s for m, s in _queue(store) if m in entries}

    result = store.claim(H1, ["default"], max_tasks=10, max_leader=0)

    assert sorted((t.job_id, t.index) for t in result.tasks) == [(mine, 0), (mine, 1)]
    assert result.newer == {"default": NEWER}
    assert dict(_queue(store)) == before  # read, not popped: the same entries, same places
    assert store.redis.zcard(store.keys.leases(0)) == 2  # no lease, no claim for the newer
    assert store.redis.hlen(store.keys.claims(0)) == 0  # started: claims entries gone
    with untouched(store):  # nothing more to take: the next claim changes nothing
        again = store.claim(H1, ["default"], max_tasks=10, max_leader=0)
    assert (again.tasks, again.newer) == ([], {"default": NEWER})


def test_a_newer_entry_with_pool_slots_is_not_popped_nor_counted(store: Store) -> None:
    """The entry an older release once popped and crashed on: one that takes pool slots."""
    limits.set_pool(store, "gpu", 2)
    newer, _ = submit_and_split(store, _flat("gpu", 4, pool="gpu"))
    entries = _as_newer(store, newer)

    with untouched(store):
        result = store.claim(H1, ["default"], max_tasks=10, max_leader=0)

    assert (result.tasks, result.newer) == ([], {"default": NEWER})
    assert [m for m, _ in _queue(store)] == entries
    assert limits.pools(store)[0].used == 0


@pytest.mark.parametrize("name", sorted(UNKNOWN_JOB_CALLS))
def test_every_job_script_refuses_a_newer_releases_job_and_changes_nothing(
    store: Store, name: str
) -> None:
    job_id, _ = submit_and_split(store, _flat("newer", 1))
    _as_newer(store, job_id)
    with untouched(store):
        args = own_argv(name, job_id, UNKNOWN_JOB_CALLS[name])
        reply = run_job_script(store, name, job_id, args, queues=["default"])
        assert reply == [NEWER_PROTOCOL]


def test_recovery_does_not_queue_a_newer_releases_task_again_in_its_own_form(
    store: Store,
) -> None:
    """Recovery looks for a queued task's entry in the form it writes; a newer release's
    entry has another form, so it must not take the task for lost and queue it again (the
    copy, without what the newer form says, would run here)."""
    job_id, _ = submit_and_split(store, _flat("newer", 2, pool="gpu"))
    entries = _as_newer(store, job_id)

    Recovery(store, "test-recovery").run()

    assert [m for m, _ in _queue(store)] == entries
    assert queued_indexes(store, job_id) == [0, 1]
    assert claim(store, H1) == []
