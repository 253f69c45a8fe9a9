"""Every rejected transition leaves Redis exactly as it was (scripts check before writing)."""

from __future__ import annotations

from typing import Any

import pytest
from lua_helpers import (
    H1,
    H2,
    LEADER,
    NO_RETRY,
    NONCE,
    assert_finalized,
    claim,
    claim_by_index,
    complete_one,
    decode,
    heartbeat_one,
    job_context,
    job_field,
    own_argv,
    run_job_script,
    submit,
    submit_and_split,
    submit_call,
    task_field,
    token_like,
    untouched,
)

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.errors import UnknownJob
from jobcenter.storage.keyspace import schema
from jobcenter.storage.store import NO_RESULT, StartedTask, Store

STALE, UNKNOWN = schema.code("ITEM_STALE_TOKEN"), schema.code("ITEM_UNKNOWN_ATTEMPT")

BUSY = {
    "name": "busy",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
        {"id": "e", "task": "t.e", "retries": 2},
        {"id": "f", "task": "t.f", "queue": "other"},
    ],
}
A, B, E, F = 0, 1, 2, 3


@pytest.fixture
def busy(store: Store) -> tuple[str, dict[int, StartedTask]]:
    """A running job on two queues: a and e running (H1), b waiting, f queued on 'other'."""
    job_id, _ = submit_and_split(store, BUSY)
    started = claim_by_index(store, H1)
    assert sorted(started) == [A, E]
    return job_id, started


# Tokens that are not the running attempt's: (reporting handler, how the token differs,
# the refusal). An attempt Redis never started (a later number, or the same number under
# another claim's nonce) is unknown: Redis lost writes; any other is stale.
STALE_TOKENS = [
    pytest.param(H1, {"attempt_shift": 1, "nonce": "beef"}, UNKNOWN, id="next-attempt"),
    pytest.param(H1, {"attempt_shift": -1}, STALE, id="previous-attempt"),
    pytest.param(H1, {"nonce": "beef"}, UNKNOWN, id="another-claims-nonce"),
    pytest.param(H2, {}, STALE, id="other-handler"),
    pytest.param(H2, {"handler": H2}, STALE, id="other-handler-in-token"),
]


@pytest.mark.parametrize(("handler", "differs", "refusal"), STALE_TOKENS)
def test_complete_with_a_stale_token_is_rejected_and_changes_nothing(
    store: Store,
    busy: tuple[str, dict[int, StartedTask]],
    handler: str,
    differs: dict[str, Any],
    refusal: int,
) -> None:
    job_id, started = busy
    token = token_like(started[A], **differs)
    with untouched(store):
        assert complete_one(store, handler, job_id, A, token) == refusal


@pytest.mark.parametrize(("handler", "differs", "refusal"), STALE_TOKENS)
def test_fail_with_a_stale_token_is_rejected_and_changes_nothing(
    store: Store,
    busy: tuple[str, dict[int, StartedTask]],
    handler: str,
    differs: dict[str, Any],
    refusal: int,
) -> None:
    job_id, started = busy
    token = token_like(started[A], **differs)
    with untouched(store):
        assert store.fail(handler, job_id, A, token, "boom", NO_RETRY) == (refusal, None)
        assert store.fail(handler, job_id, A, token, "boom", 0) == (refusal, None)


@pytest.mark.parametrize(("handler", "differs", "refusal"), STALE_TOKENS)
def test_heartbeat_with_a_stale_token_is_rejected_and_changes_nothing(
    store: Store,
    busy: tuple[str, dict[int, StartedTask]],
    handler: str,
    differs: dict[str, Any],
    refusal: int,
) -> None:
    job_id, started = busy
    token = token_like(started[A], **differs)
    with untouched(store):
        assert heartbeat_one(store, handler, job_id, A, token) == refusal


@pytest.mark.parametrize(("handler", "differs", "refusal"), STALE_TOKENS)
def test_release_with_a_stale_token_gives_nothing_back(
    store: Store,
    busy: tuple[str, dict[int, StartedTask]],
    handler: str,
    differs: dict[str, Any],
    refusal: int,
) -> None:
    job_id, started = busy
    token = token_like(started[A], **differs)
    with untouched(store):
        assert store.release(handler, [(job_id, A, token)]) == 0


