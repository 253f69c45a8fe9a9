"""Results, inputs and run-time fan-out (map) through the Lua transitions, on a real Redis:
complete.lua stores a success's result (fenced), start.lua hands a task its parents'
results, and a mapped task expands exactly once, in bounded chunks, whatever the callers."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from lua_helpers import H1, H2, claim, job_field, submit_and_split, task_field

from jobcenter import Fatal, task
from jobcenter.errors import JobcenterError, NoResult, NotFound
from jobcenter.model import codec
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage import admin, views
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.store import Store
from jobcenter.testing import finish_job, run_job

FRONTIER_BUDGET = 300  # _job.lua: child visits (and instances written) per call
COMPLETE_FRONTIER_BUDGET = 100  # _job.lua: ... per completion
FAILED_ONCE: set[str] = set()  # elements whose first attempt failed (retry test)


@task(name="dataflow.numbers")
def numbers(count: int) -> list[int]:
    return list(range(count))


@task(name="dataflow.not_a_list")
def not_a_list() -> dict[str, int]:
    return {"a": 1}


@task(name="dataflow.square")
def square(x: int, offset: int = 0) -> int:
    return x * x + offset


@task(name="dataflow.square_fails_once")
def square_fails_once(x: int) -> int:
    if x == 3 and "3" not in FAILED_ONCE:
        FAILED_ONCE.add("3")
        raise Fatal("element 3 fails its first run")
    return x * x


@task(name="dataflow.gather")
def gather(parts: list[int], label: str = "") -> dict[str, Any]:
    return {"label": label, "parts": parts}


def map_job(
    count: int, *, source: str = "dataflow.numbers", each: str = "dataflow.square"
) -> dict[str, Any]:
    return {
        "name": "map",
        "tasks": [
            {"id": "src", "task": source, "args": [count] if source == "dataflow.numbers" else []},
            {"id": "each", "task": each, "map": {"x": "src"}},
            {
                "id": "merge",
                "task": "dataflow.gather",
                "depends_on": ["each", "src"],
                "inputs": {"parts": "each"},
            },
        ],
    }


def instance_ids(store: Store, job_id: str) -> list[str]:
    """The ids of the job's map instances (`each[<i>]`), in element order."""
    ids = store.task_field(job_id, TaskField.ID)
    return sorted((i for i in ids.values() if "[" in i), key=lambda i: int(i[5:-1]))


# -- results ------------------------------------------------------------------------------


def test_a_success_stores_its_result_and_a_stale_attempt_cannot_write_one(store: Store) -> None:
    job_id, ids = submit_and_split(store, {"name": "r", "tasks": [{"id": "a", "task": "x"}]})
    (a,) = claim(store, H1)
    packed = codec.pack({"rows": [1, 2]})

    stale, _ = store.complete(H2, [(job_id, a.index, a.token, codec.pack("stale"))])
    assert stale == {(job_id, a.index): -2}
    assert task_field(store, job_id, "r", a.index) is None
    with pytest.raises(NoResult, match="has no result yet: it is running"):
        store.result(job_id, "a")

    codes, _ = store.complete(H1, [(job_id, a.index, a.token, packed)])
    assert codes == {(job_id, a.index): 0}
    again, _ = store.complete(H1, [(job_id, a.index, a.token, codec.pack("second"))])
    assert again == {(job_id, a.index): 1}
    assert store.result(job_id, "a") == {"rows": [1, 2]}


def test_result_of_an_unknown_job_or_task_is_not_found(store: Store) -> None:
    job_id, _ = submit_and_split(store, {"name": "r", "tasks": [{"id": "a", "task": "x"}]})
    with pytest.raises(NotFound, match="has no task 'b'"):
        store.result(job_id, "b")
    with pytest.raises(NotFound, match="no job nope"):
        store.result("nope", "a")


# -- inputs -------------------------------------------------------------------------------


def test_start_hands_a_task_its_parents_results_as_keyword_arguments(store: Store) -> None:
    spec = {
        "name": "inputs",
        "tasks": [
            {"id": "a", "task": "x"},
            {"id": "b", "task": "x"},
            {"id": "c", "task": "x", "depends_on": ["a", "b"], "inputs": {"rows": "a"}},
        ],
    }
    job_id, ids = submit_and_split(store, spec)
    started = {t.index: t for t in claim(store, H1)}
    done = [(job_id, t.index, t.token, codec.pack([t.index, "x"])) for t in started.values()]
    store.complete(H1, done)

    (c,) = claim(store, H1)
    assert c.index == ids["c"]
    assert c.input_kwargs() == {"rows": [ids["a"], "x"]}


# -- map ----------------------------------------------------------------------------------


