"""Leases and fencing tokens (seed 004): heartbeats renew, expiry times out, then takes over."""

from __future__ import annotations

from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    H3,
    assert_finalized,
    claim,
    complete_one,
    decode,
    heartbeat_one,
    history_of,
    job_field,
    lease_deadline_ms,
    lease_expired,
    queued_indexes,
    redis_now_ms,
    submit_and_split,
    task_field,
    task_states,
    untouched,
)

from jobcenter.storage.keyspace import schema
from jobcenter.storage.store import Store

GRACE_MS = 200  # the second deadline: how long a timed_out attempt may still resume
WAIT_S = 5.0  # generous bound for a 0.2 s lease to pass on a loaded machine

PARENT_CHILD = {
    "name": "fenced",
    "tasks": [
        {"id": "a", "task": "t.a", "retries": 1},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ],
}
A, B = 0, 1
STALE, UNKNOWN = schema.code("ITEM_STALE_TOKEN"), schema.code("ITEM_UNKNOWN_ATTEMPT")


def _wait_expired(store: Store, job_id: str, index: int) -> None:
    wait_until(lambda: lease_expired(store, job_id, index), WAIT_S, message="lease never expired")


def test_a_heartbeat_renews_the_lease_of_its_attempt(short_store: Store) -> None:
    store = short_store
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    (a,) = claim(store, H1)
    first = lease_deadline_ms(store, job_id, A)
    assert first is not None
    wait_until(lambda: redis_now_ms(store) > first - store.settings.lease_ms / 2, WAIT_S)
    assert heartbeat_one(store, H1, job_id, A, a.token) == 0
    renewed = lease_deadline_ms(store, job_id, A)
    assert renewed is not None and renewed > first


def test_an_expired_attempt_times_out_resumes_then_is_taken_over_and_finally_fails(
    short_store: Store,
) -> None:
    store = short_store
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    (first,) = claim(store, H1)
    assert first.attempt == 1

    # lease expired: running -> timed_out, with a second deadline
    _wait_expired(store, job_id, A)
    assert store.expire([(job_id, A)], GRACE_MS) == {"timed_out": 1}
    assert task_states(store, job_id)["a"] == "timed_out"
    assert queued_indexes(store, job_id) == []

    # the same attempt heartbeats before the takeover: running again, lease renewed
    assert heartbeat_one(store, H1, job_id, A, first.token) == 0
    assert task_states(store, job_id)["a"] == "running"
    assert not lease_expired(store, job_id, A)

    # silent again, past both deadlines: a new attempt is queued
    _wait_expired(store, job_id, A)
    assert store.expire([(job_id, A)], GRACE_MS) == {"timed_out": 1}
    _wait_expired(store, job_id, A)
    assert store.expire([(job_id, A)], GRACE_MS) == {"retried": 1}
    assert task_states(store, job_id)["a"] == "queued"
    assert queued_indexes(store, job_id) == [A]
    assert lease_deadline_ms(store, job_id, A) is None
    (timed_out,) = history_of(store, job_id, "a")
    assert (timed_out["attempt"], timed_out["state"], timed_out["handler"]) == (1, "timed_out", H1)
    assert H1 in timed_out["error"]

    # attempt 2 runs under a new token; attempt 1's late reports change nothing
    (second,) = claim(store, H2)
    assert (second.index, second.attempt) == (A, 2)
    assert task_field(store, job_id, "h", A) == H2
    with untouched(store):
        assert complete_one(store, H1, job_id, A, first.token) == -2
        assert heartbeat_one(store, H1, job_id, A, first.token) == -2
        assert store.fail(H1, job_id, A, first.token, "late", -1) == (-2, None)

    # attempt 2 goes silent too, and no attempt is left: failed, and b upstream_failed
    _wait_expired(store, job_id, A)
    assert store.expire([(job_id, A)], GRACE_MS) == {"timed_out": 1}
    _wait_expired(store, job_id, A)
    assert job_field(store, job_id, "state") == "running"
    assert store.expire([(job_id, A)], GRACE_MS) == {"failed": 1}
    status = store.status(job_id)
    assert status["tasks"]["a"]["state"] == "failed"
    assert status["tasks"]["a"]["attempts"] == 2
    assert status["tasks"]["b"]["state"] == "upstream_failed"
    assert "a" in status["tasks"]["b"]["error"]
    assert lease_deadline_ms(store, job_id, A) is None
    assert_finalized(store, job_id, "failed")  # by the expire that failed a (b cascaded)
    with untouched(store):
        assert complete_one(store, H2, job_id, A, second.token) == -3