def test_transitions_of_a_task_in_retry_wait_are_rejected_as_not_running(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    job_id, started = busy
    token = started[E].token
    assert store.fail(H1, job_id, E, token, "flaky", 60_000) == (0, "retry_wait")
    with untouched(store):
        assert complete_one(store, H1, job_id, E, token) == -3
        assert heartbeat_one(store, H1, job_id, E, token) == -3
        assert store.release(H1, [(job_id, E, token)]) == 0


def test_a_never_started_task_cannot_be_completed_or_heartbeated(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    job_id, _ = busy
    token = f"1:{H1}:{NONCE}"
    with untouched(store):
        # b is waiting: no attempt exists, so no token can match it, and Redis knows none
        assert complete_one(store, H1, job_id, B, f"0:{H1}:{NONCE}") == STALE
        assert complete_one(store, H1, job_id, B, token) == UNKNOWN
        assert heartbeat_one(store, H1, job_id, B, token) == UNKNOWN
        assert store.fail(H1, job_id, B, token, "x", NO_RETRY) == (UNKNOWN, None)


# ARGV after the job context, for a call on task 0 attempt 1 (or the job as a whole); for
# complete, the task's items (own_argv adds the rest: H1's call).
UNKNOWN_JOB_CALLS: dict[str, list[Any]] = {
    "start": [H1, NONCE, 0],
    "complete": [0, f"1:{H1}:{NONCE}", NO_RESULT, ""],
    "fail": [H1, 0, f"1:{H1}:{NONCE}", "boom", NO_RETRY],
    "heartbeat": [H1, 30_000, 0, f"1:{H1}:{NONCE}", ""],
    "expire": [1_000, 0],
    "publish_tasks": [LEADER, 30_000, 0, 1, "s:0", "waiting"],
    "queue_roots": [LEADER, 30_000, 0, 1, 1, 0],
    "continue": [],
    "finalize": [],
    "cancel": ["cancel", ""],
    "release": [H1, 0, 1],
    "repair": ["requeue", "", 0],
    "resubmit": ["split"],
    "revive": [1, 0],
}


@pytest.mark.parametrize("name", sorted(UNKNOWN_JOB_CALLS))
def test_scripts_on_an_unknown_job_return_minus_4_and_change_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]], name: str
) -> None:
    ghost = store.keys.new_job_id()
    with untouched(store):
        args = own_argv(name, ghost, UNKNOWN_JOB_CALLS[name])
        reply = run_job_script(store, name, ghost, args, queues=["default"])
        assert reply == [-4]


def test_delete_of_an_unknown_job_returns_minus_4_and_changes_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    ghost = store.keys.new_job_id()
    extra = [store.keys.jobs(0), store.keys.job(ghost).job]
    with untouched(store):
        assert run_job_script(store, "delete", ghost, [0], extra_keys=extra) == [-4]


def test_store_calls_on_an_unknown_job_report_it_and_change_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    ghost = store.keys.new_job_id()
    with untouched(store):
        assert complete_one(store, H1, ghost, 0, 1) == -4
        assert store.fail(H1, ghost, 0, 1, "boom", NO_RETRY) == (-4, None)
        assert heartbeat_one(store, H1, ghost, 0, 1) == -4
        assert store.start(H1, {ghost: [0]}) == []
        assert store.finalize(ghost) == (-4, None)
        with pytest.raises(UnknownJob):
            store.cancel_step(ghost, from_client=True)


# ARGV after the job context for the scripts that may write to a queue (task a, attempt 1);
# for complete, the task's items (own_argv adds the rest: H1's call).
QUEUE_SCRIPT_CALLS: dict[str, list[Any]] = {
    "complete": [A, 1, NO_RESULT, ""],
    "fail": [H1, A, 1, "boom", NO_RETRY],
    "expire": [1_000, A],
    "queue_roots": [LEADER, 30_000, 0, 1, 1, A],
    "continue": [],
    "cancel": ["cancel", ""],
    "release": [H1, A, 1],
    "finalize": [],
    "repair": ["requeue", "", A],
    "revive": [1, A],
}


