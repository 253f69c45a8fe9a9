"""What a newcomer met in the dashboard, over HTTP against a real uvicorn, the real test Redis
and real workers: a finished job's picture and task panel (its edges, map instances, task
names and arguments after the job was compacted), a Redis outage (a page that says so, and
pages that come back with Redis), and a schedule's "run now"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dashboard_harness import TOKEN, Dashboard, every_route
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Workers

from jobcenter import Client, schedules
from jobcenter.storage.server.embedded import RedisServer


@pytest.fixture
def dashboard(client: Client) -> Iterator[Dashboard]:
    d = Dashboard(client)
    yield d
    d.close()


def compacted(client: Client, job_id: str) -> bool:
    """The job's tasks and history are one packed record now (its leader compacted it)."""
    store = client.store
    return store.redis.hget(store.keys.job(job_id).job, "packed") is not None


def drawn_edges(graph: dict[str, Any]) -> set[tuple[str, str]]:
    ids = graph["ids"]
    return {(ids[a], ids[b]) for a, b, _ in graph["picture"]["edges"]}


def spec_edges(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {(d, t["id"]) for t in spec["tasks"] for d in t.get("depends_on", [])}


# -- a finished job's picture -------------------------------------------------------------------


def test_a_succeeded_job_is_drawn_with_its_edges_names_and_arguments_once_compacted(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()
    spec = yaml.safe_load((EXAMPLES / "seed000.yaml").read_text())
    job_id = client.submit(spec)
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    wait_until(lambda: compacted(client, job_id), timeout=JOB_SECONDS)

    graph: Any = dashboard.json(f"/api/jobs/{job_id}/graph")
    panels: list[Any] = [dashboard.json(f"/api/jobs/{job_id}/tasks/{i}") for i in range(9)]

    assert graph["edges_known"] is True
    assert drawn_edges(graph) == spec_edges(spec)
    assert [(p["id"], p["task"]) for p in panels] == [(t["id"], t["task"]) for t in spec["tasks"]]
    assert [p["args"] for p in panels] == [
        f'{{"args": [{n}], "kwargs": {{}}}}' for n in range(1, 10)
    ]


@pytest.mark.parametrize("ends", ["succeeded", "failed"])
def test_map_instances_are_drawn_from_their_source_and_counted_in_the_page(
    dashboard: Dashboard, client: Client, workers: Workers, ends: str
) -> None:
    spec = yaml.safe_load((EXAMPLES / "etl.yaml").read_text())
    if ends == "failed":  # a failed job keeps every field: the same picture, read otherwise
        spec["tasks"][3].update(task="jobcenter.demo.fail", args=[4])
        del spec["tasks"][3]["inputs"]
    job_id = client.submit(spec)
    before: Any = dashboard.json(f"/api/jobs/{job_id}/graph")  # no worker yet: not expanded
    workers.start()
    assert client.wait(job_id, JOB_SECONDS)["state"] == ends
    wait_until(lambda: compacted(client, job_id), timeout=JOB_SECONDS)

    graph: Any = dashboard.json(f"/api/jobs/{job_id}/graph")
    page = dashboard.get(f"/jobs/{job_id}").text
    instance: Any = dashboard.json(f"/api/jobs/{job_id}/tasks/{graph['ids'].index('transform[2]')}")

    instances = [f"transform[{k}]" for k in range(5)]
    assert before["ids"] == ["extract", "transform", "load", "summary"]
    assert graph["ids"] == before["ids"] + instances
    assert drawn_edges(graph) == (
        spec_edges(spec)
        | {("extract", "transform")}  # the mapped task waits for its source
        | {("extract", t) for t in instances}  # each instance runs on one of its elements
        | {(t, "transform") for t in instances}  # the mapped task gathers them
    )
    assert '<span id="job-tasks">9</span> tasks' in page
    assert instance["task"] == "jobcenter.demo.count_rows" and instance["state"] == "succeeded"


# -- Redis unreachable ----------------------------------------------------------------------------


def test_with_redis_unreachable_every_route_says_so_and_answers_again_once_it_is_back(
    private_redis: RedisServer,
) -> None:
    client = Client.from_url(private_redis.url, "outage")
    job_id = client.submit({"name": "waits", "tasks": [{"id": "t1", "task": "nobody.has"}]})
    schedule_id = client.schedule(
        {"name": "hourly", "tasks": [{"id": "t", "task": "x.y"}]}, every="1h"
    )
    dashboard = Dashboard(client)
    routes = [
        (method, path)
        for method, path in every_route(dashboard.server.config.app, job_id, schedule_id)
        if path != "/" and not path.startswith("/static/")  # neither reads Redis
    ]
    as_script = {"Accept": "application/json", "X-Jobcenter-Token": TOKEN}
    try:
        private_redis.stop()
        down = {(m, p): dashboard.http.request(m, p, headers=as_script) for m, p in routes}
        pages = {p: dashboard.get(p) for m, p in routes if m == "GET" and "/api/" not in p}
        private_redis.restart()
        back = {p: dashboard.get(p).status_code for m, p in routes if m == "GET"}
    finally:
        dashboard.close()

    trouble = f"cannot reach Redis at {private_redis.url}: "
    assert ("GET", "/metrics") in down and ("POST", f"/jobs/{job_id}/cancel") in down
    for (method, path), reply in down.items():
        assert (reply.status_code, reply.headers["retry-after"]) == (503, "5"), (method, path)
        assert reply.json()["error"].startswith(trouble), (method, path)
    for path, page in pages.items():
        assert page.status_code == 503, path
        if path == "/metrics":  # what a scraper logs
            assert page.text.startswith(trouble) and page.headers["content-type"].startswith(
                "text/plain"
            )
        else:  # a page that names the problem and reloads itself until Redis is back
            assert trouble in page.text and '<meta http-equiv="refresh" content="5">' in page.text
    assert {path: code for path, code in back.items() if code >= 400} == {}
    assert client.state(job_id) == "running"  # no action went through meanwhile


# -- a schedule's "run now" -----------------------------------------------------------------------


def test_run_now_submits_the_schedules_job_at_once_and_leaves_its_next_fire_as_it_was(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    spec = {"name": "nightly", "tasks": [{"id": "t1", "task": "tasks_for_tests.record"}]}
    schedule_id = client.schedule(spec, cron="0 3 * * *", name="nightly-report")
    before = schedules.show_schedule(client.store, schedule_id)
    schedules.pause_schedule(client.store, schedule_id)  # a paused one runs when asked, too
    workers.start()

    reply = dashboard.act("/schedules/nightly-report/run")  # by name, as by id
    job_id = reply.json()["message"].split("job ")[1].split()[0]
    ended = client.wait(job_id, JOB_SECONDS)
    after = schedules.show_schedule(client.store, schedule_id)
    listed = dashboard.get(f"/jobs?schedule={schedule_id}").text
    page = dashboard.get(f"/schedules/{schedule_id}").text

    assert reply.status_code == 200
    assert reply.json()["message"] == f"schedule nightly-report: job {job_id} submitted"
    assert ended["state"] == "succeeded" and ended["name"] == "nightly"
    assert f'<tr data-job="{job_id}">' in listed  # listed under its schedule
    assert (after["next_fire"], after["state"]) == (None, "paused")  # paused: no next fire
    assert (after["fires"], after["last_job"]) == (1, job_id)
    assert after["recent"][0]["outcome"] == "submitted" and after["recent"][0]["job"] == job_id
    assert after["recent"][0]["reason"] == "run now, by hand"
    schedules.resume_schedule(client.store, schedule_id)  # its next fire is as it was
    assert schedules.show_schedule(client.store, schedule_id)["next_fire"] == before["next_fire"]
    assert 'data-url="/schedules/' + schedule_id + '/run"' in page and "Run now" in page
