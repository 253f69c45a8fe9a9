"""complete.lua takes the next queued tasks of its job, as the worker's next claim would:
one round trip serves a completion and the start of what the freed slots run next, and no
task is passed over (priority, queue order, due retries, pools and rates stay the claim's)."""

from __future__ import annotations

from typing import Any

from lua_helpers import (
    H1,
    H2,
    claim,
    queue_members,
    queued_indexes,
    submit_and_split,
    task_field,
    task_states,
)

from jobcenter.storage import limits
from jobcenter.storage.store import StartedTask, Store

CHILDREN_ORDERED = 8  # OBS.CHILDREN_ORDERED: a task with more children bounds prefetch to none


def queued_order(store: Store, job_id: str, index: int, like: StartedTask) -> bytes:
    """The run order of queued task `index` of a job with one priority: its queue member
    after the priority part of a started task's run order (`like`)."""
    (member,) = [m for m in queue_members(store, job_id=job_id) if m.endswith(f"|{index:06d}")]
    return like.run_order.split(b"|")[0] + b"|" + member.encode()


def child_order(job_id: str, index: int) -> bytes:
    """How a run order of task `index` of the job ends (OBS.run_order)."""
    return f"|{job_id}|{index:06d}".encode()


def flat(n: int, name: str = "flat", **job: Any) -> dict[str, Any]:
    return {"name": name, **job, "tasks": [{"id": f"t{i}", "task": "t.x"} for i in range(n)]}


def complete_taking(
    store: Store,
    handler: str,
    done: list[StartedTask],
    take_max: int,
    queues: tuple[str, ...] = ("default",),
) -> list[StartedTask]:
    codes, taken = store.complete(
        handler,
        [(t.job_id, t.index, t.token) for t in done],
        take_queues=queues,
        take_max=take_max,
    )
    assert set(codes.values()) == {0}
    return taken


def test_a_completion_starts_the_next_queued_tasks_of_its_job(store: Store) -> None:
    job_id, _ = submit_and_split(store, flat(6))
    first = claim(store, H1, 2)
    taken = complete_taking(store, H1, first, take_max=3)

    assert [(t.index, t.attempt) for t in taken] == [(2, 1), (3, 1), (4, 1)]
    assert queued_indexes(store, job_id) == [5]
    for t in taken:  # running attempts of H1, with a lease, as start.lua makes them
        assert task_field(store, job_id, "s", t.index) == "running"
        assert task_field(store, job_id, "h", t.index) == H1
        assert store.redis.zscore(store.keys.leases(0), f"{job_id}|{t.index}") is not None
    assert task_states(store, job_id) == {
        "t0": "succeeded", "t1": "succeeded", "t2": "running", "t3": "running",
        "t4": "running", "t5": "queued",
    }  # fmt: skip
    # and they complete like claimed ones, the last completion taking the last task
    (last,) = complete_taking(store, H1, taken, take_max=3)
    assert last.index == 5 and queued_indexes(store, job_id) == []


def test_nothing_is_taken_past_another_jobs_task_at_the_head_of_the_queue(store: Store) -> None:
    first_job, _ = submit_and_split(store, flat(2, "first"))
    second_job, _ = submit_and_split(store, flat(3, "second"))
    a0, a1 = claim(store, H1, 2)
    assert {a0.job_id, a1.job_id} == {first_job}
    # the second job's tasks head the queue now: the first job's completion takes none
    assert complete_taking(store, H1, [a0], take_max=3) == []
    assert queued_indexes(store, second_job) == [0, 1, 2]


def test_a_higher_priority_task_queued_meanwhile_is_not_passed_over(store: Store) -> None:
    mine, _ = submit_and_split(store, flat(4, "mine"))
    running = claim(store, H1, 1)
    urgent, _ = submit_and_split(store, flat(1, "urgent", priority=5))
    assert complete_taking(store, H1, running, take_max=2) == []
    assert [t.job_id for t in claim(store, H2, 1)] == [urgent]


def test_a_later_queue_is_taken_from_only_once_the_earlier_ones_are_empty(store: Store) -> None:
    spec = {
        "name": "two-queues",
        "tasks": [
            {"id": "a", "task": "t.x"},
            {"id": "b", "task": "t.x"},
            {"id": "o", "task": "t.x", "queue": "other"},
        ],
    }
    job_id, index = submit_and_split(store, spec)
    (a,) = claim(store, H1, 1)
    taken = complete_taking(store, H1, [a], take_max=2, queues=("default", "other"))
    assert [t.index for t in taken] == [index["b"], index["o"]]
    # served the other way round, "other" comes first and "default" only once it is empty
    job2, index2 = submit_and_split(store, {**spec, "name": "again"})
    (a2,) = claim(store, H1, 1)
    taken = complete_taking(store, H1, [a2], take_max=1, queues=("other", "default"))
    assert [t.index for t in taken] == [index2["o"]]
    assert queued_indexes(store, job2) == [index2["b"]]


