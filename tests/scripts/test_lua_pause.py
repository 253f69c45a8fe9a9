"""Pausing: a paused queue gives nothing to claims nor to completions' takes; a paused job's
tasks are parked by the claims that meet them (its running attempts finish), and its
resume puts them back in their places. The marks go with the job when it ends."""

from __future__ import annotations

import pytest
from lua_helpers import H1, LEADER, claim, job_field, submit, task_states

from jobcenter.errors import WrongState
from jobcenter.runtime.leader import Leader
from jobcenter.storage import pause
from jobcenter.storage.keyspace.schema import LimitField
from jobcenter.storage.store import Store

FLAT = {"name": "flat", "tasks": [{"id": f"t{i}", "task": "t.x"} for i in range(3)]}
CHAIN = {
    "name": "chain",
    "tasks": [{"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b", "depends_on": ["a"]}],
}


def limits_fields(store: Store) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in store.redis.hgetall(store.keys.limits(0)).items()}


def test_a_paused_queue_gives_no_task_until_resumed(store: Store) -> None:
    job_id = submit(store, FLAT)
    assert pause.pause_queue(store, "default") is True
    assert pause.pause_queue(store, "default") is False  # already
    assert claim(store, H1) == []
    assert [p.queue for p in pause.paused_queues(store)] == ["default"]
    assert pause.resume_queue(store, "default") is True
    assert {t.job_id for t in claim(store, H1)} == {job_id}
    assert pause.paused_queues(store) == []


def test_a_completion_takes_nothing_from_a_paused_queue(store: Store) -> None:
    submit(store, FLAT)
    first = claim(store, H1, 1)[0]
    pause.pause_queue(store, "default")
    _, taken = store.complete(
        H1, [(first.job_id, first.index, first.token)], take_queues=["default"], take_max=2
    )
    assert taken == []


def test_a_paused_job_is_passed_over_and_its_tasks_wait_parked_in_their_places(
    store: Store,
) -> None:
    paused_job = submit(store, FLAT)
    other = submit(store, FLAT)
    assert store.pause_job(paused_job) is True
    assert store.pause_job(paused_job) is False
    assert job_field(store, paused_job, "paused") is not None
    assert {t.job_id for t in claim(store, H1)} == {other}
    assert set(task_states(store, paused_job).values()) == {"queued"}
    assert pause.paused_job_count(store) == 1

    assert store.resume_job(paused_job) is True
    assert store.resume_job(paused_job) is False
    assert [t.index for t in claim(store, H1)] == [0, 1, 2]  # in their order
    assert job_field(store, paused_job, "paused") is None
    assert pause.paused_job_count(store) == 0


def test_a_paused_job_s_running_attempt_finishes_and_releases_nothing_that_starts(
    store: Store,
) -> None:
    job_id = submit(store, CHAIN)
    a = claim(store, H1)[0]
    store.pause_job(job_id)
    codes, taken = store.complete(
        H1, [(job_id, a.index, a.token)], take_queues=["default"], take_max=5
    )
    assert codes[(job_id, a.index)] == 0 and taken == []
    assert claim(store, H1) == []  # b is queued, then parked by this claim
    store.resume_job(job_id)
    assert [t.index for t in claim(store, H1)] == [1]


def test_a_job_paused_while_its_leader_splits_it_starts_nothing(
    store: Store, leader_split: None
) -> None:
    job_id = submit(store, FLAT)
    store.pause_job(job_id)
    Leader(store, LEADER).split(job_id)
    assert claim(store, H1) == []
    store.resume_job(job_id)
    assert len(claim(store, H1)) == 3


def test_cancelling_a_paused_job_ends_it_and_its_pause(store: Store) -> None:
    job_id = submit(store, FLAT)
    store.pause_job(job_id)
    assert claim(store, H1) == []  # its tasks parked
    store.stop_job(job_id, "cancel")
    assert job_field(store, job_id, "state") == "cancelled"
    assert job_field(store, job_id, "paused") is None
    left = [f for f in limits_fields(store) if job_id in f or f == LimitField.PAUSED_JOBS]
    assert left == []
    assert store.redis.zcard(store.keys.parked(0)) == 0
    with pytest.raises(WrongState, match="has finished"):
        store.pause_job(job_id)
