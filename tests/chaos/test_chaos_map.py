"""A worker killed -9 in the middle of a map's expansion (written in chunks by leader
'continue' steps): another worker resumes it from the stored cursor, and every instance
is written once and ends succeeded."""

from __future__ import annotations

import time

from chaos_harness import Cluster

from jobcenter import Client
from jobcenter.storage.keyspace.schema import TaskField
from jobcenter.storage.store import Store

ELEMENTS = 10_000  # the largest map: about 34 expansion chunks, so a kill lands among them
JOB_SECONDS = 120.0


def map_job() -> dict[str, object]:
    return {
        "name": "chaos-map",
        "tasks": [
            {"id": "src", "task": "chaos.elements", "args": [ELEMENTS]},
            # retries: an instance the killed worker had started runs again elsewhere
            {"id": "each", "task": "chaos.double", "map": {"x": "src"}, "retries": 3},
            {
                "id": "sum",
                "task": "chaos.total",
                "depends_on": ["each"],
                "inputs": {"parts": "each"},
            },
        ],
    }


def expansion_cursor(store: Store, job_id: str) -> tuple[int, int] | None:
    """(instances written, instances in all) of the map, once its expansion started."""
    raw = store.redis.hget(store.keys.job(job_id).tasks, TaskField.MAP_INSTANCES.of(1))
    if raw is None:
        return None
    _, count, written, _ = map(int, raw.split(b"|"))
    return written, count


def test_kill9_of_the_worker_expanding_a_map_mid_way_still_runs_every_instance_once(
    cluster: Cluster, client: Client, store: Store
) -> None:
    first = cluster.start(concurrency=4)
    job_id = client.submit(map_job())

    cursor = None
    deadline = time.monotonic() + JOB_SECONDS
    while cursor is None or cursor[0] == 0:  # polled tightly: the expansion takes ~100 ms
        assert time.monotonic() < deadline, "the map never started expanding"
        cursor = expansion_cursor(store, job_id)
    first.freeze()  # at once: power_off may wait a moment for its rq child's pass to end
    at_kill = expansion_cursor(store, job_id)
    cluster.power_off(first)
    assert at_kill is not None and 0 < at_kill[0] < at_kill[1] == ELEMENTS, at_kill

    cluster.start(concurrency=4)
    status = client.wait(job_id, timeout=JOB_SECONDS)

    assert status["state"] == "succeeded"
    instances = [task_id for task_id in status["tasks"] if task_id.startswith("each[")]
    assert sorted(instances) == sorted(f"each[{i}]" for i in range(ELEMENTS))
    assert {status["tasks"][i]["state"] for i in instances} == {"succeeded"}
    assert client.result(job_id, "sum") == 2 * sum(range(ELEMENTS))
    assert store.redis.hget(store.keys.job(job_id).job, "n") == str(3 + ELEMENTS).encode()
