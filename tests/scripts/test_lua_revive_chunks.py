"""`retry JOB` on any job `submit` accepts: revived in bounded calls, roots first, and a retry
that stops half way (or whose revived task fails again between calls) leaves a job that
ends, and that the next retry takes up."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from lua_helpers import (
    H1,
    LEADER,
    NO_RETRY,
    assert_finalized,
    claim,
    complete_one,
    job_field,
    queued_indexes,
    submit_and_split,
    task_states,
    untouched,
)

from jobcenter.errors import WrongState
from jobcenter.model.spec import MAX_TASKS
from jobcenter.runtime.leader import Leader
from jobcenter.storage import admin
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.store import Store

R = 0  # the root of every job here


def fan_out(n: int) -> dict[str, Any]:
    """A root and n - 1 children of it."""
    children = [{"id": f"c{k}", "task": "t.c", "depends_on": ["r"]} for k in range(1, n)]
    return {"name": f"fan-out-{n}", "tasks": [{"id": "r", "task": "t.r"}, *children]}


def fail_root(store: Store, job_id: str) -> None:
    (root,) = claim(store, H1, n=1)
    assert root.index == R
    assert store.fail(H1, job_id, R, root.token, "boom", NO_RETRY) == (0, "failed")


def state_counts(store: Store, job_id: str) -> Counter[str]:
    return Counter(store.task_field(job_id, TaskField.STATE).values())


def run_to_the_end(store: Store, job_id: str) -> None:
    """Play worker and leader until the job is finished: every task succeeds."""
    while job_field(store, job_id, "state") == "running":
        admin._finish_cascade(store, job_id)
        started = claim(store, H1, n=1_000)
        assert started or job_field(store, job_id, "state") != "running", "nothing to run"
        store.complete(H1, [(t.job_id, t.index, t.token) for t in started])


def test_retry_revives_every_task_of_the_largest_job_submit_accepts(store: Store) -> None:
    job_id, _ = submit_and_split(store, fan_out(MAX_TASKS))
    fail_root(store, job_id)  # its cascade is still under way: retry finishes it first

    assert admin.retry_job(store, job_id) == MAX_TASKS

    assert state_counts(store, job_id) == {"queued": 1, "waiting": MAX_TASKS - 1}
    assert job_field(store, job_id, "left") == str(MAX_TASKS)
    assert job_field(store, job_id, "nfailed") == "0"


def test_a_retry_stopped_after_its_roots_is_taken_up_by_the_next_retry(store: Store) -> None:
    spec = {"name": "stopped", "tasks": [
        {"id": "r", "task": "t.r"},
        {"id": "a", "task": "t.a", "depends_on": ["r"]},
        {"id": "b", "task": "t.b", "depends_on": ["r"]},
        {"id": "ab", "task": "t.ab", "depends_on": ["a", "b"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    fail_root(store, job_id)
    assert store.revive(job_id, [R], []) == 1  # the first call of a retry; then it died
    (root,) = claim(store, H1)
    assert complete_one(store, H1, job_id, R, root.token) == 0
    # nothing released the children (still upstream_failed): the job ends, failed
    assert task_states(store, job_id) == {
        "r": "succeeded", "a": "upstream_failed", "b": "upstream_failed", "ab": "upstream_failed",
    }  # fmt: skip
    assert_finalized(store, job_id, "failed")

    assert admin.retry_job(store, job_id) == 3

    # a and b have every parent succeeded: queued at once (waiting, none would release them)
    assert task_states(store, job_id) == {
        "r": "succeeded", "a": "queued", "b": "queued", "ab": "waiting",
    }  # fmt: skip
    assert sorted(queued_indexes(store, job_id)) == [1, 2]
    run_to_the_end(store, job_id)
    assert_finalized(store, job_id, "succeeded")


def test_a_task_whose_revived_parent_failed_again_stays_upstream_failed(store: Store) -> None:
    job_id, _ = submit_and_split(store, fan_out(3))
    fail_root(store, job_id)
    assert store.revive(job_id, [R], []) == 1  # a retry's first call ...
    fail_root(store, job_id)  # ... and the root fails again before its next call
    assert_finalized(store, job_id, "failed")

    with untouched(store):
        assert store.revive(job_id, [], [(1, [R]), (2, [R])]) == 0

    assert admin.retry_job(store, job_id) == 3  # the next retry revives them all


def test_a_retry_in_many_small_calls_runs_the_job_to_success(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "REVIVE_ARGS_MAX", 3)  # a call per task or two
    spec = {"name": "deep", "tasks": [
        {"id": "r", "task": "t.r"},
        {"id": "a", "task": "t.a", "depends_on": ["r"]},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
        {"id": "c", "task": "t.c", "depends_on": ["a", "b"]},
        {"id": "d", "task": "t.d", "depends_on": ["r"]},
        {"id": "e", "task": "t.e"},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    started = {t.index: t for t in claim(store, H1)}
    assert sorted(started) == [R, 5]
    assert complete_one(store, H1, job_id, 5, started[5].token) == 0
    assert store.fail(H1, job_id, R, started[R].token, "boom", NO_RETRY) == (0, "failed")
    assert_finalized(store, job_id, "failed")
    calls = []
    revive = store.revive
    monkeypatch.setattr(store, "revive", lambda *a: calls.append(a) or revive(*a))

    assert admin.retry_job(store, job_id) == 5

    assert len(calls) >= 4
    assert task_states(store, job_id) == {
        "r": "queued", "a": "waiting", "b": "waiting", "c": "waiting", "d": "waiting",
        "e": "succeeded",
    }  # fmt: skip
    run_to_the_end(store, job_id)
    assert_finalized(store, job_id, "succeeded")


def test_a_reset_left_for_after_the_job_ended_succeeded_is_refused_unchanged(
    store: Store,
) -> None:
    """A retry of several calls stopped after its roots, and the job ended succeeded: a
    compaction of a release that freed the arguments of the tasks that ran (today's keeps
    them) leaves a task that cannot run. A call to reset it is refused, naming it, and writes
    nothing."""
    spec = {"name": "cleanup", "tasks": [
        {"id": "r", "task": "t.r"},
        {"id": "cleanup", "task": "t.c", "depends_on": ["r"], "trigger_rule": "all_done"},
    ]}  # fmt: skip
    job_id, ids = submit_and_split(store, spec)
    fail_root(store, job_id)
    run_to_the_end(store, job_id)
    assert store.revive(job_id, [R], []) == 1  # the first call; then it stopped
    run_to_the_end(store, job_id)
    assert_finalized(store, job_id, "succeeded")
    Leader(store, LEADER).compact(job_id)
    store.restore(job_id)
    # what an older release's compaction left: no payload for the task that ran
    store.redis.hdel(store.keys.job(job_id).tasks, f"{TaskField.PAYLOAD}{ids['cleanup']}")

    with untouched(store), pytest.raises(WrongState, match="task cleanup cannot run"):
        store.revive(job_id, [], [(ids["cleanup"], [R])])