def test_nothing_is_taken_from_a_queue_that_serves_none_of_the_jobs_tasks_first(
    store: Store,
) -> None:
    """The worker serves "other" before "default"; the job has no task in "other", so that
    queue's head is unknown to its scripts: the claim decides, not the completion."""
    job_id, _ = submit_and_split(store, flat(3))
    first = claim(store, H1, 1)
    assert complete_taking(store, H1, first, take_max=2, queues=("other", "default")) == []
    assert queued_indexes(store, job_id) == [1, 2]


def test_tasks_with_pool_slots_and_rate_limited_queues_are_left_to_the_claim(
    store: Store,
) -> None:
    limits.set_pool(store, "gpu", 4)
    spec = {
        "name": "pooled",
        "tasks": [{"id": f"t{i}", "task": "t.x", "pool": "gpu"} for i in range(3)],
    }
    job_id, _ = submit_and_split(store, spec)
    first = claim(store, H1, 1)
    assert complete_taking(store, H1, first, take_max=2) == []
    assert queued_indexes(store, job_id) == [1, 2]

    plain, _ = submit_and_split(store, flat(3, "rated"))
    limits.set_rate(store, "queue:default", "100/1h")
    started = [t for t in claim(store, H1, 10) if t.job_id == plain][:1]
    assert complete_taking(store, H1, started, take_max=2) == []


def test_a_due_retry_is_left_for_the_claim_to_put_back_in_order(store: Store) -> None:
    spec = {
        "name": "retrying",
        "tasks": [{"id": f"t{i}", "task": "t.x", "retries": 1} for i in range(4)],
    }
    job_id, _ = submit_and_split(store, spec)
    a, b = claim(store, H1, 2)
    code, state = store.fail(H1, job_id, a.index, a.token, "boom", 60_000)
    assert (code, state) == (0, "retry_wait")
    delayed = store.keys.delayed(0, "default")
    (c,) = complete_taking(store, H1, [b], take_max=1)  # the retry is not due yet
    assert c.index == 2
    ((member, _),) = store.redis.zrange(delayed, 0, -1, withscores=True)
    store.redis.zadd(delayed, {member: 0})  # its backoff is over
    assert complete_taking(store, H1, [c], take_max=2) == []
    again = claim(store, H2, 1)
    assert [(t.index, t.attempt) for t in again] == [(a.index, 2)]


def test_a_stopping_job_and_a_zero_take_max_take_nothing(store: Store) -> None:
    job_id, _ = submit_and_split(store, flat(4))
    first = claim(store, H1, 2)
    assert complete_taking(store, H1, first[:1], take_max=0) == []
    store.redis.hset(store.keys.job(job_id).job, "state", "cancelled")  # not running
    assert complete_taking(store, H1, first[1:], take_max=2) == []
    assert queued_indexes(store, job_id) == [2, 3]


def test_the_tasks_a_completion_took_are_found_after_its_reply_was_lost(store: Store) -> None:
    job_id, _ = submit_and_split(store, flat(5))
    first = claim(store, H1, 1)
    taken = complete_taking(store, H1, first, take_max=2)
    assert [t.index for t in taken] == [1, 2]
    # the reply was lost: the worker sends it again, finds it done, and adopts what it took
    codes, again = store.complete(
        H1, [(job_id, first[0].index, first[0].token)], take_queues=["default"], take_max=2
    )
    assert codes == {(job_id, 0): 1}
    assert sorted(t.index for t in store.running_attempts(H1, job_id)) == [1, 2] + [
        t.index for t in again
    ]
    assert store.running_attempts(H2, job_id) == []


DAG = {
    "name": "dag",
    "order": "fifo",
    "tasks": [
        {"id": "a", "task": "t.x"},
        {"id": "b", "task": "t.x"},
        {"id": "c", "task": "t.x", "depends_on": ["b"]},
        {"id": "d", "task": "t.x"},
    ],
}


