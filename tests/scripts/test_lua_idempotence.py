"""Repeated reports of one attempt change nothing; each child is released exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from lua_helpers import (
    H1,
    H2,
    H3,
    NO_RETRY,
    assert_finalized,
    claim,
    claim_by_index,
    complete_argv,
    complete_one,
    history_of,
    job_field,
    queued_indexes,
    run_job_script,
    submit_and_split,
    task_field,
    task_states,
    untouched,
)

from jobcenter.storage.store import NO_RESULT, StartedTask, Store

DIAMOND = {
    "name": "diamond",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
        {"id": "c", "task": "t.c", "depends_on": ["a"]},
        {"id": "d", "task": "t.d", "depends_on": ["b", "c"]},
    ],
}
A, B, C, D = 0, 1, 2, 3
RACE_ROUNDS = 200


def test_a_second_completion_of_the_same_attempt_is_a_noop(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    (a,) = claim(store, H1)
    assert complete_one(store, H1, job_id, A, a.token) == 0
    assert sorted(queued_indexes(store, job_id)) == [B, C]
    claimed = claim_by_index(store, H2, n=1)  # b or c leaves the queue and runs
    assert len(claimed) == 1
    with untouched(store):  # not queued again, d's counter not decremented again
        assert complete_one(store, H1, job_id, A, a.token) == 1
    assert len(history_of(store, job_id, "a")) == 1


def test_one_batch_naming_the_same_attempt_twice_completes_it_once(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    (a,) = claim(store, H1)
    reply = run_job_script(
        store,
        "complete",
        job_id,
        complete_argv(H1, job_id, [A, a.token, NO_RESULT, "", A, a.token, NO_RESULT, ""]),
    )
    assert reply == [0, [0, 1], []]
    assert sorted(queued_indexes(store, job_id)) == [B, C]
    assert task_field(store, job_id, "d", B) == "0"
    assert job_field(store, job_id, "left") == "3"
    assert len(history_of(store, job_id, "a")) == 1


@pytest.mark.parametrize(
    ("delay_ms", "state"), [(NO_RETRY, "failed"), (60_000, "retry_wait")], ids=["final", "retry"]
)
def test_a_duplicate_fail_of_the_same_attempt_is_a_noop(
    store: Store, delay_ms: int, state: str
) -> None:
    spec = {
        "name": "dup-fail",
        "tasks": [
            {"id": "a", "task": "t.a", "retries": 1},
            {"id": "b", "task": "t.b", "depends_on": ["a"]},
        ],
    }
    job_id, _ = submit_and_split(store, spec)
    (a,) = claim(store, H1)
    assert store.fail(H1, job_id, A, a.token, "boom", delay_ms) == (0, state)
    with untouched(store):
        assert store.fail(H1, job_id, A, a.token, "boom", delay_ms) == (1, state)
        assert store.fail(H1, job_id, A, a.token, "boom", NO_RETRY) == (1, state)
        assert complete_one(store, H1, job_id, A, a.token) == -3


def test_a_failure_after_a_final_failure_does_not_cascade_twice(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    (a,) = claim(store, H1)
    assert store.fail(H1, job_id, A, a.token, "boom", NO_RETRY) == (0, "failed")
    assert task_states(store, job_id) == {
        "a": "failed",
        "b": "upstream_failed",
        "c": "upstream_failed",
        "d": "upstream_failed",
    }
    assert (job_field(store, job_id, "left"), job_field(store, job_id, "nfailed")) == ("0", "4")
    with untouched(store):
        assert store.fail(H1, job_id, A, a.token, "boom", NO_RETRY) == (1, "failed")


def test_a_duplicate_fail_after_an_immediate_retry_changes_nothing(store: Store) -> None:
    spec = {"name": "retry-now", "tasks": [{"id": "a", "task": "t.a", "retries": 1}]}
    job_id, _ = submit_and_split(store, spec)
    (a,) = claim(store, H1)
    assert store.fail(H1, job_id, A, a.token, "boom", 0) == (0, "queued")
    assert queued_indexes(store, job_id) == [A]
    with untouched(store):  # the attempt is over; its task waits in the queue once
        code, _ = store.fail(H1, job_id, A, a.token, "boom", 0)
        assert code != 0


# -- exactly-once release of a join: b and c complete at the same time --------------------


def _complete_in_one_pipeline(
    store: Store, job_id: str, b: tuple[str, int, str], c: tuple[str, int, str]
) -> list[int]:
    batch = store.scripts.batch()
    for handler, index, token in (b, c):
        run_job_script(
            store,
            "complete",
            job_id,
            complete_argv(handler, job_id, [index, token, NO_RESULT, ""]),
            batch=batch,
        )
    replies = batch.execute()
    return [int(reply[1][0]) for (reply,) in replies]


Completion = tuple[dict[tuple[str, int], int], list[StartedTask]]


@pytest.mark.parametrize("mode", ["one-pipeline", "racing-threads", "racing-threads-take"])
def test_a_join_whose_parents_complete_together_is_released_exactly_once(
    make_store: Callable[..., Store], mode: str
) -> None:
    store = make_store()
    stores = {H1: make_store(), H2: make_store()}
    take = mode == "racing-threads-take"
    barrier = threading.Barrier(2)

    def complete_racing(handler: str, job_id: str, index: int, token: str) -> Completion:
        barrier.wait(timeout=5)
        return stores[handler].complete(
            handler,
            [(job_id, index, token)],
            take_queues=["default"] if take else [],
            take_max=1 if take else 0,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(RACE_ROUNDS):
            job_id, _ = submit_and_split(store, DIAMOND)
            (a,) = claim(store, H3)
            assert complete_one(store, H3, job_id, A, a.token) == 0
            first = claim(store, H1, n=1)[0]
            second = claim(store, H2, n=1)[0]
            assert {first.index, second.index} == {B, C}
            b = (H1, first.index, first.token)
            c = (H2, second.index, second.token)
            taken_d: list[StartedTask] = []
            if mode == "one-pipeline":
                codes = _complete_in_one_pipeline(store, job_id, b, c)
            else:
                futures = [pool.submit(complete_racing, h, job_id, i, att) for h, i, att in (b, c)]
                codes = []
                for future in futures:
                    per_task, taken = future.result(timeout=10)
                    codes += list(per_task.values())
                    taken_d += taken
            assert codes == [0, 0]
            counter, queued, owner = _join_after_race(store, job_id)
            assert counter == 0  # decremented exactly once per parent
            assert job_field(store, job_id, "state") == "running"  # d has not ended yet
            if take:
                # exactly one completer took d to run at once; it never entered the queue
                assert [(t.index, t.attempt) for t in taken_d] == [(D, 1)]
                assert queued == []
                assert complete_one(store, owner or "", job_id, D, taken_d[0].token) == 0
            else:
                assert queued == [D]
                (d,) = claim(store, H3)
                assert (d.job_id, d.index, d.attempt) == (job_id, D, 1)
                assert complete_one(store, H3, job_id, D, d.token) == 0
            assert_finalized(store, job_id, "succeeded", snapshot_check=False)
            assert _attempts_in_history(store, job_id, D) == [1]
            assert store.redis.zcard(store.keys.queue(0, "default")) == 0


def _join_after_race(store: Store, job_id: str) -> tuple[int, list[int], str | None]:
    """d's remaining-deps counter, the job's queued indexes and d's handler, in one trip."""
    jk = store.keys.job(job_id)
    pipe = store.redis.pipeline(transaction=False)
    pipe.hget(jk.tasks, f"d:{D}")
    pipe.zrange(store.keys.queue(0, "default"), 0, -1)
    pipe.hget(jk.tasks, f"h:{D}")
    counter, members, owner = pipe.execute()
    queued = [int(m.split(b"|")[2]) for m in members if m.split(b"|")[1] == job_id.encode()]
    return int(counter), queued, None if owner is None else owner.decode()


def _attempts_in_history(store: Store, job_id: str, index: int) -> list[int]:
    """Attempts of one task in the job's history list (entry: index, attempt, state, ...)."""
    records = store.records(job_id)
    entries = records.history(0, -1)
    fields = [entry.decode().split("\t") for entry in entries]
    return [int(f[1]) for f in fields if f[0] == str(index)]
