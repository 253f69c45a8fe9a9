"""The schedule transitions (schedule_add, schedule_save, schedule_remove) called by hand:
what each writes, and that each refusal leaves Redis exactly as it was."""

from __future__ import annotations

from typing import Any

from lua_helpers import decode, snapshot, untouched

from jobcenter import schedules as sched
from jobcenter.schedules import Schedule, ScheduleState
from jobcenter.storage.keyspace.schema import code
from jobcenter.storage.store import Store

SPEC: dict[str, Any] = {"name": "report", "tasks": [{"id": "a", "task": "t.a"}]}
MINUTE = 60_000
KEPT = 3  # fire records kept, small so a test sees the list trimmed
RETENTION_MS = 60_000


def add(store: Store, name: str | None = None) -> Schedule:
    return sched.add_schedule(store, SPEC, every="PT1M", name=name)


def add_call(store: Store, schedule_id: str, name: str | None, due: int | str = 5_000) -> Any:
    state = ScheduleState(next=5_000)
    args = [schedule_id, 1_000, due, "def", b"definition", *state.fields()]
    keys = store.keys.schedule_keys(schedule_id, name)
    return decode(store.scripts.run("schedule_add", keys, args))


def save_call(
    store: Store,
    schedule: Schedule,
    revision: int,
    state: ScheduleState,
    *,
    due: int | str = "",
    retention: int | str = "",
    records: tuple[bytes, ...] = (),
) -> Any:
    args = [schedule.id, revision, due, retention, KEPT, len(records), *records, *state.fields()]
    keys = store.keys.schedule_keys(schedule.id, schedule.name)
    return decode(store.scripts.run("schedule_save", keys, args))


def remove_call(store: Store, schedule_id: str, name: str | None) -> Any:
    keys = store.keys.schedule_keys(schedule_id, name)
    return decode(store.scripts.run("schedule_remove", keys, [schedule_id]))


def fields(store: Store, schedule_id: str) -> dict[str, str]:
    raw = store.redis.hgetall(store.keys.schedule(schedule_id))
    return {decode(k): decode(v) for k, v in raw.items() if k != b"def"}


def records(store: Store, schedule_id: str) -> list[str]:
    return [decode(r) for r in store.redis.lrange(store.keys.schedule_fires(schedule_id), 0, -1)]


# -- schedule_add ----------------------------------------------------------------------------


def test_add_stores_the_definition_first_state_indexes_and_name(store: Store) -> None:
    assert add_call(store, "s1", "etl") == [0]

    keys = store.keys
    assert store.redis.hget(keys.schedule("s1"), "def") == b"definition"
    assert fields(store, "s1") == {"rev": "1", "paused": "0", "next": "5000"} | {
        k: "0" for k in ("fires", "skipped", "missed", "failed")
    }
    assert store.redis.zscore(keys.schedules(), "s1") == 1_000
    assert store.redis.zscore(keys.schedules_due(), "s1") == 5_000
    assert store.redis.get(keys.schedule_name("etl")) == b"s1"
    assert all(ttl == -1 for ttl in (store.redis.pttl(k) for k in snapshot(store)))


def test_add_without_a_name_or_a_due_time_writes_only_the_hash_and_index(store: Store) -> None:
    before = set(snapshot(store))  # the namespace's shard count, stored at first use
    assert add_call(store, "s1", None, due="") == [0]

    keys = store.keys
    assert set(snapshot(store)) - before == {keys.schedule("s1"), keys.schedules()}


def test_add_with_a_taken_name_names_its_holder_and_changes_nothing(store: Store) -> None:
    holder = add(store, "etl")

    with untouched(store):
        assert add_call(store, "s2", "etl") == [code("NAME_TAKEN"), holder.id]


# -- schedule_save ---------------------------------------------------------------------------


def test_save_writes_the_state_bumps_the_revision_and_keeps_the_newest_records(
    store: Store,
) -> None:
    s = add(store)
    first = ScheduleState(next=s.created_ms + 2 * MINUTE, pending=s.created_ms + MINUTE)
    assert save_call(store, s, 1, first, due=7, records=(b"r1", b"r2")) == [0]
    second = ScheduleState(next=s.created_ms + 2 * MINUTE, last_job="J1", fires=1)

    assert save_call(store, s, 2, second, due=9, records=(b"r3", b"r4")) == [0]

    assert "pending" not in fields(store, s.id)  # '' clears a field
    read = sched.read_schedule(store, s.id)
    assert read is not None and read[1:] == (second, 3)
    assert records(store, s.id) == ["r4", "r3", "r2"]  # newest first, KEPT of them
    assert store.redis.zscore(store.keys.schedules_due(), s.id) == 9
    assert store.redis.pttl(store.keys.schedule(s.id)) == -1