def test_a_prefetch_takes_tasks_beyond_the_free_slots_in_queue_order(store: Store) -> None:
    job_id, _ = submit_and_split(store, flat(5))
    (first,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(job_id, 0, first.token)], take_queues=["default"], take_max=1, prefetch=2
    )
    assert [t.index for t in taken] == [1, 2, 3]
    assert not any(t.has_children for t in taken)
    assert [t.run_order for t in taken] == sorted(t.run_order for t in taken)


def test_a_prefetch_stops_before_the_first_child_of_a_task_it_took(store: Store) -> None:
    """Beyond the free slots a completion takes only tasks that sort before the first child
    of every task it took: a thread freed while such a task ran would start a prefetched one
    before its children, which come first (fifo: c before d)."""
    dag, index = submit_and_split(store, DAG)
    (a,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(dag, a.index, a.token)], take_queues=["default"], take_max=0, prefetch=2
    )
    assert [t.index for t in taken] == [index["b"]]  # b sorts before c; d after it
    first_child = taken[0].first_child
    assert first_child is not None and first_child.endswith(child_order(dag, index["c"]))
    assert queued_indexes(store, dag) == [index["d"]]


def test_no_prefetch_follows_a_task_with_children_taken_into_a_free_slot(store: Store) -> None:
    dag, index = submit_and_split(store, DAG)
    (a,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(dag, a.index, a.token)], take_queues=["default"], take_max=1, prefetch=2
    )
    assert [(t.index, t.has_children) for t in taken] == [(index["b"], True)]
    assert queued_indexes(store, dag) == [index["d"]]


FAN_IN = {  # W2's middle: tasks whose one child comes after all of them
    "name": "fan-in",
    "tasks": [{"id": f"m{i}", "task": "t.x"} for i in range(6)]
    + [{"id": "join", "task": "t.x", "depends_on": [f"m{i}" for i in range(6)]}],
}


def test_tasks_with_children_are_prefetched_when_every_child_comes_after_them(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, FAN_IN)
    (first,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(job_id, first.index, first.token)], take_queues=["default"], take_max=1,
        prefetch=2,
    )  # fmt: skip
    assert [t.index for t in taken] == [first.index + 1, first.index + 2, first.index + 3]
    joins = {t.first_child for t in taken}
    (join,) = joins
    assert join is not None and join.endswith(child_order(job_id, 6))
    assert all(t.has_children and t.run_order < join for t in taken)


def test_a_prefetch_sorts_before_the_first_child_of_what_the_worker_holds(store: Store) -> None:
    """The worker's own bound (the first child of the tasks it holds) stops the prefetch as
    the bound of what the call took does."""
    job_id, _ = submit_and_split(store, FAN_IN)
    (first,) = claim(store, H1, 1)
    bound = queued_order(store, job_id, first.index + 3, first)  # a held task's child there
    _, taken = store.complete(
        H1, [(job_id, first.index, first.token)], take_queues=["default"], take_max=1,
        prefetch=4, prefetch_before=bound,
    )  # fmt: skip
    assert [t.index for t in taken] == [first.index + 1, first.index + 2]


def test_a_task_with_more_children_than_are_ordered_stops_every_prefetch(store: Store) -> None:
    wide = {
        "name": "wide",
        "order": "fifo",
        "tasks": [{"id": tid, "task": "t.x"} for tid in ("p", "q", "r")]
        + [
            {"id": f"c{i}", "task": "t.x", "depends_on": ["q"]} for i in range(CHILDREN_ORDERED + 1)
        ],
    }
    job_id, index = submit_and_split(store, wide)
    (p,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(job_id, p.index, p.token)], take_queues=["default"], take_max=1, prefetch=2
    )
    assert [(t.index, t.first_child) for t in taken] == [(index["q"], b"")]
    assert queued_indexes(store, job_id) == [index["r"]]


def test_children_a_completion_releases_fill_free_slots_only_never_a_prefetch(
    store: Store,
) -> None:
    """A burst goes to the free slots of every worker (their wake-ups), not to one
    worker's prefetch."""
    spec = {
        "name": "burst",
        "tasks": [{"id": "root", "task": "t.x"}]
        + [{"id": f"c{i}", "task": "t.x", "depends_on": ["root"]} for i in range(4)],
    }
    job_id, _ = submit_and_split(store, spec)
    (root,) = claim(store, H1, 1)
    _, taken = store.complete(
        H1, [(job_id, root.index, root.token)], take_queues=["default"], take_max=1, prefetch=4
    )
    assert [t.index for t in taken] == [1]
    assert queued_indexes(store, job_id) == [2, 3, 4]
