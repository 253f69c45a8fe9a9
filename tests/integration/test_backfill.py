"""Backfill with real workers and a real `jobcenter backfill` process: one run per fire time
in the window, oldest first, never more than --max-running unfinished (read from Redis as
it runs), each run with its own date; idempotent per fire, also after a kill -9 half way;
--rerun-failed runs only the failed fires again."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from harness import Cli
from helpers import wait_until
from integration_harness import Scratch, Workers
from tasks_for_tests import scratch_key

from jobcenter import Client
from jobcenter import schedules as sched
from jobcenter.config import Settings
from jobcenter.schedules import Scheduler
from jobcenter.schedules.backfill import backfill
from jobcenter.storage.store import Store

NIGHTLY: dict[str, Any] = {
    "name": "nightly",
    "tasks": [
        {
            "id": "load",
            "task": "tasks_for_tests.fire_info",
            "args": [{"$fire_date": None}],
            "kwargs": {"gate": {"$fire_date": None}},  # each night's run waits for its gate
        }
    ],
}
BACKFILL_SECONDS = 120.0
UNFINISHED = ("pending", "running")


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    s = Store.from_settings(Settings.from_env(redis_url=redis_url, namespace=namespace))
    yield s
    s.redis.close()


def nights(first: str, count: int) -> list[str]:
    day = datetime.fromisoformat(first)
    return [(day + timedelta(days=n)).date().isoformat() for n in range(count)]


def runs(store: Store, schedule_id: str) -> list[dict[str, Any]]:
    """The schedule's jobs, oldest first, as Redis has them now."""
    return sorted(store.list_jobs(schedule_id=schedule_id, limit=10_000), key=lambda r: r["id"])


class Watch:
    """Drives a backfill's runs from Redis as it goes: opens the gate of each run that has
    started (oldest first) once `hold` runs are blocked, or once every run was submitted,
    and checks at each poll that no more than `most` runs are unfinished."""

    def __init__(self, store: Store, scratch: Scratch, schedule_id: str, most: int) -> None:
        self.store, self.scratch, self.schedule_id, self.most = store, scratch, schedule_id, most
        self.opened: set[str] = set()
        self.peak = 0

    def poll(self, total: int, proc: subprocess.Popen[str] | None, hold: int) -> bool:
        jobs = runs(self.store, self.schedule_id)
        unfinished = [j for j in jobs if j["state"] in UNFINISHED]
        assert len(unfinished) <= self.most, f"{len(unfinished)} runs unfinished at once"
        self.peak = max(self.peak, len(unfinished))
        blocked = sorted({e["gate"] for e in self.scratch.events("started")} - self.opened)
        if blocked and (len(blocked) >= hold or len(jobs) == total):
            self.scratch.open_gate(blocked[0])
            self.opened.add(blocked[0])
        return len(jobs) == total and not unfinished and (proc is None or proc.poll() is not None)


def add_nightly(store: Store) -> str:
    return sched.add_schedule(store, NIGHTLY, cron="0 2 * * *", name="nightly").id


