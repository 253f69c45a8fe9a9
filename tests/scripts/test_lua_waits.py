"""Tasks that wait for the world (`wait_for: {signal: NAME}`) through the Lua transitions, on
a real Redis: a wait holds no queue entry, lease or slot; a signal's payload becomes its
result and releases its children; a signal before the wait is kept; a second one is a no-op
with the same payload and refused with another; a timeout fails the wait; a wait marked by
hand ends so, and a later signal or timeout changes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lua_helpers import (
    H1,
    LEADER,
    claim,
    complete_one,
    history_of,
    job_field,
    leader_messages,
    submit_and_split,
    task_field,
    untouched,
)

from jobcenter.errors import SpecError, WrongState
from jobcenter.model import codec
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.leader import Leader
from jobcenter.storage import operate
from jobcenter.storage.jobs.attempts import unpack_input
from jobcenter.storage.store import StartedTask, Store


def approval_job(**wait: Any) -> dict[str, Any]:
    """prepare -> approve (waits for signal 'approve') -> ship, which gets the payload."""
    return {
        "name": "approval",
        "tasks": [
            {"id": "prepare", "task": "t.prepare"},
            {"id": "approve", "wait_for": {"signal": "approve", **wait}, "depends_on": "prepare"},
            {"id": "ship", "task": "t.ship", "depends_on": "approve", "inputs": {"ok": "approve"}},
        ],
    }


def held_anything(store: Store, job_id: str) -> bool:
    """Whether a task of the job is in a queue, leased or holding slots."""
    r, shard = store.redis, store.keys.job_shard(job_id)
    queue = r.zrange(store.keys.queue(shard, "default"), 0, -1)
    leases = r.zrange(store.keys.leases(shard), 0, -1)
    return any(job_id.encode() in m for m in [*queue, *leases])


def inputs_of(task: StartedTask) -> dict[str, Any]:
    return {name: unpack_input(value) for name, value in task.inputs}


def run_prepare(store: Store) -> str:
    job_id, _ = submit_and_split(store, approval_job())
    (prepare,) = claim(store, H1)
    assert complete_one(store, H1, job_id, prepare.index, prepare.token) == 0
    return job_id


def test_a_wait_holds_nothing_until_signalled_and_its_payload_is_the_result(store: Store) -> None:
    job_id = run_prepare(store)
    assert task_field(store, job_id, "s", 1) == "awaiting"
    assert not held_anything(store, job_id)
    assert claim(store, H1) == []  # nothing to run: the wait is in no queue

    assert store.signal(job_id, "approve", {"by": "ann"}) == (1, 0)
    assert task_field(store, job_id, "s", 1) == "succeeded"
    assert codec.unpack(store.redis.hget(store.keys.job(job_id).tasks, "r:1")) == {"by": "ann"}
    (ship,) = claim(store, H1)
    assert inputs_of(ship) == {"ok": {"by": "ann"}}
    assert complete_one(store, H1, job_id, ship.index, ship.token) == 0
    assert job_field(store, job_id, "state") == "succeeded"


def test_a_signal_sent_twice_is_one_signal(store: Store) -> None:
    job_id = run_prepare(store)
    assert store.signal(job_id, "approve", "yes") == (1, 0)
    with untouched(store):
        assert store.signal(job_id, "approve", "yes") == (0, 0)  # the same: a no-op
    with untouched(store), pytest.raises(WrongState, match="already got signal approve"):
        store.signal(job_id, "approve", "no")


def test_a_signal_before_the_wait_is_kept_until_the_task_gets_there(store: Store) -> None:
    job_id, _ = submit_and_split(store, approval_job())
    assert store.signal(job_id, "approve", "early") == (0, 1)
    assert task_field(store, job_id, "s", 1) == "waiting"
    assert store.signal(job_id, "approve", "early") == (0, 0)
    with pytest.raises(WrongState, match="another payload"):
        store.signal(job_id, "approve", "late")
    (prepare,) = claim(store, H1)
    assert complete_one(store, H1, job_id, prepare.index, prepare.token) == 0
    assert task_field(store, job_id, "s", 1) == "succeeded"  # took the kept signal at once
    (ship,) = claim(store, H1)
    assert inputs_of(ship) == {"ok": "early"}


def test_a_signal_nothing_waits_for_is_refused_and_changes_nothing(store: Store) -> None:
    job_id = run_prepare(store)
    with untouched(store), pytest.raises(WrongState, match="no task waiting for signal nope"):
        store.signal(job_id, "nope")
    store.cancel_step(job_id, from_client=True)
    assert task_field(store, job_id, "s", 1) == "cancelled"
    assert job_field(store, job_id, "state") == "cancelled"
    with untouched(store), pytest.raises(WrongState, match="has finished"):
        store.signal(job_id, "approve")


def test_a_wait_fails_at_its_timeout_with_the_cascade(store: Store) -> None:
    job_id, _ = submit_and_split(store, approval_job(timeout=0.2))
    (prepare,) = claim(store, H1)
    complete_one(store, H1, job_id, prepare.index, prepare.token)
    assert "await" in leader_messages(store, job_id)
    Leader(store, LEADER).await_due(job_id)  # early: nothing due yet, posted again
    assert task_field(store, job_id, "s", 1) == "awaiting"
    assert "await" in leader_messages(store, job_id)
    time.sleep(0.25)  # the timeout itself is what is tested: it must pass
    Leader(store, LEADER).await_due(job_id)
    assert task_field(store, job_id, "s", 1) == "failed"
    assert "timed out after waiting 0 s for signal approve" in (
        task_field(store, job_id, "e", 1) or ""
    )
    assert task_field(store, job_id, "s", 2) == "upstream_failed"
    assert job_field(store, job_id, "state") == "failed"
    assert "await" not in leader_messages(store, job_id)


def test_wait_for_is_checked_when_the_spec_is_read() -> None:
    spec = approval_job()
    spec["tasks"][1]["task"] = "t.approve"
    with pytest.raises(SpecError, match="runs no function: drop 'task'"):
        parse_spec(spec)
    for bad in ({"signal": "a b"}, {"signals": "x"}, {"timeout": 3}, "approve"):
        spec = approval_job()
        spec["tasks"][1]["wait_for"] = bad
        with pytest.raises(SpecError, match="wait_for"):
            parse_spec(spec)
    assert parse_spec(approval_job(timeout="1h")).tasks[1].to_dict()["wait_for"] == {
        "signal": "approve",
        "timeout": 3600.0,
    }


def test_a_wait_marked_succeeded_by_hand_ends_so_and_its_signal_comes_too_late(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, approval_job(timeout=3600))
    (prepare,) = claim(store, H1)
    complete_one(store, H1, job_id, prepare.index, prepare.token)
    assert operate.mark(store, job_id, "approve", "succeeded", result={"by": "on-call"},
                        by="ann", reason="approved on the phone") == "awaiting"  # fmt: skip

    assert task_field(store, job_id, "s", 1) == "succeeded"
    (line,) = [h for h in history_of(store, job_id, "approve") if h["handler"] == "ann"]
    assert line["error"] == "marked succeeded by ann: approved on the phone"
    with untouched(store), pytest.raises(WrongState, match="or was marked succeeded by hand"):
        store.signal(job_id, "approve", {"by": "bob"})
    assert store.signal(job_id, "approve", {"by": "on-call"}) == (0, 0)  # its result: a no-op
    Leader(store, LEADER).await_due(job_id)  # its timeout: nothing waits, none is due again
    assert task_field(store, job_id, "s", 1) == "succeeded"
    assert "await" not in leader_messages(store, job_id)
    (ship,) = claim(store, H1)  # released once
    assert inputs_of(ship) == {"ok": {"by": "on-call"}}
    assert claim(store, H1) == []
    assert complete_one(store, H1, job_id, ship.index, ship.token) == 0
    assert job_field(store, job_id, "state") == "succeeded"


def test_a_wait_marked_failed_fails_its_children_and_a_later_signal_is_refused(
    store: Store,
) -> None:
    job_id = run_prepare(store)
    operate.mark(store, job_id, "approve", "failed", by="ann", reason="rejected")

    assert task_field(store, job_id, "s", 1) == "failed"
    assert task_field(store, job_id, "s", 2) == "upstream_failed"
    assert job_field(store, job_id, "state") == "failed"
    with untouched(store), pytest.raises(WrongState, match="has finished"):
        store.signal(job_id, "approve", "yes")
