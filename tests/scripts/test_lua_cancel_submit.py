"""Cancel stops every unfinished task and finalizes the job; submit is idempotent."""

from __future__ import annotations

import pytest
from lua_helpers import (
    H1,
    H2,
    LEADER,
    assert_finalized,
    claim,
    claim_by_index,
    complete_one,
    decode,
    heartbeat_one,
    history_of,
    job_field,
    leader_messages,
    queued_indexes,
    submit,
    submit_and_split,
    task_states,
    untouched,
)

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.leader import Leader
from jobcenter.storage.jobs.attempts import HEARTBEAT_CANCELLED
from jobcenter.storage.keyspace.schema import code
from jobcenter.storage.store import Store

# Claimed in index order: a and d start running, e is reserved only, b stays queued.
MIXED = {
    "name": "to-cancel",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "d", "task": "t.d", "retries": 3},
        {"id": "e", "task": "t.e"},
        {"id": "b", "task": "t.b"},
        {"id": "c", "task": "t.c", "depends_on": ["a"]},
        {"id": "s", "task": "t.s", "queue": "slow"},
    ],
}
A, D, E, B, C, S = range(6)


def test_cancel_empties_queues_revokes_attempts_and_finalizes_cancelled(store: Store) -> None:
    job_id, _ = submit_and_split(store, MIXED)
    running = claim_by_index(store, H1, n=2)
    assert sorted(running) == [A, D]
    assert store.fail(H1, job_id, D, running[D].token, "flaky", 60_000) == (0, "retry_wait")
    keys = store.keys
    reserved = decode(store.reserve(H2, ["default"], max_tasks=1))
    assert [int(m.split("|")[2]) for m in reserved[2]] == [E]
    assert queued_indexes(store, job_id) == [B]
    assert queued_indexes(store, job_id, "slow") == [S]
    assert task_states(store, job_id) == {
        "a": "running",
        "d": "retry_wait",
        "e": "queued",
        "b": "queued",
        "c": "waiting",
        "s": "queued",
    }

    assert job_field(store, job_id, "state") == "running"
    assert store.cancel_step(job_id, from_client=True) == (0, 0)
    # the cancel ended the last unfinished task, so it finalized the job itself
    assert_finalized(store, job_id, "cancelled")

    assert set(task_states(store, job_id).values()) == {"cancelled"}
    assert queued_indexes(store, job_id) == []
    assert queued_indexes(store, job_id, "slow") == []
    assert store.redis.zcard(keys.delayed(0, "default")) == 0
    assert store.redis.zcard(keys.leases(0)) == 0
    assert store.redis.hlen(keys.claims(0)) == 0
    assert job_field(store, job_id, "left") == "0"
    assert job_field(store, job_id, "ncancelled") == "6"
    assert [h["state"] for h in history_of(store, job_id, "a")] == ["cancelled"]

    assert claim(store, H2) == []  # (a claim for nothing drops the wake-up tokens left)
    with untouched(store):  # the revoked attempts' reports are rejected
        assert complete_one(store, H1, job_id, A, running[A].token) == -3
        # ... and the heartbeat tells the attempt's worker to stop it
        assert heartbeat_one(store, H1, job_id, A, running[A].token) == HEARTBEAT_CANCELLED
        stopped = code("JOB_STOPPED")  # a late failure is told the job was cancelled
        assert store.fail(H1, job_id, A, running[A].token, "late", -1) == (stopped, None)
        assert store.start(H2, {job_id: [E]}) == []
        assert claim(store, H2) == []

    assert store.status(job_id)["state"] == "cancelled"
    assert store.redis.zscore(keys.active(0), job_id) is None
    assert leader_messages(store, job_id) == {"compact"}  # finished: a leader packs it
    with untouched(store):
        assert store.cancel_step(job_id, from_client=True) == (1, 0)


def test_a_cancelled_job_finishes_cancelled_even_after_some_tasks_succeeded(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, MIXED)
    a = claim_by_index(store, H1, n=1)[A]
    assert complete_one(store, H1, job_id, A, a.token) == 0
    assert store.cancel_step(job_id, from_client=True) == (0, 0)
    assert task_states(store, job_id)["a"] == "succeeded"
    assert_finalized(store, job_id, "cancelled")


