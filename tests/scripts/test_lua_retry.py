"""Retries: backoff through the delayed set, attempts counted, a stopping worker's give-back."""

from __future__ import annotations

from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    assert_finalized,
    claim,
    history_of,
    job_field,
    queued_indexes,
    submit_and_split,
    task_field,
    task_states,
)

from jobcenter.storage.store import Store

BACKOFF_MS = 300  # short enough to wait out, long enough that an immediate claim misses it
RETRYING = {
    "name": "retrying",
    "tasks": [
        {"id": "a", "task": "t.a", "retries": 1},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ],
}
A = 0


def test_a_retry_waits_out_its_backoff_in_the_delayed_set(store: Store) -> None:
    job_id, _ = submit_and_split(store, RETRYING)
    (first,) = claim(store, H1)
    assert store.fail(H1, job_id, A, first.token, "flaky", BACKOFF_MS) == (0, "retry_wait")
    assert store.redis.zcard(store.keys.delayed(0, "default")) == 1
    assert claim(store, H2) == []  # not due yet

    second = wait_until(lambda: claim(store, H2), 5.0, message="the retry never came due")
    assert [(t.index, t.attempt) for t in second] == [(A, 2)]
    assert store.redis.zcard(store.keys.delayed(0, "default")) == 0
    assert task_field(store, job_id, "h", A) == H2
    (entry,) = history_of(store, job_id, "a")
    assert (entry["attempt"], entry["state"], entry["error"]) == (1, "retry_wait", "flaky")


def test_a_failure_asking_for_a_retry_with_no_attempt_left_fails_and_cascades(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, RETRYING)
    (first,) = claim(store, H1)
    assert store.fail(H1, job_id, A, first.token, "flaky", 0) == (0, "queued")
    (second,) = claim(store, H1)
    assert second.attempt == 2
    assert job_field(store, job_id, "state") == "running"
    assert store.fail(H1, job_id, A, second.token, "flaky again", 0) == (0, "failed")
    assert task_states(store, job_id) == {"a": "failed", "b": "upstream_failed"}
    assert queued_indexes(store, job_id) == []
    assert_finalized(store, job_id, "failed")


def test_a_stopping_worker_gives_its_attempt_back_without_using_up_a_retry(store: Store) -> None:
    spec = {"name": "give-back", "tasks": [{"id": "a", "task": "t.a", "retries": 1}]}
    job_id, _ = submit_and_split(store, spec)
    (first,) = claim(store, H1)
    assert store.release(H1, [(job_id, A, first.token)]) == 1
    assert queued_indexes(store, job_id) == [A]
    assert task_states(store, job_id)["a"] == "queued"
    assert [h["state"] for h in history_of(store, job_id, "a")] == ["queued"]
    (second,) = claim(store, H2)
    assert second.attempt == 2
    # the interrupted attempt did not count: attempt 2 still has its one retry
    assert store.fail(H2, job_id, A, second.token, "boom", 0) == (0, "queued")
    (third,) = claim(store, H2)
    assert store.fail(H2, job_id, A, third.token, "boom", 0) == (0, "failed")