def test_a_map_runs_one_instance_per_element_and_its_children_get_their_results_in_order(
    store: Store,
) -> None:
    run = run_job(map_job(5), store=store)

    assert run.state == "succeeded"
    assert [f"each[{i}]" for i in range(5)] == instance_ids(store, run.job_id)
    assert run.result("merge") == {"label": "", "parts": [0, 1, 4, 9, 16]}
    assert run.result("each") == [0, 1, 4, 9, 16]
    assert run.result("each[3]") == 9
    assert run.states()["each"] == "succeeded"
    assert job_field(store, run.job_id, "n") == str(3 + 5)


def test_an_empty_list_gives_no_instance_and_the_children_see_an_empty_list(store: Store) -> None:
    run = run_job(map_job(0), store=store)

    assert run.state == "succeeded"
    assert instance_ids(store, run.job_id) == []
    assert run.result("merge")["parts"] == []


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (map_job(0, source="dataflow.not_a_list"), "map: task src returned a dict, not a list"),
        (
            map_job(10_001),
            "map: task src returned a list of 10001 elements; a map takes at most 10000",
        ),
    ],
    ids=["not-a-list", "too-long"],
)
def test_a_source_without_a_fitting_list_fails_the_mapped_task_and_cascades(
    store: Store, spec: dict[str, Any], error: str
) -> None:
    run = run_job(spec, store=store)

    assert run.state == "failed"
    assert run.tasks["each"].state == "failed"
    assert run.tasks["each"].error == error
    assert run.tasks["merge"].state == "upstream_failed"
    assert instance_ids(store, run.job_id) == []


def test_a_large_expansion_is_written_in_bounded_chunks_by_continue_calls(store: Store) -> None:
    job_id, ids = submit_and_split(store, map_job(1_000))
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(list(range(1_000))))])

    written = [len(instance_ids(store, job_id))]
    while store.has_frontier(job_id):
        store.continue_frontier(job_id)
        written.append(len(instance_ids(store, job_id)))
    assert written[0] < COMPLETE_FRONTIER_BUDGET
    assert all(0 < b - a <= FRONTIER_BUDGET for a, b in zip(written, written[1:], strict=False))
    assert written[-1] == 1_000
    assert job_field(store, job_id, "n") == str(3 + 1_000)
    assert job_field(store, job_id, "left") == str(1_000 + 2)  # the instances, each, merge


def test_concurrent_callers_and_repeated_entries_expand_a_map_exactly_once(
    make_store: Callable[..., Store],
) -> None:
    """Eight clients drain the frontier at once while duplicate expansion entries are pushed
    (what a repair or a resubmitted message could add): every instance is written once."""
    stores = [make_store() for _ in range(8)]
    store = stores[0]
    job_id, ids = submit_and_split(store, map_job(3_000))
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(list(range(3_000))))])
    frontier = store.keys.job(job_id).frontier
    for _ in range(5):
        store.redis.rpush(frontier, f"x|{ids['each']}|0|0")

    barrier = threading.Barrier(len(stores))

    def drain(s: Store) -> None:
        barrier.wait()
        while s.has_frontier(job_id):
            s.continue_frontier(job_id)

    threads = [threading.Thread(target=drain, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert instance_ids(store, job_id) == [f"each[{i}]" for i in range(3_000)]
    assert job_field(store, job_id, "n") == str(3 + 3_000)
    assert job_field(store, job_id, "left") == str(3_000 + 2)
    run = finish_job(store, job_id)
    assert run.state == "succeeded"
    assert run.result("merge")["parts"] == [i * i for i in range(3_000)]


def test_concurrent_completions_of_the_last_instances_join_the_map_once(
    make_store: Callable[..., Store],
) -> None:
    """Every instance is claimed, then all complete at once from many clients: the mapped
    task joins once and its child is queued once."""
    stores = [make_store() for _ in range(6)]
    store = stores[0]
    job_id, ids = submit_and_split(store, map_job(60))
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(list(range(60))))])
    started = claim(store, H1)
    assert len(started) == 60
    barrier = threading.Barrier(len(stores))

    def complete(k: int) -> None:
        mine = [(job_id, t.index, t.token, codec.pack(t.index)) for t in started[k::6]]
        barrier.wait()
        for item in mine:
            stores[k].complete(H1, [item])

    threads = [threading.Thread(target=complete, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert task_field(store, job_id, "s", ids["each"]) == "succeeded"
    (merge,) = claim(store, H1)
    assert merge.index == ids["merge"]
    assert claim(store, H1) == []
    assert merge.input_kwargs()["parts"] == [
        t.index for t in sorted(started, key=lambda t: t.index)
    ]


def test_a_failed_instance_cascades_and_a_retry_of_the_job_joins_the_map(store: Store) -> None:
    FAILED_ONCE.clear()
    run = run_job(map_job(5, each="dataflow.square_fails_once"), store=store)
    assert run.state == "failed"
    assert run.tasks["each[3]"].state == "failed"
    assert run.tasks["each"].state == "upstream_failed"
    assert run.tasks["merge"].state == "upstream_failed"

    admin.retry_job(store, run.job_id)
    again = finish_job(store, run.job_id)

    assert again.state == "succeeded"
    assert again.result("merge")["parts"] == [0, 1, 4, 9, 16]
    assert len(instance_ids(store, run.job_id)) == 5


def test_the_dashboards_task_panel_shows_a_bounded_preview_of_the_result(store: Store) -> None:
    run = run_job(map_job(500), store=store)
    index = {tid: int(i) for i, tid in store.task_field(run.job_id, TaskField.ID).items()}

    merge = views.task_detail(store, run.job_id, index["merge"])
    each = views.task_detail(store, run.job_id, index["each"])
    instance = views.task_detail(store, run.job_id, index["each[7]"])

    assert merge.result is not None and merge.result.startswith('{"label": "", "parts": [0, 1, 4')
    assert len(merge.result) <= views.ARGS_PREVIEW_MAX
    assert each.result == json.dumps([i * i for i in range(views.RESULT_PREVIEW_ITEMS)])
    assert instance.result == "49"


def test_a_cancel_mid_expansion_writes_no_more_instances_and_the_job_ends_cancelled(
    store: Store,
) -> None:
    job_id, ids = submit_and_split(store, map_job(1_000))
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(list(range(1_000))))])
    written = len(instance_ids(store, job_id))
    assert 0 < written < 1_000

    store.stop_job(job_id, "cancel")
    while store.has_frontier(job_id):
        store.continue_frontier(job_id)

    assert len(instance_ids(store, job_id)) == written
    assert job_field(store, job_id, "state") == "cancelled"
    assert job_field(store, job_id, "left") == "0"
    states = set(store.task_field(job_id, TaskField.STATE).values())
    assert states == {"succeeded", "cancelled"}


