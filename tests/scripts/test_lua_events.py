"""The event stream: each transition appends exactly its events to its shard's stream (in the
same script), the stream stays near its cap, and JOBCENTER_EVENTS_MAXLEN=0 turns it off."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    claim,
    claim_by_index,
    complete_one,
    heartbeat_one,
    lease_expired,
    submit,
    submit_and_split,
    untouched,
)

from jobcenter.storage import admin
from jobcenter.storage.events import Cursor, Event, Events
from jobcenter.storage.store import Store

GRACE_MS = 200
WAIT_S = 5.0

# a and b are roots; c needs both; d needs c (seed 000's cascade in small)
DIAMOND = {
    "name": "events",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "retries": 2},
        {"id": "c", "task": "t.c", "depends_on": ["a", "b"]},
        {"id": "d", "task": "t.d", "depends_on": ["c"]},
    ],
}
A, B, C, D = 0, 1, 2, 3


class Stream:
    """Reads what the transitions appended since the last look."""

    def __init__(self, store: Store) -> None:
        self.events = Events(store)
        self.cursor: Cursor = self.events.latest()

    def new(self) -> list[Event]:
        return self.events.after(self.cursor)

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.task) for e in self.new()]


def test_submit_then_start_then_complete_append_their_events_in_order(store: Store) -> None:
    stream = Stream(store)
    job_id = submit(store, DIAMOND)
    assert stream.kinds() == [("submitted", None), ("queued", "a"), ("queued", "b")]

    entries = store.redis.xlen(store.keys.events(0))
    started = claim_by_index(store, H1)
    assert store.redis.xlen(store.keys.events(0)) == entries + 1  # a batch: one entry
    events = stream.new()
    assert [(e.kind, e.task, e.attempt, e.handler) for e in events] == [
        ("started", "a", 1, H1),
        ("started", "b", 1, H1),
    ]
    assert all(e.job == job_id for e in events)

    assert complete_one(store, H1, job_id, A, started[A].token) == 0
    assert stream.kinds() == [("succeeded", "a")]
    assert complete_one(store, H1, job_id, B, started[B].token) == 0
    assert stream.kinds() == [("succeeded", "b"), ("queued", "c")]

    # a repeated completion is a no-op: no second event
    with untouched(store):
        assert complete_one(store, H1, job_id, B, started[B].token) == 1

    (c,) = claim(store, H1)
    assert stream.kinds() == [("started", "c")]
    complete_one(store, H1, job_id, C, c.token)
    (d,) = claim(store, H1)
    stream.new()
    complete_one(store, H1, job_id, D, d.token)
    last = stream.new()
    assert [(e.kind, e.task, e.detail) for e in last] == [
        ("succeeded", "d", None),
        ("finalized", None, "succeeded"),
    ]


def test_a_child_taken_at_once_by_complete_is_started_without_a_queue_event(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    started = claim_by_index(store, H1)
    complete_one(store, H1, job_id, A, started[A].token)
    stream = Stream(store)
    token = started[B].token
    _, taken = store.complete(H1, [(job_id, B, token)], take_queues=["default"], take_max=1)
    assert [t.index for t in taken] == [C]
    assert [(e.kind, e.task, e.handler) for e in stream.new()] == [
        ("succeeded", "b", H1),
        ("started", "c", H1),
    ]


def test_a_failure_appends_retried_then_failed_and_the_cascade_in_order(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    started = claim_by_index(store, H1)
    stream = Stream(store)

    assert store.fail(H1, job_id, B, started[B].token, "boom\ntraceback", 0) == (0, "queued")
    (retried, queued) = stream.new()
    assert (retried.kind, retried.task, retried.attempt, retried.handler) == ("retried", "b", 1, H1)
    assert retried.error == "boom\ntraceback" and retried.detail == "0"
    assert (queued.kind, queued.task) == ("queued", "b")

    (b2,) = claim(store, H2)
    stream.new()
    assert store.fail(H2, job_id, B, b2.token, "fatal", -1) == (0, "failed")
    events = stream.new()
    assert [(e.kind, e.task) for e in events] == [
        ("failed", "b"),
        ("upstream_failed", "c"),
        ("upstream_failed", "d"),
    ]
    assert events[0].attempt == 2 and events[0].error == "fatal"
    assert events[1].error == "upstream task b failed"

    complete_one(store, H1, job_id, A, started[A].token)
    assert [(e.kind, e.detail) for e in stream.new()] == [
        ("succeeded", None),
        ("finalized", "failed"),
    ]


def test_a_retry_after_a_backoff_says_its_delay_and_a_short_error(store: Store) -> None:
    spec = {"name": "backoff", "tasks": [{"id": "a", "task": "t.a", "retries": 1}]}
    job_id, _ = submit_and_split(store, spec)
    (a,) = claim(store, H1)
    stream = Stream(store)
    assert store.fail(H1, job_id, A, a.token, "x" * 5_000, 60_000) == (0, "retry_wait")
    (retried,) = stream.new()
    assert (retried.kind, retried.detail) == ("retried", "60000")
    assert retried.error == "x" * 200  # short: the history keeps the whole error


def test_lease_expiry_appends_timed_out_resumed_retried_and_failed(short_store: Store) -> None:
    store = short_store
    spec = {"name": "lease", "tasks": [{"id": "a", "task": "t.a", "retries": 1}]}
    job_id, _ = submit_and_split(store, spec)
    (first,) = claim(store, H1)
    stream = Stream(store)

    def expire_when_due(outcome: str) -> None:
        wait_until(lambda: lease_expired(store, job_id, A), WAIT_S, message="lease never expired")
        assert store.expire([(job_id, A)], GRACE_MS) == {outcome: 1}

    expire_when_due("timed_out")
    assert [(e.kind, e.attempt, e.handler) for e in stream.new()] == [("timed_out", 1, H1)]
    assert heartbeat_one(store, H1, job_id, A, first.token) == 0
    assert [(e.kind, e.attempt) for e in stream.new()] == [("resumed", 1)]

    expire_when_due("timed_out")
    expire_when_due("retried")
    events = stream.new()
    assert [e.kind for e in events] == ["timed_out", "retried", "queued"]
    assert H1 in (events[1].error or "")

    claim(store, H2)
    expire_when_due("timed_out")
    expire_when_due("failed")
    assert [e.kind for e in stream.new()] == ["started", "timed_out", "failed", "finalized"]


def test_give_back_release_cancel_revive_repair_resubmit_delete_each_say_so(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    started = claim_by_index(store, H1)
    stream = Stream(store)

    assert store.give_back(H1, [(job_id, A, started[A].token, "t.a")], 1, 1) == {(job_id, A): 0}
    (given,) = stream.new()
    assert (given.kind, given.task, given.handler, given.detail) == ("given_back", "a", H1, "t.a")

    assert store.release(H1, [(job_id, B, started[B].token)]) == 1
    assert stream.kinds() == [("released", "b"), ("queued", "b")]

    # recovery's repairs: a lost queue entry put back ('requeue', rule 2)
    store.redis.delete(store.keys.queue(0, "default"))
    assert store.repair(job_id, "requeue", [B]) == 1
    assert [(e.kind, e.task, e.detail) for e in stream.new()] == [
        ("repaired", "b", "requeue"),
        ("queued", "b", None),
    ]
    assert store.resubmit(job_id, "continue")
    assert [(e.kind, e.detail) for e in stream.new()] == [("repaired", "resubmit_continue")]

    assert store.cancel_step(job_id, from_client=True) == (0, 0)
    events = stream.new()
    assert events[0].kind == "cancel" and events[0].detail == "cancel"
    assert sorted((e.kind, e.task) for e in events[1:-1]) == [
        ("cancelled", "a"),
        ("cancelled", "b"),
        ("cancelled", "c"),
        ("cancelled", "d"),
    ]
    assert (events[-1].kind, events[-1].detail) == ("finalized", "cancelled")

    admin.delete_job(store, job_id)
    assert [(e.kind, e.job) for e in stream.new()] == [("deleted", job_id)]


def test_revive_appends_revived_then_queued(store: Store) -> None:
    job_id, _ = submit_and_split(store, DIAMOND)
    started = claim_by_index(store, H1)
    complete_one(store, H1, job_id, A, started[A].token)
    store.redis.hset(store.keys.job(job_id).tasks, "m:1", 1)  # no retry left
    store.fail(H1, job_id, B, started[B].token, "boom", -1)
    stream = Stream(store)
    assert admin.retry_job(store, job_id) == 3
    kinds = stream.kinds()
    assert kinds.index(("revived", "b")) < kinds.index(("queued", "b"))
    # c and d: waiting again, revived in the same call
    assert sorted(kinds) == [("queued", "b"), ("revived", "b"), ("revived", "c"), ("revived", "d")]


def test_the_stream_stays_near_its_cap(make_store: Callable[..., Store]) -> None:
    store = make_store()
    capped = Store(store.redis, replace(store.settings, events_maxlen=100))
    node_entries = int(store.redis.config_get("stream-node-max-entries")["stream-node-max-entries"])
    tasks = [{"id": "r", "task": "t.x"}]
    tasks += [{"id": f"t{i}", "task": "t.x", "depends_on": ["r"]} for i in range(400)]
    for _ in range(3):  # a cancel writes an event per task: 1,200 entries and more
        job_id = submit(capped, {"name": "many", "tasks": tasks})
        assert capped.cancel_step(job_id, from_client=True) == (0, 0)
    length = store.redis.xlen(store.keys.events(0))
    assert 100 <= length <= 100 + node_entries, length  # ~: trimmed by whole stream nodes


def test_events_off_append_nothing(make_store: Callable[..., Store]) -> None:
    store = make_store()
    quiet = Store(store.redis, replace(store.settings, events_maxlen=0))
    job_id, _ = submit_and_split(quiet, DIAMOND)
    (a, _b) = claim(quiet, H1, 2)
    complete_one(quiet, H1, job_id, a.index, a.token)
    assert not store.redis.exists(store.keys.events(0))


def test_a_closed_gate_says_gate_wait_then_failed_past_its_give_up_time(store: Store) -> None:
    job_id, _ = submit_and_split(store, {"name": "g", "tasks": [{"id": "a", "task": "t"}]})
    (t,) = claim(store, H1)
    stream = Stream(store)
    codes = store.gate_wait(H1, [(job_id, t.index, t.token, "db", 0, 60_000)])
    assert codes == {(job_id, t.index): 0}
    (waited,) = stream.new()
    assert (waited.kind, waited.task, waited.handler, waited.detail) == ("gate_wait", "a", H1, "db")

    (t,) = claim(store, H1)  # its backoff was 0: due at once
    stream = Stream(store)
    assert store.gate_wait(H1, [(job_id, t.index, t.token, "db", 0, 0)]) == {(job_id, 0): 1}
    assert [e.kind for e in stream.new()] == ["failed", "finalized"]
