"""clear (ended tasks back to run again, with those below or above them) and mark (a task
settled by hand): the job's counters, state, results and children stay consistent, and
every refusal leaves Redis as it was."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from lua_helpers import (
    H1,
    LEADER,
    NO_RETRY,
    assert_finalized,
    claim,
    claim_by_index,
    history_of,
    job_field,
    queued_indexes,
    submit_and_split,
    task_field,
    task_states,
    untouched,
)

from jobcenter.errors import NotFound, Refused, WrongState
from jobcenter.model import codec
from jobcenter.runtime.leader import Leader
from jobcenter.storage import admin, operate
from jobcenter.storage.keyspace.packed import decode, encode
from jobcenter.storage.store import Store

CHAIN = {"name": "chain", "tasks": [
    {"id": "a", "task": "t.a"},
    {"id": "b", "task": "t.b", "depends_on": ["a"], "inputs": {"x": "a"}},
    {"id": "c", "task": "t.c", "depends_on": ["b"]},
]}  # fmt: skip


def run(store: Store, job_id: str, results: dict[int, Any] | None = None) -> None:
    """Play worker and leader until nothing is queued: every task succeeds, returning
    results[index] (packed), or nothing."""
    results = results or {}
    while True:
        admin._finish_cascade(store, job_id)
        started = claim(store, H1, n=100)
        if not started:
            return
        store.complete(
            H1,
            [(t.job_id, t.index, t.token, msgpack.packb(results.get(t.index))) for t in started],
        )


def fail(store: Store, job_id: str, index: int, retry_ms: int = NO_RETRY) -> None:
    task = claim_by_index(store, H1, n=1)[index]
    store.fail(H1, job_id, index, task.token, "boom", retry_ms)


def dead_letters(store: Store, job_id: str) -> set[int]:
    members = store.redis.zrange(store.keys.dlq(0), 0, -1)
    return {int(m.decode().split("|")[1]) for m in members if m.decode().startswith(job_id)}


def test_clear_downstream_runs_a_succeeded_branch_again_and_keeps_the_rest(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    run(store, job_id, {0: 1, 1: 2})
    assert_finalized(store, job_id, "succeeded")

    cleared, ids = operate.clear(store, job_id, ["b"], downstream=True, by="ann", reason="bad")

    assert (cleared, ids) == (2, ["b", "c"])
    assert task_states(store, job_id) == {"a": "succeeded", "b": "queued", "c": "waiting"}
    assert store.result(job_id, "a") == 1 and task_field(store, job_id, "r", 1) is None
    assert job_field(store, job_id, "state") == "running"
    assert job_field(store, job_id, "left") == "2"
    (line,) = [h for h in history_of(store, job_id, "b") if h["handler"] == "ann"]
    assert line["error"] == "cleared by ann: bad"
    run(store, job_id, {1: 3})
    assert_finalized(store, job_id, "succeeded")
    assert store.result(job_id, "b") == 3


def test_clear_without_downstream_keeps_a_waiting_child_waiting_for_it(store: Store) -> None:
    spec = {"name": "join", "tasks": [
        {"id": "a", "task": "t.a"}, {"id": "slow", "task": "t.s"},
        {"id": "j", "task": "t.j", "depends_on": ["a", "slow"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    started = claim_by_index(store, H1, n=2)
    store.complete(H1, [(job_id, 0, started[0].token)])  # a succeeded, slow runs on

    operate.clear(store, job_id, ["a"], by="ann")

    assert task_field(store, job_id, "d", 2) == "2"  # j waits for both again
    store.complete(H1, [(job_id, 1, started[1].token)])
    assert task_states(store, job_id)["j"] == "waiting"
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")


def test_clear_is_refused_while_a_task_to_clear_runs_and_writes_nothing(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    run_a = claim(store, H1, n=1)
    store.complete(H1, [(job_id, 0, run_a[0].token)])
    claim(store, H1, n=1)  # b runs

    with untouched(store), pytest.raises(Refused, match="task b is running"):
        operate.clear(store, job_id, ["a"], downstream=True, by="ann")
    operate.clear(store, job_id, ["a"], by="ann")  # b keeps running; a runs again
    assert task_states(store, job_id) == {"a": "queued", "b": "running", "c": "waiting"}


def test_clear_upstream_in_a_compacted_failed_job(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    run_a = claim(store, H1, n=1)
    store.complete(H1, [(job_id, 0, run_a[0].token)])
    fail(store, job_id, 1)
    admin._finish_cascade(store, job_id)
    Leader(store, LEADER).compact(job_id)
    assert job_field(store, job_id, "packed") == "1"

    cleared, ids = operate.clear(store, job_id, ["b"], upstream=True, downstream=True, by="ann")

    assert ids == ["a", "b", "c"] and cleared == 3
    assert task_states(store, job_id) == {"a": "queued", "b": "waiting", "c": "waiting"}
    assert dead_letters(store, job_id) == set()
    assert job_field(store, job_id, "nfailed") == "0"
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")


def test_clear_a_compacted_succeeded_job_restores_every_field_a_run_needs(store: Store) -> None:
    """A succeeded job's record keeps its tasks hash whole: cleared with its downstream, b
    runs again from the same fields (its inputs, edges, payload), and the job succeeds."""
    job_id, _ = submit_and_split(store, CHAIN)
    run(store, job_id, {0: 7})
    tasks = store.keys.job(job_id).tasks
    as_it_ended = store.redis.hgetall(tasks)
    Leader(store, LEADER).compact(job_id)
    assert job_field(store, job_id, "packed") == "1"

    assert operate.clear(store, job_id, ["b"], downstream=True, by="ann") == (2, ["b", "c"])

    working = ("p:", "c:", "in:", "np:", "o:", "l:", "tr:", "q:", "pr:")  # m: a fresh budget
    again = store.redis.hgetall(tasks)
    assert {k: v for k, v in again.items() if k.decode().startswith(working)} == {
        k: v for k, v in as_it_ended.items() if k.decode().startswith(working)
    }
    assert task_states(store, job_id) == {"a": "succeeded", "b": "queued", "c": "waiting"}
    (b,) = claim(store, H1)
    assert b.inputs == (("x", msgpack.packb(7)),)  # a's result, as the first run had it
    store.complete(H1, [(job_id, b.index, b.token, msgpack.packb(None))])
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_clear_refused_leaves_a_compacted_job_packed(store: Store, outcome: str) -> None:
    """A task named wrong is refused before the job is unpacked: nothing is written."""
    job_id, _ = submit_and_split(store, CHAIN)
    if outcome == "failed":
        fail(store, job_id, 0)
    run(store, job_id)
    Leader(store, LEADER).compact(job_id)
    assert job_field(store, job_id, "state") == outcome
    with untouched(store), pytest.raises(NotFound, match="no task 'typo'"):
        operate.clear(store, job_id, ["a", "typo"], by="ann")


def test_clear_refuses_a_succeeded_job_an_earlier_jobcenter_compacted(store: Store) -> None:
    """That record kept each task's name and arguments alone: its tasks cannot run again."""
    job_id, _ = submit_and_split(store, CHAIN)
    run(store, job_id)
    Leader(store, LEADER).compact(job_id)
    jk = store.keys.job(job_id)
    old = decode(store.redis.get(jk.packed))
    for name, value in list(old.fields.items()):
        if name.startswith("p:"):
            old.fields[name] = codec.pack({"t": codec.unpack(value)["t"]})  # type: ignore[index]
    store.redis.set(jk.packed, encode(old.fields, old.history, 3))
    with untouched(store), pytest.raises(Refused, match="compacted by an earlier jobcenter"):
        operate.clear(store, job_id, ["a"], by="ann")