def test_save_without_a_due_time_drops_the_schedule_from_the_due_index(store: Store) -> None:
    s = add(store)

    assert save_call(store, s, 1, ScheduleState(next=1, paused=True)) == [0]

    assert store.redis.zscore(store.keys.schedules_due(), s.id) is None
    assert fields(store, s.id)["paused"] == "1"


def test_save_of_a_done_schedule_puts_it_and_its_name_on_retention(store: Store) -> None:
    s = add(store, "once")

    assert save_call(store, s, 1, ScheduleState(), retention=RETENTION_MS, records=(b"r",)) == [0]

    keys = store.keys
    for key in (keys.schedule(s.id), keys.schedule_fires(s.id), keys.schedule_name("once")):
        assert 0 < store.redis.pttl(key) <= RETENTION_MS, key
    assert store.redis.pttl(keys.schedules()) == -1


def test_save_leaves_a_name_held_by_another_schedule_alone(store: Store) -> None:
    s = add(store, "once")
    store.redis.set(store.keys.schedule_name("once"), "someone-else")

    assert save_call(store, s, 1, ScheduleState(), retention=RETENTION_MS) == [0]

    assert store.redis.pttl(store.keys.schedule_name("once")) == -1


def test_save_at_a_stale_revision_changes_nothing(store: Store) -> None:
    """A tick's decision read before a pause landed is refused: the ticker reads again."""
    s = add(store, "etl")
    read_by_ticker = sched.read_schedule(store, s.id)
    assert read_by_ticker is not None
    _, state, revision = read_by_ticker
    sched.pause_schedule(store, s.id)
    decided = ScheduleState(next=s.created_ms + 2 * MINUTE, pending=s.created_ms + MINUTE)

    with untouched(store):
        assert save_call(store, s, revision, decided, due=1, records=(b"r",)) == [code("CHANGED")]
        assert save_call(store, s, revision + 5, decided, due=1) == [code("CHANGED")]


def test_save_of_a_schedule_that_is_gone_changes_nothing(store: Store) -> None:
    """A confirmation after a remove does not write half a schedule back."""
    s = add(store, "etl")
    sched.remove_schedule(store, s.id)

    with untouched(store):
        assert save_call(store, s, 1, ScheduleState(fires=1), due=1, records=(b"r",)) == [
            code("SCHEDULE_GONE")
        ]
        assert save_call(store, s, 0, ScheduleState(), retention=RETENTION_MS) == [
            code("SCHEDULE_GONE")
        ]


# -- schedule_remove -------------------------------------------------------------------------


def test_remove_deletes_the_schedule_records_index_entries_and_name(store: Store) -> None:
    other = add(store, "other")
    s = add(store, "etl")
    save_call(store, s, 1, ScheduleState(next=1), due=1, records=(b"r",))
    keys = store.keys
    gone = {keys.schedule(s.id), keys.schedule_fires(s.id), keys.schedule_name("etl")}
    indexes = {keys.schedules(), keys.schedules_due()}
    before = snapshot(store)
    assert gone | indexes <= set(before)

    assert remove_call(store, s.id, "etl") == [0]

    after = snapshot(store)
    assert not gone & set(after)
    for index in indexes:
        assert store.redis.zrange(index, 0, -1) == [other.id.encode()]
    rest = set(before) - gone - indexes
    assert {k: after[k] for k in rest} == {k: before[k] for k in rest}


def test_remove_leaves_a_name_held_by_another_schedule_alone(store: Store) -> None:
    s = add(store, "etl")
    store.redis.set(store.keys.schedule_name("etl"), "someone-else")

    assert remove_call(store, s.id, "etl") == [0]

    assert store.redis.get(store.keys.schedule_name("etl")) == b"someone-else"


def test_remove_of_a_schedule_that_is_gone_changes_nothing(store: Store) -> None:
    s = add(store, "etl")
    assert remove_call(store, s.id, "etl") == [0]
    add(store, "etl")  # the name is someone else's now

    with untouched(store):
        assert remove_call(store, s.id, "etl") == [code("SCHEDULE_GONE")]
