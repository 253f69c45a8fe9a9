"""Fixtures for the Lua transition tests: a Store on the session Redis, per-test namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.config import Settings
from jobcenter.storage.store import Store

# Long enough that no lease expires during a test that does not wait for it on purpose.
LONG_LEASE_SECONDS = 30.0
# Short enough that the fencing tests wait out a few leases in well under a second each.
SHORT_LEASE_SECONDS = 0.2


@pytest.fixture
def make_store(redis_url: str, namespace: str) -> Iterator[Callable[..., Store]]:
    """Build Stores on this test's namespace (each with its own connection pool)."""
    made: list[Store] = []

    def make(lease_seconds: float = LONG_LEASE_SECONDS, **overrides: Any) -> Store:
        settings = Settings(
            redis_url=redis_url, namespace=namespace, lease_seconds=lease_seconds, **overrides
        )
        store = Store.from_settings(settings)
        made.append(store)
        return store

    yield make
    for store in made:
        store.redis.close()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


@pytest.fixture
def short_store(make_store: Callable[..., Store]) -> Store:
    """A store whose leases last SHORT_LEASE_SECONDS."""
    return make_store(SHORT_LEASE_SECONDS)


@pytest.fixture
def leader_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job this test submits is split by the leader (publish_tasks, queue_roots), as a
    job larger than INLINE_SPLIT_MAX is, instead of by its submit script."""
    monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
