"""Claims take the highest priority first, and first in, first out within a priority."""

from __future__ import annotations

from lua_helpers import H1, H2, claim, complete_one, submit_and_split

from jobcenter.storage.store import Store


def _job(name: str, priority: int, *tasks: tuple[str, int | None]) -> dict[str, object]:
    spec_tasks = []
    for task_id, override in tasks:
        task: dict[str, object] = {"id": task_id, "task": "t.x"}
        if override is not None:
            task["priority"] = override
        spec_tasks.append(task)
    return {"name": name, "priority": priority, "tasks": spec_tasks}


def _claim_one_by_one(store: Store, names: dict[tuple[str, int], str]) -> list[str]:
    order = []
    while tasks := claim(store, H1, n=1):
        (task,) = tasks
        order.append(names[(task.job_id, task.index)])
    return order


def test_claims_take_the_highest_priority_first_and_fifo_within_a_priority(
    store: Store,
) -> None:
    jobs = [
        _job("A", 0, ("a1", None), ("a2", None)),
        _job("B", 5, ("b1", None), ("b2", None)),
        _job("C", 5, ("c1", None)),
        _job("D", 0, ("d1", None), ("d2", 9)),  # a task overrides its job's priority
        _job("E", 3, ("e1", -1), ("e2", None)),
    ]
    names: dict[tuple[str, int], str] = {}
    for spec in jobs:
        job_id, ids = submit_and_split(store, spec)
        names.update({(job_id, index): task_id for task_id, index in ids.items()})

    assert _claim_one_by_one(store, names) == ["d2", "b1", "b2", "c1", "e2", "a1", "a2", "d1", "e1"]


def test_one_claim_call_returns_tasks_in_priority_order(store: Store) -> None:
    low, _ = submit_and_split(store, _job("low", 1, ("l1", None)))
    high, _ = submit_and_split(store, _job("high", 2, ("h1", None)))
    assert [t.job_id for t in claim(store, H1, n=5)] == [high, low]


def test_tasks_of_one_job_at_one_priority_are_claimed_in_spec_order(store: Store) -> None:
    """Twelve roots: their order must not depend on how their indexes sort as strings."""
    spec = _job("many", 0, *((f"r{k}", None) for k in range(12)))
    job_id, ids = submit_and_split(store, spec)
    names = {(job_id, index): task_id for task_id, index in ids.items()}
    assert _claim_one_by_one(store, names) == [f"r{k}" for k in range(12)]


def test_a_task_released_later_waits_behind_earlier_ready_tasks_of_its_priority(
    store: Store,
) -> None:
    """A child released by r0's completion is queued after the roots still waiting."""
    spec = {
        "name": "fifo",
        "tasks": [
            *({"id": f"r{k}", "task": "t.x"} for k in range(11)),
            {"id": "child", "task": "t.x", "depends_on": ["r0"]},
        ],
    }
    job_id, ids = submit_and_split(store, spec)
    names = {(job_id, index): task_id for task_id, index in ids.items()}
    (r0,) = claim(store, H2, n=1)
    assert names[(job_id, r0.index)] == "r0"
    assert complete_one(store, H2, job_id, r0.index, r0.token) == 0
    assert _claim_one_by_one(store, names) == [f"r{k}" for k in range(1, 11)] + ["child"]
