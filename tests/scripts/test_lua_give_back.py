"""give_back.lua: a worker without a task's code hands the attempt back unused; fencing holds."""

from __future__ import annotations

from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    NO_RETRY,
    NONCE,
    claim,
    complete_one,
    heartbeat_one,
    history_of,
    queued_indexes,
    redis_now_ms,
    submit_and_split,
    task_field,
    token_like,
    untouched,
)

from jobcenter.config import Settings
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.keyspace import schema
from jobcenter.storage.store import Store

DELAY_MIN_MS, DELAY_MAX_MS = 300, 2_000
UNKNOWN = schema.code("ITEM_UNKNOWN_ATTEMPT")
NAME = "t.a"
SPEC = {
    "name": "give-back",
    "tasks": [
        {"id": "a", "task": NAME, "retries": 1},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ],
}
A = 0


def give_back(store: Store, handler: str, job_id: str, token: str) -> int:
    codes = store.give_back(handler, [(job_id, A, token, NAME)], DELAY_MIN_MS, DELAY_MAX_MS)
    return codes[(job_id, A)]


def due_ms(store: Store) -> float | None:
    due = store.redis.zrange(store.keys.delayed(0, "default"), 0, -1, withscores=True)
    return due[0][1] if due else None


def test_a_given_back_attempt_is_unused_and_waits_in_the_delayed_set(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    before = redis_now_ms(store)

    assert give_back(store, H1, job_id, first.token) == 0

    status = store.status(job_id)["tasks"]["a"]
    assert (status["state"], status["attempts"], status["handler"]) == ("queued", 0, None)
    assert status["started_at"] is None
    waiting = status["waiting_for"]
    assert waiting["task"] == NAME and before <= waiting["since"] * 1000 <= redis_now_ms(store)
    assert store.redis.zscore(store.keys.leases(0), f"{job_id}|{A}") is None
    assert queued_indexes(store, job_id) == []  # not ready at once: no hot loop
    due = due_ms(store)
    assert due is not None and due >= before + DELAY_MIN_MS
    assert history_of(store, job_id, "a") == []  # no attempt ended
    assert claim(store, H2) == []


def test_the_task_comes_back_after_the_delay_with_its_retries_intact(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    assert give_back(store, H1, job_id, first.token) == 0

    (second,) = wait_until(lambda: claim(store, H2), 5.0, message="never came back")
    assert second.attempt == 1  # the given-back attempt did not count
    assert store.fail(H2, job_id, A, second.token, "boom", 0) == (0, "queued")
    assert task_field(store, job_id, "wf", A) is None  # it ran: no longer waiting
    (third,) = claim(store, H2)
    assert third.attempt == 2  # the retry the spec allows is still there
    assert store.fail(H2, job_id, A, third.token, "boom", NO_RETRY) == (0, "failed")


def test_the_old_token_is_stale_after_a_give_back(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    assert give_back(store, H1, job_id, first.token) == 0
    with untouched(store):
        assert give_back(store, H1, job_id, first.token) == -2
        assert heartbeat_one(store, H1, job_id, A, first.token) == -2
        assert complete_one(store, H1, job_id, A, first.token) == -2
        assert store.fail(H1, job_id, A, first.token, "late", NO_RETRY) == (-2, None)
        # the attempt number it went back to
        assert give_back(store, H1, job_id, token_like(first, attempt_shift=-1)) == -2


def test_a_give_back_with_a_stale_token_or_not_running_changes_nothing(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    with untouched(store):  # never claimed: Redis knows no attempt of it
        assert give_back(store, H1, job_id, f"1:{H1}:{NONCE}") == UNKNOWN
    (first,) = claim(store, H1)
    with untouched(store):
        assert give_back(store, H2, job_id, first.token) == -2  # another handler
        assert give_back(store, H1, job_id, token_like(first, attempt_shift=-1)) == -2
        # an attempt Redis never started
        later = token_like(first, attempt_shift=1, nonce="beef")
        assert give_back(store, H1, job_id, later) == UNKNOWN
    assert complete_one(store, H1, job_id, A, first.token) == 0
    with untouched(store):
        assert give_back(store, H1, job_id, first.token) == -3  # it ended


def test_waiting_since_is_kept_over_give_backs_and_the_delay_grows_with_it(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    assert give_back(store, H1, job_id, first.token) == 0
    since = int(str(task_field(store, job_id, "wf", A)).split("|")[0])
    # it has waited long since: move its first give-back into the past
    long_ago = since - 4 * DELAY_MAX_MS
    store.redis.hset(store.keys.job(job_id).tasks, f"wf:{A}", f"{long_ago}|{NAME}")
    store.redis.zadd(store.keys.delayed(0, "default"), {m: 0 for m in delayed_members(store)})
    (second,) = claim(store, H1)
    now = redis_now_ms(store)

    assert give_back(store, H1, job_id, second.token) == 0
    assert task_field(store, job_id, "wf", A) == f"{long_ago}|{NAME}"
    due = due_ms(store)
    assert due is not None and now + DELAY_MAX_MS <= due <= redis_now_ms(store) + DELAY_MAX_MS


def test_a_give_back_for_a_job_that_is_gone_is_rejected(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    store.redis.delete(store.keys.job(job_id).job)
    assert give_back(store, H1, job_id, first.token) == -4


def delayed_members(store: Store) -> list[bytes]:
    return list(store.redis.zrange(store.keys.delayed(0, "default"), 0, -1))


LIMIT_SECONDS = 0.2  # how long a given-back task may wait for a worker with its code


def test_recovery_fails_a_given_back_task_only_once_no_live_worker_has_its_name(
    redis_url: str, namespace: str
) -> None:
    settings = Settings(
        redis_url=redis_url, namespace=namespace, unknown_task_timeout_seconds=LIMIT_SECONDS
    )
    store = Store.from_settings(settings)
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    assert give_back(store, H1, job_id, first.token) == 0
    since = int(str(task_field(store, job_id, "wf", A)).split("|")[0])
    wait_until(lambda: redis_now_ms(store) > since + LIMIT_SECONDS * 1000, 5.0)

    # a live worker serving the queue has the name (it is busy): the task waits on
    keep_ms = int(LIMIT_SECONDS * 1000)
    store.publish_served(["default"], [NAME], keep_ms)
    assert Recovery(store, "test-recovery").run().no_worker == 0
    assert store.status(job_id)["tasks"]["a"]["state"] == "queued"

    # only a worker serving another queue has it: no live worker can run it
    store.redis.delete(store.keys.served_tasks())
    store.publish_served(["elsewhere"], [NAME], keep_ms)
    assert Recovery(store, "test-recovery").run().no_worker == 1
    tasks = store.status(job_id)["tasks"]
    assert tasks["a"]["state"] == "failed" and tasks["a"]["waiting_for"] is None
    assert tasks["a"]["error"].startswith(f"no live worker has task '{NAME}' registered")
    assert tasks["b"]["state"] == "upstream_failed"
    store.redis.close()


def test_a_task_a_live_worker_serves_waits_the_shortest_delay_however_long_it_waited(
    store: Store,
) -> None:
    """The delay grows with the wait only while nobody has the code: with a live worker
    serving the name on the task's queue, a worker that lacks it and keeps winning the
    claim race gives it back for the shortest delay each time (rolling deploys)."""
    job_id, _ = submit_and_split(store, SPEC)
    (first,) = claim(store, H1)
    long_ago = redis_now_ms(store) - 100 * DELAY_MAX_MS
    store.redis.hset(store.keys.job(job_id).tasks, f"wf:{A}", f"{long_ago}|{NAME}")

    def handed_back(served: list[str]) -> float:
        before = redis_now_ms(store)
        codes = store.give_back(H1, [(job_id, A, first.token, NAME)], DELAY_MIN_MS,
                                DELAY_MAX_MS, served)  # fmt: skip
        assert codes == {(job_id, A): 0}
        due = due_ms(store)
        assert due is not None
        return due - before

    assert handed_back(["other|t.a", "default|t.b"]) >= DELAY_MAX_MS  # not its queue or name
    delayed = store.keys.delayed(0, "default")
    ((member, _),) = store.redis.zrange(delayed, 0, -1, withscores=True)
    store.redis.zadd(delayed, {member: 0})  # due now: the same worker takes it again
    (first,) = claim(store, H1)
    assert DELAY_MIN_MS <= handed_back(["default|t.a"]) < DELAY_MAX_MS
