"""shard_lease.lua: a worker's lease on a segment of a shard (take, renew, expiry, give
back) and its fencing token; every refusal leaves Redis untouched."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from helpers import wait_until
from lua_helpers import H1, H2, H3, decode, untouched

from jobcenter.runtime.segments import Ownership
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT
from jobcenter.storage.keyspace.schema import code
from jobcenter.storage.server.connection import probe_client, time_ms
from jobcenter.storage.shard_leases import ShardLeases, pop_wake
from jobcenter.storage.store import Store

LONG_MS = 30_000
SHORT_MS = 100  # a lease a test waits out on purpose
SEG = (0, "default")
# The socket timeout of a client that must never block longer than its wait
QUICK_SOCKET_SECONDS = 1.0


@pytest.fixture
def leases(store: Store) -> ShardLeases:
    return ShardLeases(store.redis, store.keys, LONG_MS)


def call(store: Store, *args: Any, segment: tuple[int, str] = SEG) -> list[Any]:
    shard, name = segment
    keys = [store.keys.segment_owners(shard, name), store.keys.segment_epoch(shard)]
    return [int(x) for x in decode(store.scripts.run("shard_lease", keys, list(args)))]


def owners(leases: ShardLeases, segment: tuple[int, str] = SEG) -> dict[str, int]:
    return {lease.handler: lease.token for lease in leases.owners(*segment)}


def wait_expired(store: Store, deadline_ms: int) -> None:
    wait_until(lambda: time_ms(store.redis) > deadline_ms, timeout=5, message="lease not over")


def test_take_gives_a_token_and_a_deadline_one_lease_ahead_in_redis_time(store: Store) -> None:
    before = time_ms(store.redis)
    ok, token, deadline = call(store, "take", H1, LONG_MS)
    after = time_ms(store.redis)
    assert ok == code("OK") and token >= 1
    assert before + LONG_MS <= deadline <= after + LONG_MS
    (lease,) = ShardLeases(store.redis, store.keys, LONG_MS).owners(*SEG)
    assert (lease.handler, lease.token, lease.deadline_ms) == (H1, token, deadline)


def test_a_segment_is_shared_by_several_owners_each_with_its_own_token(
    store: Store, leases: ShardLeases
) -> None:
    first = leases.take(H1, [SEG])[SEG]
    second = leases.take(H2, [SEG])[SEG]
    assert second > first
    assert owners(leases) == {H1: first, H2: second}


def test_tokens_grow_across_the_segments_of_a_shard_but_keys_stay_in_its_slot(
    store: Store, leases: ShardLeases
) -> None:
    tokens = leases.take(H1, [(1, "default"), (1, LEADER_SEGMENT), (1, "other")])
    assert sorted(tokens.values()) == list(range(1, 4))
    tag = "{" + f"{store.settings.namespace}.1" + "}"
    assert tag in store.keys.segment_owners(1, "default") and tag in store.keys.segment_epoch(1)


def test_renew_moves_the_deadline_and_keeps_the_token(store: Store) -> None:
    _, token, first = call(store, "take", H1, SHORT_MS)
    ok, deadline = call(store, "renew", H1, LONG_MS, token)
    assert ok == code("OK") and deadline > first
    assert owners(ShardLeases(store.redis, store.keys, LONG_MS)) == {H1: token}


def test_renew_under_a_token_never_taken_is_refused_untouched(store: Store) -> None:
    _, token, _ = call(store, "take", H1, LONG_MS)
    with untouched(store):
        assert call(store, "renew", H1, LONG_MS, token + 1) == [code("STALE_TOKEN")]
        assert call(store, "renew", H2, LONG_MS, token) == [code("STALE_TOKEN")]


def test_an_expired_lease_is_not_renewed_and_the_next_take_drops_it(store: Store) -> None:
    _, token, deadline = call(store, "take", H1, SHORT_MS)
    wait_expired(store, deadline)
    with untouched(store):
        assert call(store, "renew", H1, LONG_MS, token) == [code("STALE_TOKEN")]
    _, other, _ = call(store, "take", H2, LONG_MS)
    assert owners(ShardLeases(store.redis, store.keys, LONG_MS)) == {H2: other}


def test_a_new_take_fences_off_the_old_token(store: Store, leases: ShardLeases) -> None:
    """A worker that lost its lease (expired while it was paused) takes it again: its old
    token neither renews nor gives back the new lease."""
    _, old, deadline = call(store, "take", H1, SHORT_MS)
    wait_expired(store, deadline)
    _, new, _ = call(store, "take", H1, LONG_MS)
    assert new > old
    with untouched(store):
        assert call(store, "renew", H1, LONG_MS, old) == [code("STALE_TOKEN")]
        assert call(store, "give_back", H1, 0, old, 0) == [code("ALREADY")]
    assert owners(leases) == {H1: new}


def test_a_second_take_by_the_same_handler_replaces_its_lease(
    store: Store, leases: ShardLeases
) -> None:
    """A take whose reply was lost is taken again: the handler still holds one lease."""
    leases.take(H1, [SEG])
    again = leases.take(H1, [SEG])[SEG]
    assert owners(leases) == {H1: again}


def test_give_back_drops_the_lease_and_a_repeat_changes_nothing(
    store: Store, leases: ShardLeases
) -> None:
    token = leases.take(H1, [SEG])[SEG]
    kept = leases.take(H2, [SEG])[SEG]
    assert call(store, "give_back", H1, 0, token, 0) == [code("OK")]
    assert owners(leases) == {H2: kept}
    with untouched(store):
        assert call(store, "give_back", H1, 0, token, 0) == [code("ALREADY")]


def test_a_hand_over_keeps_the_lease_of_the_last_live_owner(
    store: Store, leases: ShardLeases
) -> None:
    token = leases.take(H1, [SEG])[SEG]
    with untouched(store):
        assert call(store, "give_back", H1, 0, token, 1) == [code("LAST_OWNER")]
    assert leases.give_back(H1, {SEG: token}, hand_over=True) == set()
    other = leases.take(H2, [SEG])[SEG]
    assert leases.give_back(H1, {SEG: token}, hand_over=True) == {SEG}
    assert owners(leases) == {H2: other}


def test_a_hand_over_does_not_count_an_expired_owner(store: Store, leases: ShardLeases) -> None:
    token = leases.take(H1, [SEG])[SEG]
    _, _, deadline = call(store, "take", H2, SHORT_MS)
    wait_expired(store, deadline)
    with untouched(store):
        assert call(store, "give_back", H1, 0, token, 1) == [code("LAST_OWNER")]


def test_renew_reports_the_leases_lost_and_renews_the_others(
    store: Store, leases: ShardLeases
) -> None:
    kept = leases.take(H3, [SEG])[SEG]
    _, lost, deadline = call(store, "take", H3, SHORT_MS, segment=(1, "default"))
    wait_expired(store, deadline)
    assert leases.renew(H3, {SEG: kept, (1, "default"): lost}) == {(1, "default")}
    assert owners(leases) == {H3: kept}


@contextmanager
def renewal_loop(ownership: Ownership, store: Store) -> Iterator[None]:
    """`ownership`'s renewal loop runs in a thread for the block, and ends after it."""
    stopped = threading.Event()
    loop = threading.Thread(target=ownership.run, args=(stopped,), daemon=True)
    loop.start()
    try:
        yield
    finally:
        stopped.set()
        store.redis.rpush(store.keys.segments_wake(), 1)  # ends the loop's wait now
        loop.join(timeout=10)
    assert not loop.is_alive()