def test_a_late_completion_during_the_grace_period_still_counts(short_store: Store) -> None:
    """timed_out is not a verdict: the attempt may still finish until it is taken over."""
    store = short_store
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    (a,) = claim(store, H1)
    _wait_expired(store, job_id, A)
    assert store.expire([(job_id, A)], GRACE_MS) == {"timed_out": 1}
    assert complete_one(store, H1, job_id, A, a.token) == 0
    assert task_states(store, job_id) == {"a": "succeeded", "b": "queued"}
    assert lease_deadline_ms(store, job_id, A) is None


def test_a_reserved_but_never_started_task_is_requeued_without_using_an_attempt(
    short_store: Store,
) -> None:
    store = short_store
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    keys = store.keys
    leader, expired, reserved, _next_retry, _newer = decode(
        store.reserve(H1, ["default"], max_tasks=1)
    )

    assert (leader, expired) == ([], [])
    assert [int(m.split("|")[2]) for m in reserved] == [A]
    assert queued_indexes(store, job_id) == []
    assert store.redis.hget(keys.claims(0), f"{job_id}|{A}") == H1.encode()

    _wait_expired(store, job_id, A)
    # the next claim reports the expired reservation; any worker may then act on it
    report = store.claim(H2, ["default"], max_tasks=0, max_leader=0)
    assert report.expired == [(job_id, A)]
    assert store.expire(report.expired, GRACE_MS) == {"requeued": 1}
    assert queued_indexes(store, job_id) == [A]
    assert task_states(store, job_id)["a"] == "queued"
    assert task_field(store, job_id, "a", A) is None  # no attempt was used
    assert store.redis.hget(keys.claims(0), f"{job_id}|{A}") is None
    assert lease_deadline_ms(store, job_id, A) is None

    # the reserving worker wakes up too late: its start no longer finds its reservation
    with untouched(store):
        assert store.start(H1, {job_id: [A]}) == []

    (task,) = claim(store, H3)
    assert (task.index, task.attempt) == (A, 1)
    assert history_of(store, job_id, "a") == []


def _dump_namespace(store: Store) -> dict[bytes, bytes]:
    """Every key of the namespace, serialized as Redis keeps it (DUMP)."""
    pattern = f"jc:{store.settings.namespace}:*"
    return {key: store.redis.dump(key) for key in store.redis.scan_iter(match=pattern)}


def _roll_back(store: Store, dumped: dict[bytes, bytes]) -> None:
    """Redis forgets every write since `dumped`, as after a restart from an older snapshot:
    the keys written since go, the others get their old content back."""
    for key in store.redis.scan_iter(match=f"jc:{store.settings.namespace}:*"):
        if key not in dumped:
            store.redis.delete(key)
    for key, value in dumped.items():
        store.redis.restore(key, 0, value, replace=True)


def test_a_claim_redis_forgot_gives_the_next_claim_another_token_and_its_reports_are_unknown(
    store: Store,
) -> None:
    """Redis loses the writes of a claim (a rollback): the same worker claims the task again
    as the same attempt number, under another token; the first run's reports are refused as
    of an attempt Redis does not know, and change nothing."""
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    before = _dump_namespace(store)
    (first,) = claim(store, H1)
    _roll_back(store, before)
    (again,) = claim(store, H1)

    assert (again.index, again.attempt) == (first.index, first.attempt) == (A, 1)
    assert again.token != first.token
    with untouched(store):
        assert complete_one(store, H1, job_id, A, first.token) == UNKNOWN
        assert heartbeat_one(store, H1, job_id, A, first.token) == UNKNOWN
        assert store.fail(H1, job_id, A, first.token, "late", -1) == (UNKNOWN, None)
        assert store.release(H1, [(job_id, A, first.token)]) == 0
    assert complete_one(store, H1, job_id, A, again.token) == 0
    with untouched(store):  # the task ended: the first run's report is still not its
        assert complete_one(store, H1, job_id, A, first.token) == UNKNOWN


def test_a_late_report_of_an_attempt_given_back_is_stale_not_unknown(store: Store) -> None:
    """A give-back restores the attempt number, so the next attempt has the same number: its
    nonce tells Redis the earlier one was its own, given back, not lost."""
    job_id, _ = submit_and_split(store, PARENT_CHILD)
    (first,) = claim(store, H1)
    assert store.give_back(H1, [(job_id, A, first.token, "t.a")], 0, 0) == {(job_id, A): 0}
    with untouched(store):
        assert heartbeat_one(store, H1, job_id, A, first.token) == STALE
    (again,) = wait_until(lambda: claim(store, H2), WAIT_S, message="never came back")
    assert again.attempt == first.attempt
    assert store.give_back(H2, [(job_id, A, again.token, "t.a")], 0, 0) == {(job_id, A): 0}
    with untouched(store):  # attempt 1 again, given back by another worker: stale too
        assert complete_one(store, H1, job_id, A, first.token) == STALE