@pytest.mark.parametrize("passed", [[], ["default"], ["other"]], ids=["none", "one", "other"])
@pytest.mark.parametrize("name", sorted(QUEUE_SCRIPT_CALLS))
def test_scripts_without_all_their_queue_keys_return_minus_5_and_change_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]], name: str, passed: list[str]
) -> None:
    job_id, _ = busy
    with untouched(store):
        args = own_argv(name, job_id, QUEUE_SCRIPT_CALLS[name])
        reply = run_job_script(store, name, job_id, args, queues=passed)
        assert reply == [-5]


IDEM_BUSY = {**BUSY, "name": "busy-idem", "idempotency_key": "busy-2026-11-22"}


@pytest.mark.parametrize("name", sorted(QUEUE_SCRIPT_CALLS))
def test_scripts_without_the_jobs_idempotency_key_return_minus_5_and_change_nothing(
    store: Store, name: str
) -> None:
    """A script that may finalize the job must be given its idempotency key (to put it on
    retention): passing the job hash in its place is rejected before any write."""
    job_id, _ = submit_and_split(store, IDEM_BUSY)
    assert sorted(claim_by_index(store, H1)) == [A, E]
    with untouched(store):
        args = own_argv(name, job_id, QUEUE_SCRIPT_CALLS[name])
        reply = run_job_script(store, name, job_id, args, without_idem=True)
        assert reply == [-5]


def test_finalize_and_delete_of_a_finished_job_without_its_idempotency_key_change_nothing(
    store: Store,
) -> None:
    spec = {"name": "one", "idempotency_key": "one-key", "tasks": [{"id": "x", "task": "t.x"}]}
    job_id, _ = submit_and_split(store, spec)
    (task,) = claim(store, H1)
    assert complete_one(store, H1, job_id, task.index, task.token) == 0
    assert_finalized(store, job_id, "succeeded")
    idem = store.keys.idempotency(0, "one-key")
    assert store.redis.pttl(idem) > 0  # on the job's retention
    job_key = store.keys.job(job_id).job
    extra = [store.keys.jobs(0), job_key, job_key]  # no owner, no schedule
    with untouched(store):
        reply = run_job_script(store, "delete", job_id, [], without_idem=True, extra_keys=extra)
        assert reply == [-5]
        reply = run_job_script(store, "finalize", job_id, [], without_idem=True)
        assert reply == [1, "succeeded"]  # finished already: nothing to put on retention
    store.delete(job_id, [])
    assert not store.redis.exists(store.keys.job(job_id).job, idem)
    assert store.redis.zscore(store.keys.jobs(0), job_id) is None
    assert store.redis.zscore(store.keys.expiring(0), f"{job_id}\t\t") is None
    assert store.redis.zscore(store.keys.state_jobs(0, "succeeded"), job_id) is None


def test_publish_tasks_with_a_moved_cursor_returns_minus_6_and_changes_nothing(
    store: Store, leader_split: None
) -> None:
    job_id = submit(store, BUSY)
    assert job_field(store, job_id, "state") == "pending"
    chunk = ["id:0", "a", "s:0", "waiting"]
    assert store.publish_tasks(job_id, LEADER, 0, 1, chunk) == 0
    with untouched(store):
        # a leader that lost the race re-sends the chunk another one wrote already
        assert store.publish_tasks(job_id, LEADER, 0, 1, chunk) == -6
        # and one that thinks more is written than is
        assert store.publish_tasks(job_id, LEADER, 2, 3, ["id:2", "e", "s:2", "waiting"]) == -6
        # roots cannot be queued before every task is written
        assert store.queue_roots(job_id, LEADER, 0, 1, True, [0]) == -3


@pytest.mark.parametrize("split", ["inline", "leader"])
def test_queue_roots_with_a_moved_cursor_returns_minus_6_and_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    """Whoever split the job (its submit, or a leader) left the cursors at the end."""
    if split == "leader":
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    job_id, _ = submit_and_split(store, BUSY)
    assert task_field(store, job_id, "s", A) == "queued"
    with untouched(store):
        assert store.queue_roots(job_id, LEADER, 0, 1, False, [A]) == -6
        assert store.queue_roots(job_id, LEADER, 5, 6, True, [A]) == -6
        # and the split is over: nothing can be written any more
        assert store.publish_tasks(job_id, LEADER, 4, 5, ["s:0", "waiting"]) == -3


