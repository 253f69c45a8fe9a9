"""Pools, max_running and concurrency keys with real workers: many workers with many slots
each, and the tasks' own side log (start and end, in the order Redis received them) never
shows more running at once than the limit allows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers
from tasks_for_tests import scratch_key

from jobcenter import Client
from jobcenter.storage import limits

SPAN = "tasks_for_tests.span"
PAUSE = 0.05  # long enough that attempts on different workers overlap


def peak(runs: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, int]:
    """The most attempts running at once per key(run), from the start/end side log."""
    running: dict[str, int] = {}
    top: dict[str, int] = {}
    for run in runs:
        k = key(run)
        if run["event"] == "start":
            running[k] = running.get(k, 0) + 1
            top[k] = max(top.get(k, 0), running[k])
        elif run["event"] == "end":
            running[k] -= 1
    return top


def test_a_pool_is_never_exceeded_by_many_workers_and_others_run_beside_it(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    assert cli("pool", "set", "gpu", "2").code == 0
    for _ in range(3):
        workers.start(concurrency=4)
    tasks = [
        {"id": f"g{i}", "task": SPAN, "kwargs": {"pause": PAUSE, "group": "gpu"}, "pool": "gpu"}
        for i in range(24)
    ]
    tasks += [{"id": f"p{i}", "task": SPAN, "kwargs": {"pause": PAUSE}} for i in range(12)]
    job_id = client.submit({"name": "pooled", "tasks": tasks})

    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    top = peak(scratch.runs(), key=lambda r: r["group"])
    assert top["gpu"] == 2  # never more; and the 12 workers' slots did fill the pool
    assert top[""] > 2  # the tasks without a pool were not held to it
    listed = cli("pool", "list", "--json")
    assert listed.code == 0
    assert listed.json() == [{"name": "gpu", "slots": 2, "used": 0, "waiting": 0}]
    assert limits.reconcile(client.store, correct=False) == limits.SlotCheck(0, 0)


def test_max_running_and_a_concurrency_key_hold_with_many_workers(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    for _ in range(2):
        workers.start(concurrency=6)
    capped = {
        "name": "capped",
        "max_running": 3,
        "tasks": [{"id": f"c{i}", "task": SPAN, "kwargs": {"pause": PAUSE}} for i in range(15)],
    }
    tenants = {
        "name": "tenants",
        "tasks": [
            {
                "id": f"{tenant}{i}",
                "task": SPAN,
                "kwargs": {"pause": PAUSE, "group": tenant},
                "concurrency_key": "tenant-{group}",
                "concurrency_limit": 2,
            }
            for tenant in ("acme", "globex")
            for i in range(8)
        ],
    }
    capped_id, tenants_id = client.submit(capped), client.submit(tenants)

    assert client.wait(capped_id, JOB_SECONDS)["state"] == "succeeded"
    assert client.wait(tenants_id, JOB_SECONDS)["state"] == "succeeded"

    top = peak(scratch.runs(), key=lambda r: r["job"] + r["group"])
    assert top[capped_id] == 3
    assert top[tenants_id + "acme"] == 2 and top[tenants_id + "globex"] == 2


def test_tasks_of_a_pool_never_set_wait_visibly_until_it_is(
    client: Client, workers: Workers, cli: Cli
) -> None:
    workers.start(concurrency=2)
    job_id = client.submit(
        {"name": "waits", "tasks": [{"id": "a", "task": SPAN, "pool": "licences"}]}
    )
    wait_until(
        lambda: client.status(job_id)["tasks"]["a"]["waiting_for_limit"] == "pool licences",
        message="the task never showed it waits for its pool",
    )
    shown = cli("status", job_id)
    assert "waiting for a slot of pool licences" in shown.stdout, shown.stdout
    assert cli("pool", "list", "--json").json() == [
        {"name": "licences", "slots": None, "used": 0, "waiting": 1}
    ]

    assert cli("pool", "set", "licences", "1").code == 0
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert cli("pool", "delete", "licences").code == 0
    assert cli("pool", "list", "--json").json() == []


def test_pool_commands_refuse_bad_input_and_a_pool_in_use(cli: Cli, client: Client) -> None:
    for args in (["set", "gpu", "-1"], ["set", "gpu", "many"], ["set", "no|pe", "1"]):
        refused = cli("pool", *args)
        assert refused.code == 2, (args, refused.stderr)
    assert cli("pool", "list", "--json").json() == []  # nothing half-written
    bad = cli("pool", "set", "no|pe", "1")
    assert "pool name" in bad.stderr

    client.set_pool("gpu", 1)
    job_id = client.submit({"name": "held", "tasks": [{"id": "a", "task": SPAN, "pool": "gpu"}]})
    client.store.claim("h", ["default"], max_tasks=1, max_leader=0)  # holds the slot
    in_use = cli("pool", "delete", "gpu")
    assert in_use.code == 5 and "in use" in in_use.stderr
    client.cancel(job_id)
    assert cli("pool", "delete", "gpu").code == 0


def test_a_task_waits_for_its_gate_visibly_and_runs_once_it_opens(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    workers.start(concurrency=2)
    job_id = client.submit(
        {
            "name": "gated",
            "tasks": [
                {"id": "load", "task": SPAN, "requires": ["warehouse"], "retries": 0},
                {"id": "free", "task": SPAN},
            ],
        }
    )
    waiting = wait_until(
        lambda: client.status(job_id)["tasks"]["load"]["waiting_for_gate"],
        message="the task never showed it waits for its gate",
    )
    assert waiting["gate"] == "warehouse"
    # the gate is asked again every 0.2 s (the task is running meanwhile): poll for the waits
    wait_until(
        lambda: "for gate warehouse" in cli("status", job_id).stdout,
        message="status never said the task waits for its gate",
    )
    status = wait_until(
        lambda: (s := client.status(job_id)["tasks"])["load"]["state"] == "queued" and s,
        message="the task never went back to queued",
    )
    assert status["load"]["attempts"] == 0
    assert status["free"]["state"] in ("running", "succeeded")  # not held up by the gate
    assert scratch.events("start", "load") == []  # the task itself never ran

    scratch.redis.set(scratch_key(client.settings.namespace, "warehouse-up"), 1)
    done = client.wait(job_id, JOB_SECONDS)
    assert done["state"] == "succeeded"
    assert done["tasks"]["load"]["attempts"] == 1  # the gate's waits used no attempt
    assert done["tasks"]["load"]["waiting_for_gate"] is None


def test_a_gate_that_keeps_saying_no_fails_the_task_naming_the_gate(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(concurrency=2)
    job_id = client.submit(
        {
            "name": "no-licence",
            "tasks": [{"id": "solve", "task": SPAN, "requires": "licence-server", "retries": 5}],
        }
    )
    done = client.wait(job_id, JOB_SECONDS)
    assert done["state"] == "failed"
    error = done["tasks"]["solve"]["error"]
    assert error.startswith("gate licence-server said no for"), error
    assert scratch.events("start", "solve") == []


def test_a_queue_rate_limit_holds_back_the_rest_until_lifted(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    assert cli("rate", "set", "queue:metered", "4/1h").code == 0
    assert cli("rate", "list", "--json").json() == [
        {"target": "queue:metered", "starts": 4, "period": 3600.0}
    ]
    for args in (["node:x", "1/1s"], ["queue:metered", "fast"], ["queue:metered", "0/1s"]):
        refused = cli("rate", "set", *args)
        assert refused.code == 2, (args, refused.stderr)
    workers.start("--queues", "metered", concurrency=8)
    tasks = [{"id": f"m{i}", "task": SPAN} for i in range(10)]
    job_id = client.submit({"name": "metered", "queue": "metered", "tasks": tasks})

    def succeeded() -> int:
        states = client.task_states(job_id).values()
        return sum(s == "succeeded" for s in states)

    wait_until(lambda: succeeded() == 4, message="the first window's 4 never ran")
    states = client.task_states(job_id)
    assert sorted(states.values()) == ["queued"] * 6 + ["succeeded"] * 4
    assert len(scratch.events("start")) == 4

    assert cli("rate", "delete", "queue:metered").code == 0
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def test_a_pool_rate_limit_holds_back_its_tasks_until_lifted(
    client: Client, workers: Workers, cli: Cli
) -> None:
    client.set_pool("gpu", 8)
    assert cli("rate", "set", "pool:gpu", "3/1h").code == 0
    workers.start(concurrency=8)
    tasks = [{"id": f"g{i}", "task": SPAN, "pool": "gpu"} for i in range(6)]
    job_id = client.submit({"name": "rated", "tasks": tasks})

    def succeeded() -> int:
        return sum(s == "succeeded" for s in client.task_states(job_id).values())

    wait_until(lambda: succeeded() == 3, message="the first window's 3 never ran")
    waiting = [t for t in client.status(job_id)["tasks"].values() if t["state"] == "queued"]
    assert len(waiting) == 3
    assert {t["waiting_for_limit"] for t in waiting} == {"pool gpu"}

    assert cli("rate", "delete", "pool:gpu").code == 0
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
