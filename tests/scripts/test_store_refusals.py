"""Batches Redis refuses in part, and completions whose reply was lost: nothing a call that
ran did is lost when the rest is tried again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from lua_helpers import H1, H2, claim, submit_and_split

from jobcenter.storage.store import RefusedInPart, Store

PARENT_CHILD = {
    "name": "parent-child",
    "tasks": [{"id": "p", "task": "t.p"}, {"id": "c", "task": "t.c", "depends_on": ["p"]}],
}
SINGLE = {"name": "single", "tasks": [{"id": "s", "task": "t.s"}]}
P, C, S = 0, 1, 0


@contextmanager
def refusing(store: Store, job_id: str) -> Iterator[None]:
    """Every script call for `job_id` errors (its tasks hash is a string meanwhile)."""
    tasks = store.keys.job(job_id).tasks
    aside = tasks + ":aside"
    store.redis.rename(tasks, aside)
    store.redis.set(tasks, "not a hash")
    yield
    store.redis.delete(tasks)
    store.redis.rename(aside, tasks)


def test_a_batch_refused_in_part_keeps_what_the_calls_that_ran_did(store: Store) -> None:
    chain, _ = submit_and_split(store, PARENT_CHILD)
    single, _ = submit_and_split(store, SINGLE)
    started = {(t.job_id, t.index): t for t in claim(store, H1)}
    done = [(job_id, index, t.token) for (job_id, index), t in started.items()]

    with refusing(store, single), pytest.raises(RefusedInPart) as refused:
        store.complete(H1, done, take_queues=["default"], take_max=2)

    assert refused.value.codes == {(chain, P): 0}
    assert [(t.job_id, t.index, t.attempt) for t in refused.value.taken] == [(chain, C, 1)]
    codes, taken = store.complete(H1, [(single, S, started[(single, S)].token)])
    assert (codes, taken) == ({(single, S): 0}, [])


def test_a_give_back_refused_in_part_keeps_what_ran(store: Store) -> None:
    chain, _ = submit_and_split(store, PARENT_CHILD)
    single, _ = submit_and_split(store, SINGLE)
    started = {(t.job_id, t.index): t for t in claim(store, H1)}
    attempts = [(j, i, t.token, "t.x") for (j, i), t in started.items()]

    with refusing(store, single), pytest.raises(RefusedInPart) as refused:
        store.give_back(H1, attempts, 100, 1_000)

    assert refused.value.codes == {(chain, P): 0}
    assert store.give_back(H1, [a for a in attempts if a[0] == single], 100, 1_000) == {
        (single, S): 0
    }


def test_the_children_a_completion_took_are_found_after_its_reply_was_lost(store: Store) -> None:
    chain, _ = submit_and_split(store, PARENT_CHILD)
    (parent,) = claim(store, H1)
    codes, taken = store.complete(
        H1, [(chain, P, parent.token)], take_queues=["default"], take_max=1
    )
    assert codes == {(chain, P): 0} and [t.index for t in taken] == [C]
    # the reply was lost: the worker sends the completion again, and finds it done
    codes, again = store.complete(
        H1, [(chain, P, parent.token)], take_queues=["default"], take_max=1
    )
    assert codes == {(chain, P): 1} and again == []

    assert store.running_attempts(H1, chain) == taken
    assert store.running_attempts(H2, chain) == []  # not that handler's