def test_clear_a_named_task_its_rule_would_still_block_is_refused(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    fail(store, job_id, 0)
    admin._finish_cascade(store, job_id)
    with untouched(store), pytest.raises(WrongState, match="clear them too"):
        operate.clear(store, job_id, ["b"], by="ann")


def test_mark_a_failed_task_succeeded_releases_its_branch_with_the_result(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    fail(store, job_id, 0)
    admin._finish_cascade(store, job_id)
    assert job_field(store, job_id, "state") == "failed"

    was = operate.mark(store, job_id, "a", "succeeded", result={"rows": 7}, by="bob",
                       reason="loaded by hand")  # fmt: skip

    assert was == "failed"
    assert task_states(store, job_id) == {"a": "succeeded", "b": "queued", "c": "waiting"}
    assert store.result(job_id, "a") == {"rows": 7}
    assert dead_letters(store, job_id) == set()
    assert (job_field(store, job_id, "state"), job_field(store, job_id, "left")) == ("running", "2")
    (b,) = claim(store, H1, n=1)
    assert b.input_kwargs() == {"x": {"rows": 7}}
    line = history_of(store, job_id, "a")[-1]
    assert (line["state"], line["handler"]) == ("succeeded", "bob")
    assert line["error"] == "marked succeeded by bob: loaded by hand"
    store.complete(H1, [(job_id, 1, b.token)])
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")


def test_mark_a_task_whose_retry_is_due_succeeded_its_retry_never_runs(store: Store) -> None:
    spec = {
        "name": "r",
        "tasks": [
            {"id": "a", "task": "t.a", "retries": 3},
            {"id": "b", "task": "t.b", "depends_on": ["a"]},
        ],
    }
    job_id, _ = submit_and_split(store, spec)
    fail(store, job_id, 0, retry_ms=1)  # due at once
    assert task_states(store, job_id)["a"] == "retry_wait"

    operate.mark(store, job_id, "a", "succeeded", by="bob")

    started = claim(store, H1, n=10)
    assert [t.index for t in started] == [1]  # b, not a's retry
    store.complete(H1, [(job_id, 1, started[0].token)])
    assert_finalized(store, job_id, "succeeded")


@pytest.mark.parametrize(
    ("outcome", "child"), [("skipped", "skipped"), ("failed", "upstream_failed")]
)
def test_mark_a_queued_task_skipped_or_failed_passes_it_on(
    store: Store, outcome: str, child: str
) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    operate.mark(store, job_id, "a", outcome, by="bob")
    assert queued_indexes(store, job_id) == []
    assert task_states(store, job_id) == {"a": outcome, "b": child, "c": child}
    assert_finalized(store, job_id, "succeeded" if outcome == "skipped" else "failed")
    assert dead_letters(store, job_id) == ({0} if outcome == "failed" else set())


def test_mark_is_refused_for_a_running_attempt_and_an_ended_task(store: Store) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    (a,) = claim(store, H1, n=1)
    with untouched(store), pytest.raises(WrongState, match="an attempt runs"):
        operate.mark(store, job_id, "a", "succeeded", by="bob")
    store.complete(H1, [(job_id, 0, a.token)])
    run(store, job_id)
    with untouched(store), pytest.raises(WrongState, match="clear it"):
        operate.mark(store, job_id, "b", "failed", by="bob")


MAP = {"name": "map", "tasks": [
    {"id": "src", "task": "t.src"},
    {"id": "each", "task": "t.each", "map": {"x": "src"}},
    {"id": "after", "task": "t.after", "depends_on": ["each"], "inputs": {"all": "each"}},
]}  # fmt: skip


def test_clear_one_instance_or_a_whole_mapped_task(store: Store) -> None:
    job_id, _ = submit_and_split(store, MAP)
    run(store, job_id, {0: [10, 20], 3: 1, 4: 2, 2: 0})
    assert_finalized(store, job_id, "succeeded")

    cleared, ids = operate.clear(store, job_id, ["each[1]"], downstream=True, by="ann")
    assert ids == ["each[1]", "each", "after"]
    assert task_states(store, job_id)["each[0]"] == "succeeded"
    run(store, job_id, {4: 5})
    assert_finalized(store, job_id, "succeeded")
    assert store.result(job_id, "each") == [1, 5]

    cleared, ids = operate.clear(store, job_id, ["each"], by="ann")
    assert sorted(ids) == ["each", "each[0]", "each[1]"]
    run(store, job_id, {3: 7, 4: 8})
    assert store.result(job_id, "each") == [7, 8]

    with untouched(store), pytest.raises(Refused, match="not expanded twice"):
        operate.clear(store, job_id, ["src"], downstream=True, by="ann")


def test_clear_is_refused_while_a_kept_child_is_queued_for_it_would_start_without_input(
    store: Store,
) -> None:
    job_id, _ = submit_and_split(store, CHAIN)
    (a,) = claim(store, H1, n=1)
    store.complete(H1, [(job_id, 0, a.token, msgpack.packb(1))])
    assert task_states(store, job_id)["b"] == "queued"

    with untouched(store), pytest.raises(Refused, match="b, below a, is queued"):
        operate.clear(store, job_id, ["a"], by="ann")
    with untouched(store), pytest.raises(WrongState, match="b, below a, is queued"):
        store.clear(job_id, ("ann", ""), [0], [(0, [])])  # the script checks it too


def test_mark_a_failed_task_succeeded_decides_its_handlers_again(store: Store) -> None:
    """An error handler ran after the failure: with the task marked succeeded it is decided
    again by its rule (skipped), and a task below the failure runs."""
    spec = {"name": "rules", "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "alert", "task": "t.alert", "depends_on": ["a"], "trigger_rule": "one_failed"},
        {"id": "next", "task": "t.next", "depends_on": ["a"]},
    ]}  # fmt: skip
    job_id, _ = submit_and_split(store, spec)
    fail(store, job_id, 0)
    run(store, job_id)  # alert runs and succeeds
    assert task_states(store, job_id) == {
        "a": "failed", "alert": "succeeded", "next": "upstream_failed"
    }  # fmt: skip
    assert job_field(store, job_id, "state") == "failed"

    operate.mark(store, job_id, "a", "succeeded", by="bob")

    assert task_states(store, job_id) == {"a": "succeeded", "alert": "skipped", "next": "queued"}
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")
    assert (job_field(store, job_id, "nfailed"), job_field(store, job_id, "nskipped")) == ("0", "1")


def test_mark_and_clear_reach_every_task_of_a_wide_job_in_bounded_calls(store: Store) -> None:
    n = 3_000  # more tasks below than one call takes
    kids = [{"id": f"c{k}", "task": "t.c", "depends_on": ["r"]} for k in range(n)]
    spec = {"name": "wide", "tasks": [{"id": "r", "task": "t.r"}, *kids]}
    job_id, _ = submit_and_split(store, spec)
    fail(store, job_id, 0)
    admin._finish_cascade(store, job_id)

    operate.mark(store, job_id, "r", "succeeded", by="bob")

    admin._finish_cascade(store, job_id)
    assert sorted(set(task_states(store, job_id).values())) == ["queued", "succeeded"]
    assert job_field(store, job_id, "left") == str(n)
    run(store, job_id)
    assert_finalized(store, job_id, "succeeded")
    cleared, _ = operate.clear(store, job_id, ["r"], downstream=True, by="bob")
    assert cleared == n + 1 and job_field(store, job_id, "left") == str(n + 1)