def _blocked_clients(store: Store) -> int:
    """Clients of this server blocked in a command (BLPOP here), from CLIENT LIST."""
    return sum("b" in c["flags"] for c in store.redis.client_list())


def test_a_leaving_workers_own_renewal_loop_passes_its_nudge_on(store: Store) -> None:
    """A stopping worker nudges the others to take its shards at once; its own renewal loop,
    still blocked on the same list, may pop that nudge first and must put it back."""
    ownership = Ownership(store, H1, ["default"], lambda taken: None)
    ownership.renew_round()
    ownership.peers = 1  # one other worker serves the segment: one nudge
    stopped = threading.Event()
    loop = threading.Thread(target=ownership.run, args=(stopped,), daemon=True)
    loop.start()
    wait_until(lambda: _blocked_clients(store) == 1, message="the renewal loop never waited")

    ownership.give_back_all()  # the loop is the only one waiting: it pops the nudge
    loop.join(timeout=10)

    assert not loop.is_alive()
    wake = store.keys.segments_wake()
    assert store.redis.blpop([wake], timeout=5) is not None, "the nudge was swallowed"
    stopped.set()


@pytest.mark.parametrize("seconds", [0.001, 0.0004, 0.0])
def test_a_wait_of_a_millisecond_or_less_ends_instead_of_blocking_for_ever(
    redis_url: str, store: Store, seconds: float
) -> None:
    """Redis 6.2 cuts a BLPOP timeout down to whole milliseconds and blocks for ever on 0:
    the renewal loop's last wait before a round, a sliver of a millisecond, hung until the
    socket timed out (5 s: the round ran that late and a lease lapsed)."""
    quick = probe_client(QUICK_SOCKET_SECONDS, redis_url)
    leases = ShardLeases(quick, store.keys, LONG_MS)
    assert leases.wait_for_changes(seconds) is False
    assert pop_wake(quick, [store.keys.wake(0, "default")], seconds) is None


