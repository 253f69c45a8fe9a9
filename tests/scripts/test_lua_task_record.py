"""What `status` shows of a task: the current attempt only (a retry's running attempt does not
show the last one's error or finish time; history keeps them), and seed 000's three times
(created when the split wrote it, last modified, completed) beside its handler."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    NO_RETRY,
    claim,
    complete_one,
    heartbeat_one,
    history_of,
    lease_expired,
    submit_and_split,
)

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.storage import admin
from jobcenter.storage.store import Store

RETRYING = {"name": "retrying", "tasks": [{"id": "a", "task": "t.a", "retries": 2}]}
A = 0
GRACE_MS = 200  # the second deadline of a timed_out attempt
BACKOFF_MS = 300  # long enough that status sees retry_wait, short enough to wait out


def task(store: Store, job_id: str, task_id: str = "a") -> dict[str, Any]:
    return dict(store.status(job_id)["tasks"][task_id])


def assert_fresh_attempt(view: dict[str, Any], attempt: int, handler: str) -> None:
    assert (view["state"], view["attempts"], view["handler"]) == ("running", attempt, handler)
    assert view["error"] is None, "the last attempt's error is shown as current"
    assert view["finished_at"] is None, "the last attempt's finish time is shown as current"
    assert view["completed_at"] is None
    assert view["progress"] is None


def test_a_retry_running_after_a_failure_shows_its_own_attempt_not_the_last_ones(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, RETRYING)
    (first,) = claim(store, H1)
    store.heartbeat(H1, [(job_id, A, first.token, "half way")])
    assert store.fail(H1, job_id, A, first.token, "ValueError: flaky", 0) == (0, "queued")
    queued = task(store, job_id)
    assert queued["error"] == "ValueError: flaky"  # why it is queued again

    (second,) = claim(store, H2)

    assert_fresh_attempt(task(store, job_id), second.attempt, H2)
    (entry,) = history_of(store, job_id, "a")
    assert (entry["attempt"], entry["error"]) == (1, "ValueError: flaky")
    assert entry["finished_at"] is not None


def test_a_retry_running_after_a_timeout_shows_its_own_attempt(short_store: Store) -> None:
    store = short_store
    job_id, _ = submit_and_split(store, RETRYING)
    (first,) = claim(store, H1)
    wait_until(lambda: lease_expired(store, job_id, A), 5.0)
    assert store.expire([(job_id, A)], GRACE_MS) == {"timed_out": 1}
    wait_until(lambda: lease_expired(store, job_id, A), 5.0)
    assert store.expire([(job_id, A)], GRACE_MS) == {"retried": 1}
    assert "timed out" in (task(store, job_id)["error"] or "")

    (second,) = claim(store, H2)

    assert_fresh_attempt(task(store, job_id), second.attempt, H2)
    assert [h["state"] for h in history_of(store, job_id, "a")] == ["timed_out"]


def test_a_revived_task_running_again_shows_its_own_attempt(store: Store) -> None:
    spec = {"name": "revived", "tasks": [{"id": "a", "task": "t.a"}]}
    job_id, _ = submit_and_split(store, spec)
    (first,) = claim(store, H1)
    assert store.fail(H1, job_id, A, first.token, "boom", NO_RETRY) == (0, "failed")
    assert admin.retry_job(store, job_id) == 1

    (second,) = claim(store, H2)

    assert_fresh_attempt(task(store, job_id), second.attempt, H2)


def test_a_child_taken_at_once_by_the_completing_worker_shows_a_fresh_attempt(
    store: Store,
) -> None:
    spec = {"name": "taken", "tasks": [
        {"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    (a,) = claim(store, H1)
    _, taken = store.complete(H1, [(job_id, A, a.token)], take_queues=["default"], take_max=1)
    assert [t.index for t in taken] == [1]
    assert_fresh_attempt(task(store, job_id, "b"), 1, H1)


TIMES = ("created_at", "queued_at", "started_at", "finished_at", "updated_at", "completed_at")


@pytest.mark.parametrize("split", ["inline", "leader"])
def test_every_task_records_when_it_was_created_last_modified_and_completed(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    if split == "leader":
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    spec = {"name": "times", "tasks": [
        {"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    job_created = store.status(job_id)["created_at"]

    a, b = task(store, job_id, "a"), task(store, job_id, "b")
    assert set(TIMES) <= set(a)
    assert a["created_at"] >= job_created and b["created_at"] >= job_created
    assert b["state"] == "waiting" and b["updated_at"] == b["created_at"]
    assert a["updated_at"] == a["queued_at"] >= a["created_at"]
    assert a["completed_at"] is None and b["completed_at"] is None

    (first,) = claim(store, H1)
    running = task(store, job_id, "a")
    assert running["handler"] == H1
    assert running["updated_at"] == running["started_at"] >= running["queued_at"]
    assert running["completed_at"] is None
    assert heartbeat_one(store, H1, job_id, A, first.token) == 0
    assert task(store, job_id, "a")["updated_at"] == running["updated_at"]  # a lease renewal
    store.heartbeat(H1, [(job_id, A, first.token, "half way")])
    progressed = task(store, job_id, "a")
    assert progressed["updated_at"] >= running["updated_at"]
    store.heartbeat(H1, [(job_id, A, first.token, "half way")])  # no news
    assert task(store, job_id, "a")["updated_at"] == progressed["updated_at"]

    assert complete_one(store, H1, job_id, A, first.token) == 0
    done = task(store, job_id, "a")
    assert done["completed_at"] == done["finished_at"] == done["updated_at"]
    assert done["completed_at"] >= progressed["updated_at"]
    assert done["created_at"] == a["created_at"]  # the split's time stays
    released = task(store, job_id, "b")
    assert released["state"] == "queued"
    assert released["updated_at"] == released["queued_at"] >= done["completed_at"]


def test_a_task_failed_for_good_is_completed_and_one_waiting_for_a_retry_is_not(
    store: Store,
) -> None:
    spec = {"name": "failing", "tasks": [
        {"id": "a", "task": "t.a", "retries": 1}, {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    (first,) = claim(store, H1)
    assert store.fail(H1, job_id, A, first.token, "flaky", BACKOFF_MS) == (0, "retry_wait")
    waiting = task(store, job_id, "a")
    assert waiting["finished_at"] is not None and waiting["completed_at"] is None

    (second,) = wait_until(lambda: claim(store, H1), 5.0, message="the retry never came due")
    assert store.fail(H1, job_id, A, second.token, "broken", NO_RETRY) == (0, "failed")

    failed, blocked = task(store, job_id, "a"), task(store, job_id, "b")
    assert failed["completed_at"] == failed["finished_at"] == failed["updated_at"]
    assert blocked["state"] == "upstream_failed"
    assert blocked["completed_at"] == blocked["updated_at"] >= failed["completed_at"]
