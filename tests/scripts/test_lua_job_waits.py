"""Waits for another job (`wait_for: {job: ID}`) and for a schedule's run of the same fire
time (`wait_for: {schedule: NAME}`), through the scripts and the leader's steps, on a real
Redis with one shard and with four (the awaited job in another shard than the waiter): the
end of the awaited job releases the wait (or fails it upstream), also when it ended before
the wait began, and a leader that dies half way is followed without a second effect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from lua_helpers import (
    H1,
    LEADER,
    job_field,
    leader_messages,
    task_field,
    token_like,
)

from jobcenter.model import codec
from jobcenter.model.spawn import spawn
from jobcenter.model.spec import parse_spec
from jobcenter.runtime import waits
from jobcenter.runtime.leader import Leader
from jobcenter.runtime.recovery import Recovery
from jobcenter.schedules.manage import add_schedule
from jobcenter.storage import operate
from jobcenter.storage.store import Store

ONE_TASK = {"name": "upstream", "tasks": [{"id": "u", "task": "t.u"}]}


def waiter_job(**wait: Any) -> dict[str, Any]:
    """gate (waits) -> after: after is claimable once the wait succeeded."""
    return {
        "name": "waiter",
        "tasks": [
            {"id": "gate", "wait_for": wait},
            {"id": "after", "task": "t.after", "depends_on": "gate", "inputs": {"up": "gate"}},
        ],
    }


def submit(store: Store, spec: dict[str, Any], **fired: Any) -> str:
    job_id, created = store.submit(parse_spec(spec), **fired)
    assert created
    return job_id


def leader_round(store: Store) -> None:
    """Run every due leader message once, as a worker playing leader would."""
    leader = Leader(store, LEADER)
    for shard in range(store.settings.shards):
        for member in store.redis.zrangebyscore(store.keys.leader(shard), "-inf", store.now_ms()):
            kind, _, job_id = member.decode().partition("|")
            leader.handle(kind, job_id)


def run_all(store: Store, job_id: str, result: bytes = b"") -> None:
    """Claim and complete every task of `job_id` there is to run now (with `result`)."""
    shard = store.keys.job_shard(job_id)
    tasks = store.claim(H1, ["default"], max_tasks=100, max_leader=0, shard=shard).tasks
    for t in tasks:
        assert t.job_id == job_id
        codes, _ = store.complete(H1, [(t.job_id, t.index, t.token, result)])
        assert codes == {(t.job_id, t.index): 0}


def apart(store: Store, make: Callable[[], str], other: str) -> str:
    """A job made by `make` in another shard than job `other` (with more than one shard)."""
    for _ in range(64):
        job_id = make()
        if store.settings.shards == 1 or store.keys.job_shard(job_id) != store.keys.job_shard(
            other
        ):
            return job_id
    raise AssertionError("no job landed in another shard")


@pytest.fixture(params=[1, 4], ids=["one-shard", "four-shards"])
def wstore(request: pytest.FixtureRequest, make_store: Callable[..., Store]) -> Store:
    return make_store(shards=request.param)


def test_a_job_wait_starts_when_the_awaited_job_succeeds(wstore: Store) -> None:
    store = wstore
    upstream = submit(store, ONE_TASK)
    waiter = apart(store, lambda: submit(store, waiter_job(job=upstream)), upstream)
    assert task_field(store, waiter, "s", 0) == "awaiting"
    leader_round(store)  # registers the wait with the upstream job, in its shard
    assert waiter in store.job_awaiters(upstream)
    assert "await" not in leader_messages(store, waiter)
    assert task_field(store, waiter, "s", 0) == "awaiting"

    run_all(store, upstream)
    assert job_field(store, upstream, "state") == "succeeded"
    assert "waiters" in leader_messages(store, upstream)  # posted by the finishing script
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "succeeded"
    result = store.redis.hget(store.keys.job(waiter).tasks, "r:0")
    assert codec.unpack(result) == {"job": upstream, "state": "succeeded"}
    assert store.job_awaiters(upstream) == []
    assert "waiters" not in leader_messages(store, upstream)
    run_all(store, waiter)
    assert job_field(store, waiter, "state") == "succeeded"


def test_a_job_that_ended_before_the_wait_releases_it_at_once(wstore: Store) -> None:
    store = wstore
    upstream = submit(store, ONE_TASK)
    run_all(store, upstream)
    waiter = submit(store, waiter_job(job=upstream))
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "succeeded"
    assert store.job_awaiters(upstream) == []  # nothing registered: nothing to tell


@pytest.mark.parametrize("end", ["failed", "cancelled"])
def test_a_job_that_fails_or_is_cancelled_fails_the_wait_upstream(wstore: Store, end: str) -> None:
    store = wstore
    upstream = submit(store, ONE_TASK)
    waiter = submit(store, waiter_job(job=upstream))
    leader_round(store)
    if end == "cancelled":
        store.stop_job(upstream, "cancel")
    else:
        shard = store.keys.job_shard(upstream)
        (t,) = store.claim(H1, ["default"], max_tasks=1, max_leader=0, shard=shard).tasks
        store.fail(H1, t.job_id, t.index, t.token, "boom", -1)
    assert job_field(store, upstream, "state") == end
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "upstream_failed"
    assert task_field(store, waiter, "e", 0) == f"job {upstream} it waited for ended {end}"
    assert task_field(store, waiter, "s", 1) == "upstream_failed"
    assert job_field(store, waiter, "state") == "failed"


def test_a_wait_for_a_job_that_is_gone_fails_with_its_reason(store: Store) -> None:
    waiter = submit(store, waiter_job(job="01NOSUCHJOB000000000000000"))
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "failed"
    assert "is gone (deleted, or expired" in (task_field(store, waiter, "e", 0) or "")


def test_a_leader_that_dies_while_telling_the_waiters_is_followed_once(wstore: Store) -> None:
    store = wstore
    upstream = submit(store, ONE_TASK)
    first = submit(store, waiter_job(job=upstream))
    second = submit(store, waiter_job(job=upstream))
    leader_round(store)
    run_all(store, upstream)
    # a leader told the first waiter, then died: the message and the other waiter remain
    store.await_settle(first, "end", [upstream, "succeeded", codec.pack("told")])
    assert "waiters" in leader_messages(store, upstream)
    leader_round(store)  # the next leader tells both: the first again, a no-op
    for waiter in (first, second):
        assert task_field(store, waiter, "s", 0) == "succeeded"
        assert task_field(store, waiter, "s", 1) == "queued"
    assert codec.unpack(store.redis.hget(store.keys.job(first).tasks, "r:0")) == "told"
    waits.awaited_step(store, upstream)  # and once more: still nothing changes
    assert task_field(store, first, "s", 1) == "queued"
    assert store.job_awaiters(upstream) == []


def test_a_schedule_wait_starts_when_that_schedules_run_of_the_same_fire_succeeds(
    wstore: Store,
) -> None:
    store = wstore
    nightly = add_schedule(store, ONE_TASK, cron="0 2 * * *", name="nightly")
    report = add_schedule(store, waiter_job(schedule="nightly"), cron="0 2 * * *", name="report")
    fire = 1_800_000_000_000  # the same night for both (the ticker submits them so)
    waiter = submit(
        store,
        {**waiter_job(schedule="nightly"), "idempotency_key": f"{report.id}:{fire}"},
        schedule_id=report.id,
        fire_time=fire / 1000,
    )
    leader_round(store)  # nightly's run of that fire is not there yet: looked for again later
    assert task_field(store, waiter, "s", 0) == "awaiting"
    assert "await" in leader_messages(store, waiter)
    run = submit(
        store,
        {**ONE_TASK, "idempotency_key": f"{nightly.id}:{fire}"},
        schedule_id=nightly.id,
        fire_time=fire / 1000,
    )
    assert store.schedule_run(nightly.id, fire) == run
    waits.await_step(store, waiter)  # the look again (due in a few seconds) finds it
    assert task_field(store, waiter, "aj", 0) == run
    assert store.job_awaiters(run) == [waiter]
    run_all(store, run)
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "succeeded"


def test_a_schedule_wait_fails_when_the_schedule_is_gone_or_the_job_was_not_fired(
    store: Store,
) -> None:
    unscheduled = submit(store, waiter_job(schedule="nightly"))
    leader_round(store)
    assert "schedule nightly does not exist (removed?)" in (
        task_field(store, unscheduled, "e", 0) or ""
    )
    add_schedule(store, ONE_TASK, cron="0 2 * * *", name="nightly")
    unfired = submit(store, waiter_job(schedule="nightly"))
    leader_round(store)
    assert "was not fired by a schedule" in (task_field(store, unfired, "e", 0) or "")


def test_a_spawn_is_fenced_reported_once_and_ends_with_its_child(wstore: Store) -> None:
    store = wstore
    parent = submit(store, {"name": "parent", "tasks": [{"id": "p", "task": "t.p"}]})
    shard = store.keys.job_shard(parent)
    (t,) = store.claim(H1, ["default"], max_tasks=1, max_leader=0, shard=shard).tasks
    marker = spawn({"name": "child", "tasks": [{"id": "c", "task": "t.c"}]}, result="c").packed()
    stale = token_like(t, nonce="0ther")
    assert store.complete(H1, [(parent, 0, stale, marker)])[0] == {(parent, 0): -2}
    assert store.child_jobs(parent) == []
    for _ in range(2):  # a report repeated (its reply lost) starts no second child
        assert store.complete(H1, [(parent, 0, t.token, marker)])[0] == {(parent, 0): 0}
    (child,) = store.child_jobs(parent)
    assert task_field(store, parent, "s", 0) == "awaiting"
    assert not store.redis.zrange(store.keys.leases(shard), 0, -1)  # its lease is given back
    leader_round(store)
    assert store.job_awaiters(child) == [parent]
    run_all(store, child, codec.pack("made by the child"))
    leader_round(store)
    assert task_field(store, parent, "s", 0) == "succeeded"
    assert store.result(parent, "p") == "made by the child"
    assert job_field(store, parent, "state") == "succeeded"


def test_recovery_redelivers_a_lost_release_and_a_lost_timeout(wstore: Store) -> None:
    store = wstore
    upstream = submit(store, ONE_TASK)
    waiter = submit(store, waiter_job(job=upstream))
    approval = submit(store, waiter_job(signal="go", timeout=3600))
    leader_round(store)
    run_all(store, upstream)
    # Redis lost the leader messages (a failover that dropped writes): nothing would come
    for job_id, kind in ((upstream, "waiters"), (approval, "await")):
        store.drop_leader_message(kind, job_id)
    assert Recovery(store, "test-recovery").run().resubmitted == {"await": 2}
    assert "await" in leader_messages(store, waiter)
    assert "await" in leader_messages(store, approval)
    leader_round(store)
    assert task_field(store, waiter, "s", 0) == "succeeded"
    assert task_field(store, approval, "s", 0) == "awaiting"  # its timeout is pending again
    assert "await" in leader_messages(store, approval)
    assert Recovery(store, "test-recovery").run(1).resubmitted == {}  # nothing lost now


@pytest.mark.parametrize("awaited", ["job", "child"])
def test_a_wait_marked_by_hand_is_left_alone_when_its_job_ends(wstore: Store, awaited: str) -> None:
    store = wstore
    if awaited == "job":
        other = submit(store, ONE_TASK)
        waiter, task = submit(store, waiter_job(job=other)), "gate"
    else:  # a task waiting for the child job it spawned
        waiter, task = submit(store, {"name": "parent", "tasks": [{"id": "p", "task": "t.p"}]}), "p"
        (t,) = store.claim(
            H1, ["default"], max_tasks=1, max_leader=0, shard=store.keys.job_shard(waiter)
        ).tasks
        marker = spawn({"name": "child", "tasks": [{"id": "c", "task": "t.c"}]}).packed()
        store.complete(H1, [(waiter, 0, t.token, marker)])
        (other,) = store.child_jobs(waiter)
    leader_round(store)  # registered with the job it waits for
    assert store.job_awaiters(other) == [waiter]
    assert task_field(store, waiter, "s", 0) == "awaiting"

    assert operate.mark(store, waiter, task, "succeeded", result="by hand", by="ann") == "awaiting"
    assert Recovery(store, "test-recovery").run().resubmitted == {}  # no wait left to redo
    for shard in range(store.settings.shards):  # both jobs run to their end
        for t in store.claim(H1, ["default"], max_tasks=100, max_leader=0, shard=shard).tasks:
            store.complete(H1, [(t.job_id, t.index, t.token, codec.pack("from the job"))])
    assert job_field(store, other, "state") == "succeeded"
    leader_round(store)  # the awaited job's end: its 'waiters' message

    assert store.result(waiter, task) == "by hand"
    assert job_field(store, waiter, "state") == "succeeded"
    assert store.job_awaiters(other) == []
    assert "waiters" not in leader_messages(store, other)
    assert [h["state"] for h in store.history(waiter) if h["task"] == task][-1] == "succeeded"