def test_a_round_redis_refused_is_tried_again_after_a_pause_not_an_interval_later(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused round (here: the member list is not a zset) leaves the leases nearer their
    end: the next try comes after ERROR_PAUSE_SECONDS, well within the interval."""
    ownership = Ownership(store, H1, ["default"], lambda taken: None)
    ownership.renew_round()
    with renewal_loop(ownership, store):
        wait_until(lambda: _blocked_clients(store) == 1, message="the renewal loop never waited")
        members = store.keys.segment_members()
        store.redis.delete(members)
        store.redis.set(members, "not a zset")
        store.redis.rpush(store.keys.segments_wake(), 1)  # a round now, which Redis refuses
        wait_until(
            lambda: "shard leases:" in caplog.text, message="the refused round logged nothing"
        )
        store.redis.delete(members)

        wait_until(
            lambda: store.redis.zscore(members, f"default|{H1}") is not None,
            timeout=ownership.interval / 2,
            message="the refused round was not tried again within half an interval",
        )


def test_a_worker_that_missed_its_renewal_has_its_shards_taken_as_it_turns_silent(
    make_store: Callable[..., Store],
) -> None:
    """Worker two (no loop: killed after its last round) last spoke 12 s ago, past its
    renewal (every 10 s of a 30 s lease); it turns silent at 15 s. Worker one's loop runs its
    next round then, 3 s on, and takes its shard, not an interval (10 s) on: a dead owner's
    shards are taken half a lease after its last word, a third of a lease before its leases
    run out."""
    store = make_store(shards=2, segment_lease_seconds=30.0)
    one = Ownership(store, H1, ["default"], lambda taken: None)
    two = Ownership(store, H2, ["default"], lambda taken: None)
    one.renew_round()
    two.renew_round()
    one.renew_round()  # hands shard 1 over to worker two, which holds it
    assert (one.owned("default"), two.owned("default")) == ([0], [1])
    spoke_ms = time_ms(store.redis) - 12_000
    store.redis.zadd(store.keys.segment_members(), {f"default|{H2}": spoke_ms}, xx=True)
    one.renew_round()  # sees worker two past its renewal

    with renewal_loop(one, store):
        wait_until(
            lambda: one.owned("default") == [0, 1],
            timeout=one.interval / 2,
            message="worker two's shard was not taken as it turned silent",
        )
