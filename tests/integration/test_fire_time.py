"""A job's fire time, end to end with real workers: a schedule's job carries the time it was
due (not when it ran), its tasks read it and get it through placeholders, a job submitted
by hand may give its own, and status, list and the dashboard show it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dashboard_harness import Dashboard
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter import schedules as sched
from jobcenter.config import Settings
from jobcenter.schedules import Scheduler
from jobcenter.storage.jobs.submit import INLINE_SPLIT_MAX
from jobcenter.storage.store import Store

NIGHTLY: dict[str, Any] = {
    "name": "nightly",
    "tasks": [
        {
            "id": "load",
            "task": "tasks_for_tests.fire_info",
            "args": [{"$fire_date": None}, {"$schedule": None}],
            "kwargs": {"hour": {"$fire_time": "%H:%M"}, "sid": {"$schedule_id": None}},
        }
    ],
}


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    s = Store.from_settings(Settings.from_env(redis_url=redis_url, namespace=namespace))
    yield s
    s.redis.close()


def finished(client: Client, job_id: str) -> dict[str, Any]:
    return wait_until(
        lambda: (st := client.status(job_id))["state"] in ("succeeded", "failed") and st,
        timeout=JOB_SECONDS,
        message=f"job {job_id} did not finish",
    )


def test_a_scheduled_task_sees_its_fire_time_not_its_run_time(
    store: Store, client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    workers.start(modules=["tasks_for_tests"])
    s = sched.add_schedule(store, NIGHTLY, cron="0 2 * * *", name="nightly")
    fire_ms = s.next_after(s.created_ms)
    assert fire_ms is not None  # tomorrow 02:00 UTC at the latest: not now
    (fire,) = Scheduler(store, "test-ticker").tick(fire_ms + 500)
    assert fire.job_id is not None

    status = finished(client, fire.job_id)

    assert status["state"] == "succeeded"
    day = datetime.fromtimestamp(fire_ms / 1000, UTC)
    (seen,) = scratch.events("fire")
    assert seen["fire_time"] == day.isoformat()
    assert seen["schedule_id"] == s.id
    assert seen["args"] == [day.date().isoformat(), "nightly"]
    assert seen["kwargs"] == {"hour": "02:00", "sid": s.id}
    assert status["fire_time"] == fire_ms / 1000 and status["schedule_id"] == s.id
    shown = cli("status", fire.job_id)
    assert f"fire time {day:%Y-%m-%d %H:%M:%S}.000Z  schedule {s.id}" in shown.stdout
    listed = cli("list", "--schedule", "nightly")
    assert f"{day:%Y-%m-%d %H:%M:%S}.000Z" in listed.stdout, listed.stdout
    assert cli("list", "--json").json()[0]["fire_time"] == fire_ms / 1000
    dashboard = Dashboard(client)
    page = dashboard.get(f"/jobs/{fire.job_id}").text
    assert re.search(rf'id="job-fire-time">{day:%Y-%m-%d %H:%M:%S}', page), page
    assert f"{day:%Y-%m-%d %H:%M:%S}.000Z" in dashboard.get("/jobs").text
    dashboard.close()


def test_a_job_submitted_by_hand_for_a_past_date_runs_for_it(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli, tmp_path: Path
) -> None:
    workers.start(modules=["tasks_for_tests"])
    spec = tmp_path / "nightly.json"
    spec.write_text(json.dumps(NIGHTLY))

    done = cli("submit", str(spec), "--fire-time", "2026-01-31T23:30:00-05:00", "--wait")

    assert done.code == 0, done.stderr
    (seen,) = scratch.events("fire")
    assert seen["fire_time"] == "2026-02-01T04:30:00+00:00"
    assert seen["schedule_id"] is None
    # the placeholders are filled in the zone given: the run is for Jan 31st, there
    assert seen["args"] == ["2026-01-31", None]
    assert seen["kwargs"] == {"hour": "23:30", "sid": None}


def test_a_spec_with_placeholders_needs_a_fire_time_and_names_a_bad_one(
    cli: Cli, tmp_path: Path, client: Client
) -> None:
    spec = tmp_path / "nightly.json"
    spec.write_text(json.dumps(NIGHTLY))
    typo = tmp_path / "typo.json"
    typo.write_text(
        json.dumps({**NIGHTLY, "tasks": [{**NIGHTLY["tasks"][0], "args": [{"$fire_dat": None}]}]})
    )

    missing = cli("submit", str(spec))
    bad_time = cli("submit", str(spec), "--fire-time", "last tuesday")
    unknown = cli("submit", str(typo), "--fire-time", "2026-01-31")

    assert missing.code == 2 and "uses a placeholder" in missing.stderr, missing.stderr
    assert "--fire-time" in missing.stderr
    assert (
        bad_time.code == 2 and "--fire-time: 'last tuesday' is not an ISO-8601" in bad_time.stderr
    )
    assert unknown.code == 2 and "unknown placeholder '$fire_dat'" in unknown.stderr, unknown.stderr
    assert client.list() == []


def test_a_job_a_leader_splits_gives_its_tasks_the_fire_time_too(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(modules=["tasks_for_tests"], concurrency=8)
    tasks: list[dict[str, Any]] = [
        {"id": f"r{n}", "task": "tasks_for_tests.record"} for n in range(INLINE_SPLIT_MAX)
    ]
    tasks.append(
        {"id": "last", "task": "tasks_for_tests.fire_info", "args": [{"$fire_date": None}]}
    )

    job_id = client.submit({"name": "big", "tasks": tasks}, fire_time="2026-02-03")
    status = finished(client, job_id)

    assert status["state"] == "succeeded"
    (seen,) = scratch.events("fire")
    assert (seen["task"], seen["fire_time"], seen["args"]) == (
        "last",
        "2026-02-03T00:00:00+00:00",
        ["2026-02-03"],
    )