@pytest.mark.parametrize("lost", ["before-the-expansion", "mid-expansion"])
def test_recovery_resumes_an_expansion_whose_frontier_was_lost(store: Store, lost: str) -> None:
    """Rule 3 (a lost release) for a mapped task: its expansion is scheduled (again) and goes
    on from its cursor; every element gets exactly one instance."""
    spec = map_job(1_000)
    if lost == "before-the-expansion":  # 300 siblings first: the release of each is cut off
        siblings = [
            {"id": f"s{i}", "task": "dataflow.square", "args": [i], "depends_on": ["src"]}
            for i in range(300)
        ]
        spec["tasks"][1:1] = siblings
    job_id, ids = submit_and_split(store, spec)
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(list(range(1_000))))])
    written = len(instance_ids(store, job_id))
    # the completion's budget, less its visit of `each` and the visit that starts expanding it
    assert written == (0 if lost == "before-the-expansion" else COMPLETE_FRONTIER_BUDGET - 2)
    jk = store.keys.job(job_id)
    store.redis.delete(jk.frontier)  # the releases and the expansion still to do are lost
    store.redis.zrem(store.keys.leader(0), f"continue|{job_id}")
    with pytest.raises(JobcenterError, match="is stuck"):  # runs what is queued, no more
        finish_job(store, job_id)

    run = None
    for round_no in range(1, 4):  # recovery passes come every minute; a few are enough
        Recovery(store, "test-recovery").run(round_no)
        with contextlib.suppress(JobcenterError):
            run = finish_job(store, job_id)
            break
    assert run is not None

    assert run.state == "succeeded"
    assert instance_ids(store, job_id) == [f"each[{i}]" for i in range(1_000)]
    assert run.result("merge")["parts"] == [i * i for i in range(1_000)]


def test_a_completion_takes_the_instances_its_map_queued_after_it_took_a_sibling(
    store: Store,
) -> None:
    """The completion that releases a map's instances takes them into its free slots, even
    when a sibling it took directly had found the queue empty: what it queued since counts."""
    job_id, _ = submit_and_split(
        store,
        {
            "name": "take-after-map",
            "tasks": [
                {"id": "src", "task": "dataflow.numbers", "args": [3]},
                {"id": "plain", "task": "dataflow.square", "args": [2], "depends_on": ["src"]},
                {"id": "each", "task": "dataflow.square", "map": {"x": "src"}},
            ],
        },
    )
    (src,) = claim(store, H1)
    codes, taken = store.complete(
        H1,
        [(job_id, src.index, src.token, codec.pack([0, 1, 2]))],
        take_queues=["default"],
        take_max=4,
    )
    assert codes == {(job_id, src.index): 0}
    ids = store.task_field(job_id, TaskField.ID)
    assert sorted(ids[str(t.index)] for t in taken) == ["each[0]", "each[1]", "each[2]", "plain"]
