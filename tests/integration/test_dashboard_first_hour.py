"""What a newcomer met in the dashboard, over HTTP against a real uvicorn, the real test Redis
and real workers: a finished job's picture and task panel (its edges, map instances, task
names and arguments after the job was compacted), a Redis outage (a page that says so, and
pages that come back with Redis), and a schedule's "run now"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dashboard_harness import Dashboard
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Workers

from jobcenter import Client


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
    assert "· 9 tasks" in page
    assert instance["task"] == "jobcenter.demo.count_rows" and instance["state"] == "succeeded"
