"""One complete.lua call for the tasks of several jobs of a shard: each job's part is a
transition of its own (its codes, its releases, its takes), the call's cost is paid once, and
what one part changes is seen by the parts after it."""

from __future__ import annotations

from typing import Any

import pytest
from lua_helpers import (
    H1,
    H2,
    claim,
    queued_indexes,
    script_calls,
    submit_and_split,
    task_states,
)

from jobcenter.config import Settings
from jobcenter.storage import limits
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import RefusedInPart, StartedTask, Store


def parent_child(name: str, child_queue: str | None = None) -> dict[str, Any]:
    child: dict[str, Any] = {"id": "c", "task": "t.x", "depends_on": ["p"]}
    if child_queue:
        child["queue"] = child_queue
    return {"name": name, "tasks": [{"id": "p", "task": "t.x"}, child]}


def flat_job(name: str, n: int) -> dict[str, Any]:
    return {"name": name, "tasks": [{"id": f"t{i}", "task": "t.x"} for i in range(n)]}


def complete(
    store: Store, done: list[StartedTask], take_max: int
) -> tuple[dict[tuple[str, int], int], list[StartedTask]]:
    return store.complete(
        H1, [(t.job_id, t.index, t.token) for t in done], take_queues=["default"], take_max=take_max
    )


def test_one_call_completes_the_tasks_of_several_jobs(private_redis: RedisServer) -> None:
    store = Store.from_settings(Settings(redis_url=private_redis.url, namespace="jobs"))
    jobs = [submit_and_split(store, parent_child(f"job-{n}"))[0] for n in range(3)]
    parents = claim(store, H1, 3)
    assert sorted(t.job_id for t in parents) == sorted(jobs)
    assert len({store.keys.job_shard(j) for j in jobs}) == 1

    codes, taken = complete(store, parents, take_max=3)

    assert codes == {(j, 0): 0 for j in jobs}
    assert sorted((t.job_id, t.index, t.attempt) for t in taken) == sorted((j, 1, 1) for j in jobs)
    for job_id in jobs:
        assert task_states(store, job_id) == {"p": "succeeded", "c": "running"}
    # each job's child ends its job, again in one call (the first loaded the library)
    before = sum(script_calls(store.redis).values())
    codes, _ = complete(store, taken, take_max=3)
    assert sum(script_calls(store.redis).values()) - before == 1
    assert codes == {(j, 1): 0 for j in jobs}
    assert {store.status(j)["state"] for j in jobs} == {"succeeded"}


def test_the_take_budget_is_shared_by_the_jobs_of_a_call(store: Store) -> None:
    first, _ = submit_and_split(store, parent_child("first"))
    second, _ = submit_and_split(store, parent_child("second"))
    parents = claim(store, H1, 2)

    _, taken = complete(store, parents, take_max=1)

    assert [(t.job_id, t.index) for t in taken] == [(first, 1)]
    assert queued_indexes(store, second) == [1]  # queued for a claim


def test_jobs_of_other_queues_share_a_call(store: Store) -> None:
    """The call passes the queues of every job: a job whose child enters a queue the first
    job's tasks never do is still completed, its child queued there."""
    plain, _ = submit_and_split(store, parent_child("plain"))
    other, _ = submit_and_split(store, parent_child("other", child_queue="other"))
    parents = claim(store, H1, 2)

    codes, taken = complete(store, parents, take_max=2)

    assert codes == {(plain, 0): 0, (other, 0): 0}
    assert [(t.job_id, t.index) for t in taken] == [(plain, 1)]
    assert queued_indexes(store, other, "other") == [1]
    (child,) = store.claim(H2, ["other"], max_tasks=1, max_leader=0).tasks
    assert (child.job_id, child.index) == (other, 1)


def test_a_paused_job_takes_nothing_and_the_others_still_do(store: Store) -> None:
    running, _ = submit_and_split(store, parent_child("running"))
    paused, _ = submit_and_split(store, parent_child("paused"))
    parents = claim(store, H1, 2)
    assert store.pause_job(paused)

    codes, taken = complete(store, parents, take_max=2)

    assert set(codes.values()) == {0}
    assert [(t.job_id, t.index) for t in taken] == [(running, 1)]
    assert task_states(store, paused) == {"p": "succeeded", "c": "queued"}  # parked by a claim


def test_slots_a_later_job_frees_keep_its_take_for_the_claim(store: Store) -> None:
    """A part that frees a limit's slots, with a task parked waiting for them, takes nothing
    more: the claim puts the parked task back in order first. An earlier part of the same
    call read the freed slots before they were freed; the later one reads them again."""
    limits.set_pool(store, "gpu", 1)
    early, _ = submit_and_split(store, flat_job("early", 2))
    gpu = {"task": "t.x", "pool": "gpu"}
    spec = {
        "name": "pooled",
        "tasks": [{"id": "g0", **gpu}, {"id": "g1", **gpu}]
        + [{"id": f"x{i}", "task": "t.x"} for i in range(2)],
    }
    pooled, index = submit_and_split(store, spec)
    held = claim(store, H1, 3)  # e0, e1, and g0 with the pool's one slot
    assert sorted((t.job_id, t.index) for t in held) == sorted(
        [(early, 0), (early, 1), (pooled, index["g0"])]
    )
    parked_by = claim(store, H2, 1)  # meets g1 with the pool full: parks it, takes x0
    assert [t.index for t in parked_by] == [index["x0"]]
    assert queued_indexes(store, pooled) == [index["x1"]]

    # early's part (its job still running) reads the freed slots: none yet; pooled's part
    # frees g0's, which g1 waits for
    by_key = {(t.job_id, t.index): t for t in held}
    done = [by_key[(early, 0)], by_key[(pooled, index["g0"])]]
    codes, taken = complete(store, done, take_max=1)

    assert set(codes.values()) == {0}
    assert taken == []
    assert [t.index for t in claim(store, H2, 1)] == [index["g1"]]


def test_a_part_that_raises_holds_up_no_other_job(store: Store) -> None:
    """Redis rolls nothing back: a part that errors ends its call, the parts before it keep
    their replies (so the worker does not report them again), and the parts after it go
    again in a call of their own; only the failing job's tasks are refused."""
    first, _ = submit_and_split(store, parent_child("first"))
    broken, _ = submit_and_split(store, parent_child("broken"))
    last, _ = submit_and_split(store, parent_child("last"))
    parents = claim(store, H1, 3)
    assert [t.job_id for t in parents] == [first, broken, last]
    tasks = store.keys.job(broken).tasks
    store.redis.rename(tasks, tasks + ":aside")
    store.redis.set(tasks, "not a hash")

    with pytest.raises(RefusedInPart) as refused:
        complete(store, parents, take_max=3)

    assert refused.value.codes == {(first, 0): 0, (last, 0): 0}
    assert [(t.job_id, t.index) for t in refused.value.taken] == [(first, 1)]
    assert task_states(store, last) == {"p": "succeeded", "c": "queued"}
    store.redis.delete(tasks)
    store.redis.rename(tasks + ":aside", tasks)
    codes, _ = complete(store, [t for t in parents if t.job_id == broken], take_max=0)
    assert codes == {(broken, 0): 0}
