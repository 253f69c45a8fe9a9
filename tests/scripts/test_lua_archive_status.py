"""archive_status.lua: the dashboard's archive warning follows the outcomes of archive writes
in the order they were seen, whatever order the processes that saw them report in."""

from __future__ import annotations

from lua_helpers import untouched

from jobcenter.storage.store import Store

REFUSED = "OperationalError: connection refused"


def test_a_failure_is_the_warning_until_a_write_seen_later_works(store: Store) -> None:
    assert store.archive_status() is None
    assert store.archive_outcome(1_000, REFUSED) is True
    assert store.archive_status() == (REFUSED, 1_000)
    assert store.archive_outcome(2_000) is True
    assert store.archive_status() is None


def test_a_failure_reported_after_a_later_success_brings_no_warning_back(store: Store) -> None:
    # a process whose write was refused while the database was down reports after another
    # process's write, seen later, worked
    store.archive_outcome(2_000)
    with untouched(store):
        assert store.archive_outcome(1_000, REFUSED) is False
    assert store.archive_status() is None


def test_a_success_reported_after_a_later_failure_keeps_the_warning(store: Store) -> None:
    store.archive_outcome(3_000, REFUSED)
    with untouched(store):
        assert store.archive_outcome(2_000) is False
    assert store.archive_status() == (REFUSED, 3_000)


def test_the_newest_of_two_failures_is_the_warning(store: Store) -> None:
    store.archive_outcome(3_000, "TimeoutError: too slow")
    store.archive_outcome(2_000, REFUSED)
    assert store.archive_status() == ("TimeoutError: too slow", 3_000)
    store.archive_outcome(4_000, REFUSED)
    assert store.archive_status() == (REFUSED, 4_000)
