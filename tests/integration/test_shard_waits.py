"""An idle loop's wait per owned shard (runtime/segments.py ShardWaits): each shard's
listener blocks on that shard's wake lists alone, a token on any owned shard ends the wait,
and none is lost between two waits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from jobcenter.config import Settings
from jobcenter.runtime.segments import ShardWaits
from jobcenter.storage.store import Store

HANDLER = "waiting-worker"
LONG_WAIT = 30.0  # a wait that must end by a token, long before this


LISTENERS: list[threading.Thread] = []


def spawn(loop: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=loop, name=name, daemon=True)
    LISTENERS.append(thread)
    return thread


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    store = Store.from_settings(Settings(redis_url=redis_url, namespace=namespace, shards=4))
    yield store
    store.redis.close()


@pytest.fixture
def waits(store: Store) -> Iterator[ShardWaits]:
    waits = ShardWaits(store, HANDLER, lambda s: [store.keys.wake(s, "q")], spawn, "test")
    yield waits
    waits.close()  # as a stopping worker does: listeners still blocked in Redis are poked
    store.poke(HANDLER, range(store.keys.shards), tokens=1)
    while LISTENERS:
        LISTENERS.pop().join()


def push_when_waiting(store: Store, waits: ShardWaits, shard: int) -> threading.Thread:
    """Push a token on `shard`'s wake list once the loop waits (as a released task does)."""

    def push() -> None:
        with waits.cond:
            waits.cond.wait_for(lambda: waits.waiting)
        store.redis.rpush(store.keys.wake(shard, "q"), 1)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("shard", [1, 3])
def test_a_token_on_any_owned_shard_ends_the_wait(
    store: Store, waits: ShardWaits, shard: int
) -> None:
    waits.listen_to([1, 3])
    pusher = push_when_waiting(store, waits, shard)
    assert waits.wait(LONG_WAIT) == {shard}
    pusher.join()


def test_a_shard_not_owned_is_not_listened_to(store: Store, waits: ShardWaits) -> None:
    waits.listen_to([1])
    store.redis.rpush(store.keys.wake(2, "q"), 1)
    assert waits.wait(0.2) == set()
    assert store.redis.llen(store.keys.wake(2, "q")) == 1


def test_a_shard_just_taken_rings_at_once(store: Store, waits: ShardWaits) -> None:
    """Its tasks may be waiting already: the loop claims there without a token."""
    waits.listen_to([0])
    waits.listen_to([0, 2], ring=[2])
    assert waits.wait(LONG_WAIT) == {2}


def test_a_token_between_two_waits_is_not_lost(store: Store, waits: ShardWaits) -> None:
    """A token that comes while the loop is busy (between waits) ends its next wait at
    once, whether the listener popped it meanwhile (the ring is kept) or not."""
    waits.listen_to([0])
    assert waits.wait(0.05) == set()
    store.redis.rpush(store.keys.wake(0, "q"), 1)
    assert waits.wait(LONG_WAIT) == {0}


def test_a_closed_wait_returns_at_once(waits: ShardWaits) -> None:
    waits.listen_to([0])
    waits.close()
    assert waits.wait(LONG_WAIT) == set()
    assert waits.shards == []