def test_finalize_while_tasks_are_unfinished_changes_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    job_id, _ = busy
    with untouched(store):
        assert store.finalize(job_id) == (2, None)


def test_cancel_of_a_finished_job_changes_nothing(store: Store) -> None:
    job_id, _ = submit_and_split(store, {"name": "one", "tasks": [{"id": "x", "task": "t.x"}]})
    (task,) = claim(store, H1)
    assert job_field(store, job_id, "state") == "running"
    assert complete_one(store, H1, job_id, task.index, task.token) == 0
    assert_finalized(store, job_id, "succeeded")
    with untouched(store):
        assert store.cancel_step(job_id, from_client=True) == (1, 0)
        assert store.finalize(job_id) == (1, "succeeded")


# submit.lua's own ARGV after the job context, for one job: its job-hash pairs, then its
# task-hash pairs (none: a leader splits the job; some: split at once), then its ready
# tasks' indexes, then its number of tags (none).
RESUBMIT_ARGS = {
    "leader-split": [4, "name", "again", "queues", "default,other", 0, 0, 0],
    "inline": [4, "name", "again", "queues", "default,other", 2, "s:0", "waiting", 1, 0, 0],
}


@pytest.mark.parametrize("split", sorted(RESUBMIT_ARGS))
def test_submit_over_an_existing_job_id_returns_minus_3_and_changes_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]], split: str
) -> None:
    job_id, _ = busy
    keys = store.keys
    script_keys, argv = job_context(store, job_id)
    jk = keys.job(job_id)
    script_keys += [keys.seq(0), keys.jobs(0), jk.job, jk.tasks, jk.history, jk.frontier]
    script_keys += [jk.job] * 3  # no idempotency key, owner or schedule
    with untouched(store):
        reply = store.scripts.run("submit", script_keys, [*argv, 1, job_id, *RESUBMIT_ARGS[split]])
        assert decode(reply) == [-3, job_id]


@pytest.mark.parametrize("passed", [[], ["default"], ["other"]], ids=["none", "one", "other"])
def test_a_small_submit_without_all_its_queue_keys_returns_minus_5_and_changes_nothing(
    store: Store, passed: list[str]
) -> None:
    """submit.lua splits a small job at once: it checks the job's queues before any write."""
    job_id, own_keys, own_args = submit_call(store, BUSY)
    keys, argv = job_context(store, job_id, queues=passed)
    with untouched(store):
        assert decode(store.scripts.run("submit", keys + own_keys, argv + own_args)) == [-5, job_id]
    keys, argv = job_context(store, job_id)
    assert decode(store.scripts.run("submit", keys + own_keys, argv + own_args)) == [0, job_id]
    assert job_field(store, job_id, "state") == "running"


@pytest.mark.parametrize("split", ["inline", "leader"])
def test_a_submit_without_its_idempotency_key_returns_minus_5_and_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    if split == "leader":
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    job_id, own_keys, own_args = submit_call(store, IDEM_BUSY)
    keys, argv = job_context(store, job_id, without_idem=True)
    job_key, idem_at = store.keys.job(job_id).job, 2 + 4  # after seq and jobs: the job's 5th
    assert own_keys[idem_at] == store.keys.idempotency(0, IDEM_BUSY["idempotency_key"])
    own_keys[idem_at] = job_key  # its idempotency key not passed: the job hash instead
    with untouched(store):
        assert decode(store.scripts.run("submit", keys + own_keys, argv + own_args)) == [-5, job_id]


def test_start_skips_a_task_another_handler_reserved_and_changes_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    job_id, _ = busy
    reserved = store.reserve(H2, ["other"], max_tasks=1)
    (member,) = decode(reserved[2])
    assert member.split("|")[1:] == [job_id, f"{F:06d}"]
    with untouched(store):
        assert store.start(H1, {job_id: [F]}) == []
    (started,) = store.start(H2, {job_id: [F]})
    assert (started.index, started.attempt) == (F, 1)


def test_expire_of_a_lease_that_is_not_due_changes_nothing(
    store: Store, busy: tuple[str, dict[int, StartedTask]]
) -> None:
    """Two workers may report the same lease, and a heartbeat may land in between."""
    job_id, _ = busy
    with untouched(store):
        assert store.expire([(job_id, A), (job_id, E)], grace_ms=1_000) == {"live": 2}
