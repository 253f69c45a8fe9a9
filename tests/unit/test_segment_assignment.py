"""The rule that shares a segment's shards out among its live workers (runtime/segments.py
assign): every shard has an owner, every worker owns at least one, and the split is
balanced and the same whichever worker computes it."""

from __future__ import annotations

import random

import pytest

from jobcenter.runtime.segments import assign

SIZES = [(w, s) for w in range(1, 13) for s in range(1, 13)]


def split(workers: list[str], shards: int) -> dict[str, set[int]]:
    return {w: assign(shards, workers, w) for w in workers}


@pytest.mark.parametrize(("workers", "shards"), SIZES)
def test_every_shard_has_an_owner_and_every_worker_owns_one(workers: int, shards: int) -> None:
    names = [f"h{k:02d}" for k in range(workers)]
    owned = split(names, shards)
    assert set().union(*owned.values()) == set(range(shards))
    assert all(owned.values()), owned


@pytest.mark.parametrize(("workers", "shards"), SIZES)
def test_the_split_is_balanced(workers: int, shards: int) -> None:
    """Fewer workers than shards: one owner per shard, shards per worker differ by at most
    one. More: one shard per worker, owners per shard differ by at most one."""
    owned = split([f"h{k:02d}" for k in range(workers)], shards)
    per_worker = [len(s) for s in owned.values()]
    per_shard = [sum(shard in s for s in owned.values()) for shard in range(shards)]
    if workers <= shards:
        assert per_shard == [1] * shards
        assert max(per_worker) - min(per_worker) <= 1
    else:
        assert per_worker == [1] * workers
        assert max(per_shard) - min(per_shard) <= 1


def test_every_worker_computes_the_same_split_from_the_list_in_any_order() -> None:
    names = [f"handler-{k}" for k in range(5)]
    expected = split(names, 8)
    for seed in range(10):
        shuffled = names[:]
        random.Random(seed).shuffle(shuffled)
        assert split(shuffled, 8) == expected


def test_a_worker_missing_from_the_live_list_owns_nothing() -> None:
    assert assign(4, ["a", "b"], "c") == set()