def test_a_backfill_of_30_nights_runs_30_jobs_each_for_its_night_at_most_3_at_a_time(
    store: Store, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    workers.start(modules=["tasks_for_tests"], concurrency=8)  # room for more than 3
    schedule_id = add_nightly(store)
    watch = Watch(store, scratch, schedule_id, most=3)

    proc = cli.start(
        "backfill", "nightly", "--from", "2026-10-01", "--to", "2026-10-31", "--max-running", "3"
    )
    wait_until(lambda: watch.poll(30, proc, hold=3), timeout=BACKFILL_SECONDS, interval=0.02)
    done = cli.finish(proc)

    assert done.code == 0, done.stderr
    assert watch.peak == 3
    jobs = runs(store, schedule_id)
    days = nights("2026-10-01", 30)
    # one job per night, submitted oldest first, each for its night at 02:00 UTC
    assert [j["fire_time"] for j in jobs] == [
        datetime.fromisoformat(f"{d}T02:00:00+00:00").timestamp() for d in days
    ]
    assert {j["state"] for j in jobs} == {"succeeded"}
    seen = {e["job"]: e for e in scratch.events("fire")}
    assert [seen[j["id"]]["args"] for j in jobs] == [[d] for d in days]
    assert [seen[j["id"]]["fire_time"] for j in jobs] == [f"{d}T02:00:00+00:00" for d in days]
    lines = done.stdout.splitlines()
    assert len([line for line in lines if " submitted " in line]) == 30, done.stdout


def test_a_backfill_killed_half_way_and_run_again_submits_only_what_is_missing(
    store: Store, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    workers.start(modules=["tasks_for_tests"], concurrency=8)
    schedule_id = add_nightly(store)
    watch = Watch(store, scratch, schedule_id, most=2)
    args = ("backfill", "nightly", "--from", "2026-10-01", "--to", "2026-10-11")

    first = cli.start(*args, "--max-running", "2")
    wait_until(
        lambda: watch.poll(10, None, hold=2) or len(runs(store, schedule_id)) >= 4,
        timeout=BACKFILL_SECONDS,
        interval=0.02,
    )
    first.kill()  # SIGKILL: no clean-up of any kind
    first.wait()
    before = {j["fire_time"]: j["id"] for j in runs(store, schedule_id)}
    assert 4 <= len(before) < 10

    again = cli.start(*args, "--max-running", "2", "--wait", "--json")
    wait_until(lambda: watch.poll(10, again, hold=2), timeout=BACKFILL_SECONDS, interval=0.02)
    done = cli.finish(again)

    assert done.code == 0, done.stderr
    jobs = runs(store, schedule_id)
    assert len(jobs) == 10 and len({j["fire_time"] for j in jobs}) == 10
    assert {j["fire_time"]: j["id"] for j in jobs if j["fire_time"] in before} == before
    outcomes = Counter(json.loads(line)["outcome"] for line in done.stdout.splitlines())
    assert outcomes["submitted"] == 10 - len(before)
    assert outcomes["kept"] + outcomes["running"] == len(before)
    assert {j["state"] for j in jobs} == {"succeeded"}
    assert sorted(e["args"][0] for e in scratch.events("fire")) == nights("2026-10-01", 10)


def test_rerun_failed_runs_only_the_failed_fires_again_in_place(
    store: Store, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    workers.start(modules=["tasks_for_tests"], concurrency=8)
    schedule_id = add_nightly(store)
    scratch.redis.set(scratch_key(scratch.namespace, "gate-all"), 1)  # no run waits
    for day in ("2026-10-02", "2026-10-04"):
        scratch.redis.set(scratch_key(scratch.namespace, f"fail:{day}"), 1)
    args = ("backfill", "nightly", "--from", "2026-10-01", "--to", "2026-10-06", "--wait")

    first = cli(*args, "--max-running", "5")
    for day in ("2026-10-02", "2026-10-04"):
        scratch.redis.delete(scratch_key(scratch.namespace, f"fail:{day}"))
    ran_before = Counter(e["args"][0] for e in scratch.events("fire"))
    plain = cli(*args, "--json")
    rerun = cli(*args, "--rerun-failed", "--json")

    assert first.code == 1, first.stdout + first.stderr  # two runs failed
    assert plain.code == 0 and {json.loads(x)["outcome"] for x in plain.stdout.splitlines()} == {
        "kept"
    }
    assert rerun.code == 0, rerun.stderr
    lines = [json.loads(x) for x in rerun.stdout.splitlines()]
    retried = sorted(x["fire_time"][:10] for x in lines if x["outcome"] == "retried")
    assert retried == ["2026-10-02", "2026-10-04"]
    assert Counter(x["outcome"] for x in lines) == {"kept": 3, "retried": 2, "ended": 2}
    jobs = runs(store, schedule_id)
    assert len(jobs) == 5 and {j["state"] for j in jobs} == {"succeeded"}
    ran = Counter(e["args"][0] for e in scratch.events("fire")) - ran_before
    assert ran == {"2026-10-02": 1, "2026-10-04": 1}


def test_a_fire_the_ticker_ran_is_kept_and_rerun_all_makes_new_runs_schedule_run_names(
    store: Store, client: Client
) -> None:
    s = sched.add_schedule(store, {**NIGHTLY, "tasks": [{"id": "a", "task": "t.a"}]}, every="1h")
    (ticked,) = Scheduler(store, "test-ticker").tick(s.created_ms + 3_600_000 + 500)
    start = datetime.fromtimestamp(s.created_ms / 1000, UTC)

    first = list(backfill(store, s.id, start, start + timedelta(hours=3), max_running=10))
    again = list(backfill(store, s.id, start, start + timedelta(hours=3), max_running=10))
    rerun = list(
        backfill(store, s.id, start, start + timedelta(hours=3), max_running=10, rerun="all")
    )

    assert sorted((x.fire_ms - s.created_ms, x.outcome) for x in first) == [
        (0, "submitted"),
        (3_600_000, "running"),  # the ticker's run, not submitted again
        (7_200_000, "submitted"),
    ]
    assert [x.job_id for x in first if x.outcome == "running"] == [ticked.job_id]
    assert {x.outcome for x in again} == {"running"}
    assert [x.outcome for x in rerun] == ["running"] * 3  # unfinished runs are not rerun
    assert store.schedule_run(s.id, s.created_ms + 3_600_000) == ticked.job_id

    for x in first:
        client.cancel(x.job_id)
    for _ in range(2):  # a rerun of a rerun: each gets a key (and a job) of its own
        rerun = list(
            backfill(store, s.id, start, start + timedelta(hours=3), max_running=10, rerun="all")
        )
        assert [x.outcome for x in rerun] == ["rerun"] * 3
        for x in rerun:
            assert store.schedule_run(s.id, x.fire_ms) == x.job_id
            client.cancel(x.job_id)
    assert len(store.list_jobs(schedule_id=s.id)) == 9


def test_backfill_refuses_a_bad_window_naming_it(store: Store, cli: Cli) -> None:
    add_nightly(store)

    backwards = cli("backfill", "nightly", "--from", "2026-10-05", "--to", "2026-10-01")
    garbled = cli("backfill", "nightly", "--from", "last week", "--to", "2026-10-01")
    huge = cli("backfill", "nightly", "--from", "1990-01-01", "--to", "2026-10-01")
    unknown = cli("backfill", "weekly", "--from", "2026-10-01", "--to", "2026-10-05")

    assert backwards.code == 2 and "must come after --from" in backwards.stderr
    assert garbled.code == 2 and "--from: 'last week' is not an ISO-8601" in garbled.stderr
    assert huge.code == 2 and "fires more than 10000 times" in huge.stderr
    assert unknown.code == 2 and "no schedule 'weekly'" in unknown.stderr, unknown.stderr
    assert store.list_jobs() == []


def test_on_a_terminal_a_backfill_shows_a_bar_of_the_fires(store: Store, cli: Cli) -> None:
    schedule_id = add_nightly(store)
    args = ["backfill", "nightly", "--from", "2026-10-01", "--to", "2026-10-04"]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcenter", *args, "--max-running", "5"],
        env=cli.env(),
        cwd=cli.cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    _, stderr = proc.communicate(timeout=60)

    assert proc.returncode == 0, stderr
    assert b"fires" in shown and b"100%" in shown, shown
    assert len(runs(store, schedule_id)) == 3
