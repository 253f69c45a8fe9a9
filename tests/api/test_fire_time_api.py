"""A job's fire time through the HTTP API: given at submit, shown by a job's status and the
list, and handed to an executor with each of its attempts (the worker protocol)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from api_harness import ApiServer

from jobcenter import schedules as sched
from jobcenter.schedules import Scheduler

STEP = "jobcenter.demo.step"
SPEC = {"name": "nightly", "tasks": [{"id": "a", "task": STEP, "args": [{"$fire_date": None}]}]}
FIRE = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def test_a_fire_time_given_at_submit_shows_in_status_list_and_the_claim(api: ApiServer) -> None:
    submit, work, read = api.token("submit"), api.token("work"), api.token("read")

    reply = api.call(
        "POST", "/jobs", submit, json=SPEC, params={"fire_time": "2026-03-01T02:00:00Z"}
    )
    assert reply.status_code == 201, reply.text
    job_id = reply.json()["id"]
    status = api.call("GET", f"/jobs/{job_id}", read).json()
    listed = api.call("GET", "/jobs", read).json()["jobs"]
    claimed = api.call("POST", "/worker/claim", work, json={"tasks": [STEP]}).json()

    assert (status["fire_time"], status["schedule_id"]) == (FIRE.timestamp(), None)
    assert [(j["id"], j["fire_time"]) for j in listed] == [(job_id, FIRE.timestamp())]
    (attempt,) = claimed["attempts"]
    assert attempt["args"] == ["2026-03-01"]
    assert (attempt["fire_time"], attempt["schedule_id"]) == (FIRE.timestamp(), None)


def test_a_scheduled_attempt_carries_its_schedule_and_fire_time(api: ApiServer) -> None:
    work = api.token("work")
    store = api.client.store
    s = sched.add_schedule(store, SPEC, every="1h")
    (fire,) = Scheduler(store, "test-ticker").tick(s.created_ms + 3_600_000)

    (attempt,) = api.call("POST", "/worker/claim", work, json={"tasks": [STEP]}).json()["attempts"]

    assert attempt["job_id"] == fire.job_id
    assert (attempt["fire_time"], attempt["schedule_id"]) == (fire.fire_ms / 1000, s.id)


def test_a_bad_fire_time_is_refused_naming_it(api: ApiServer) -> None:
    reply = api.call("POST", "/jobs", api.token("submit"), json=SPEC, params={"fire_time": "soon"})

    assert reply.status_code == 422, reply.text
    assert "fire_time: 'soon' is not an ISO-8601" in reply.text


def test_a_backfill_through_the_api_streams_a_line_per_run_and_is_idempotent(
    api: ApiServer,
) -> None:
    operator, read = api.token("operate"), api.token("read")
    store = api.client.store
    s = sched.add_schedule(store, SPEC, every="1h", name="hourly")
    start = datetime.fromtimestamp(s.created_ms / 1000, UTC)
    body = {"from": start.isoformat(), "to": (start + timedelta(hours=3)).isoformat()}

    first = api.call("POST", "/schedules/hourly/backfill", operator, json=body | {"max_running": 5})
    again = api.call("POST", "/schedules/hourly/backfill", operator, json=body | {"max_running": 5})
    backwards = api.call(
        "POST",
        "/schedules/hourly/backfill",
        operator,
        json={"from": body["to"], "to": body["from"]},
    )

    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(x) for x in first.text.splitlines()]
    assert [x["outcome"] for x in lines] == ["submitted"] * 3
    assert [x["fire_ms"] - s.created_ms for x in lines] == [0, 3_600_000, 7_200_000]
    listed = api.call("GET", "/jobs", read, params={"schedule": s.id}).json()["jobs"]
    assert sorted(j["fire_time"] for j in listed) == [x["fire_ms"] / 1000 for x in lines]
    assert [json.loads(x)["outcome"] for x in again.text.splitlines()] == ["running"] * 3
    assert backwards.status_code == 422 and "must come after" in backwards.text