def test_cancel_of_a_pending_job_finalizes_it_before_any_task_is_written(
    store: Store, leader_split: None
) -> None:
    job_id = submit(store, MIXED)
    assert job_field(store, job_id, "state") == "pending"
    assert leader_messages(store, job_id) == {"split"}
    assert store.cancel_step(job_id, from_client=True) == (0, 0)
    assert leader_messages(store, job_id) == {"compact"}  # the split is called off
    assert_finalized(store, job_id, "cancelled")
    assert job_field(store, job_id, "ncancelled") == str(len(MIXED["tasks"]))
    # a leader that picked up the split message before the cancel writes nothing
    with untouched(store):
        Leader(store, "late-leader").split(job_id)
    assert not store.redis.exists(store.keys.job(job_id).tasks)
    assert store.status(job_id)["state"] == "cancelled"


@pytest.mark.parametrize("split", ["inline", "leader"])
def test_submitting_the_same_idempotency_key_again_returns_the_first_job(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    if split == "leader":
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    spec = parse_spec(
        {
            "name": "nightly",
            "idempotency_key": "etl-2026-11-22",
            "owner": "alice",
            "tasks": [{"id": "x", "task": "t.x"}],
        }
    )
    job_id, created = store.submit(spec)
    assert created
    assert job_field(store, job_id, "state") == ("running" if split == "inline" else "pending")
    with untouched(store):
        assert store.submit(spec) == (job_id, False)
    Leader(store, LEADER).split(job_id)
    assert job_field(store, job_id, "state") == "running"
    with untouched(store):
        assert store.submit(spec) == (job_id, False)
    # still after the job ended: the key lives as long as the job
    (x,) = claim(store, H1)
    assert complete_one(store, H1, job_id, x.index, x.token) == 0
    assert_finalized(store, job_id, "succeeded")
    idem = store.keys.idempotency(store.keys.job_shard(job_id), "etl-2026-11-22")
    assert store.redis.pttl(idem) > 0
    with untouched(store):
        assert store.submit(spec) == (job_id, False)


def test_a_completion_between_cancel_chunks_never_requeues_a_cancelled_child(
    store: Store,
) -> None:
    """Cancel visits tasks in chunks; a parent not visited yet may still complete, and its
    children cancelled in an earlier chunk must stay cancelled."""
    fillers = [{"id": f"f{k}", "task": "t.f", "depends_on": ["p"]} for k in range(1_000)]
    spec = {
        "name": "cancel-chunks",
        "tasks": [
            {"id": "c", "task": "t.c", "depends_on": ["p"]},
            *fillers,
            {"id": "p", "task": "t.p"},
        ],
    }
    job_id, ids = submit_and_split(store, spec)
    (p,) = claim(store, H1)
    assert p.index == ids["p"]

    code, left = store.cancel_step(job_id, from_client=True)
    assert code == 0 and left > 0  # p's chunk is not visited yet
    assert "cancel" in leader_messages(store, job_id)
    assert complete_one(store, H1, job_id, p.index, p.token) == 0
    assert task_states(store, job_id)["c"] == "cancelled"
    assert "continue" in leader_messages(store, job_id)  # p's release is not over yet
    assert job_field(store, job_id, "state") == "running"  # f999 has not ended yet

    leader = Leader(store, LEADER)
    leader.cancel(job_id)  # visits f999, the last unfinished task: the job is finalized
    assert_finalized(store, job_id, "cancelled")
    leader.go_on(job_id)  # p's release of its 1,001 children takes several bounded steps
    states = task_states(store, job_id)
    assert states.pop("p") == "succeeded"
    assert set(states.values()) == {"cancelled"}
    assert queued_indexes(store, job_id) == []
    assert leader_messages(store, job_id) == {"compact"}  # posted once the releases ended
    assert_finalized(store, job_id, "cancelled")
