"""Wake-up tokens announce queued tasks: a release pushes one per task it queues (up to 32).
Completions take most of a burst, so tokens outlive the tasks they announced; a claim that
finds its queue empty drops the ones left (each would cost an idle worker another claim for
nothing, holding its free slots from a completion that could fill them)."""

from __future__ import annotations

from typing import Any

from lua_helpers import H1, H2, claim, submit_and_split

from jobcenter.storage.store import Store


def flat(n: int) -> dict[str, Any]:
    return {"name": "flat", "tasks": [{"id": f"t{i}", "task": "t.x"} for i in range(n)]}


def tokens(store: Store, queue: str = "default") -> int:
    return int(store.redis.llen(store.keys.wake(0, queue)))


def test_a_claim_for_nothing_drops_the_tokens_of_tasks_taken_already(store: Store) -> None:
    submit_and_split(store, flat(10))
    assert tokens(store) == 10  # one per task queued
    assert len(claim(store, H1, 100)) == 10
    assert tokens(store) == 10  # (a claim that takes tasks pays no more for the tokens)

    assert claim(store, H2, 100) == []

    assert tokens(store) == 0, "the next idle worker would claim again for nothing"


def test_a_claim_that_leaves_tasks_queued_keeps_the_tokens(store: Store) -> None:
    submit_and_split(store, flat(10))
    assert len(claim(store, H1, 4)) == 4
    assert tokens(store) >= 10, "six tasks are still queued"


def test_what_is_queued_after_a_claim_for_nothing_brings_its_own_tokens(store: Store) -> None:
    submit_and_split(store, flat(3))
    claim(store, H1, 100)
    claim(store, H2, 100)
    submit_and_split(store, flat(2))
    assert tokens(store) == 2
