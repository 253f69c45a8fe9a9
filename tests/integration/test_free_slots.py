"""No ready task waits beside a free slot (issue 15.2): a completion fills every free slot of
its worker with the children it releases, a claim and a completion under way never fill the
same slot twice, and a worker whose slot frees claims at once while its last claim left work
behind, without a wake-up token (the idle poll is set to an hour, so only that can start it).
"""

from __future__ import annotations

from typing import Any

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, RecordingRunner, Scratch, Workers

from jobcenter import Client
from jobcenter.config import Settings
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.execution.outcome import Outcome
from jobcenter.runtime.worker import Options, Running, Worker
from jobcenter.storage.store import Store, connect

CHILDREN = 6
RECORD = "tasks_for_tests.record"
NO_IDLE_POLL = {"JOBCENTER_IDLE_WAIT_SECONDS": "3600"}  # only a claim or a token starts work


def burst_spec(children: int) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "root", "task": "t.root"}]
    tasks += [{"id": f"c{i}", "task": "t.c", "depends_on": ["root"]} for i in range(children)]
    return {"name": "burst", "tasks": tasks}


def worker_with_root(redis_url: str, namespace: str, concurrency: int) -> tuple[Worker, Any]:
    """An in-process worker (its runner records, runs nothing) running a burst's root."""
    store = Store(connect(redis_url), Settings(redis_url=redis_url, namespace=namespace))
    worker = Worker(store, Options(leader=False, recovery=False, concurrency=concurrency))
    worker.runner = RecordingRunner()  # type: ignore[assignment]
    store.submit(parse_spec(burst_spec(CHILDREN)))
    (root,) = store.claim(worker.handler, ["default"], max_tasks=1, max_leader=0).tasks
    worker.running[(root.job_id, root.index)] = Running(root)
    return worker, root


def test_a_completion_fills_every_free_slot_with_the_children_it_releases(
    redis_url: str, namespace: str
) -> None:
    worker, root = worker_with_root(redis_url, namespace, concurrency=4)

    worker._report_with_retry([Outcome(root, True)])

    started = worker.runner.started  # type: ignore[attr-defined]
    assert sorted(t.index for t in started) == [1, 2, 3, 4], "the root's slot and 3 free ones"
    assert len(worker.running) == 4 and worker._free_slots() == 0
    assert worker.taking == 0
    worker.store.redis.close()


def test_a_completion_leaves_the_slots_a_claim_under_way_holds(
    redis_url: str, namespace: str
) -> None:
    worker, root = worker_with_root(redis_url, namespace, concurrency=4)
    worker.taking = 2  # a claim under way holds two of the three free slots

    worker._report_with_retry([Outcome(root, True)])

    started = worker.runner.started  # type: ignore[attr-defined]
    assert [t.index for t in started] == [1, 2], "the root's slot and the one left free"
    assert worker.taking == 2
    worker.store.redis.close()


def test_a_freed_slot_claims_at_once_while_the_last_claim_left_work(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(concurrency=1, env=NO_IDLE_POLL)
    # a first job: the worker's start-up claims are over, it waits on its wake list
    warm_up = client.submit({"name": "warm-up", "tasks": [{"id": "w", "task": RECORD}]})
    assert client.wait(warm_up, JOB_SECONDS)["state"] == "succeeded"
    tasks = [{"id": g, "task": "tasks_for_tests.block", "args": [g]} for g in ("a", "b")]
    job_id = client.submit({"name": "two", "tasks": tasks})
    (first,) = wait_until(lambda: scratch.events("started"), JOB_SECONDS)
    # no wake-up token is left (as when other workers took them): only the claim loop's
    # own claim, when the slot frees, can start the second task
    store = client.store
    assert store.redis.delete(store.keys.wake(store.keys.job_shard(job_id), "default")) == 1

    scratch.open_gate(first["task"])

    second = "b" if first["task"] == "a" else "a"
    wait_until(lambda: scratch.events("started", second), JOB_SECONDS, message="never claimed")
    scratch.open_gate(second)
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def test_a_burst_fills_the_free_slots_of_both_workers_without_an_idle_poll(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    for _ in range(2):
        workers.start(concurrency=3, env=NO_IDLE_POLL)
    tasks: list[dict[str, Any]] = [{"id": "root", "task": RECORD}]
    tasks += [
        {"id": f"c{i}", "task": "tasks_for_tests.block", "args": ["burst"], "depends_on": ["root"]}
        for i in range(CHILDREN)
    ]
    job_id = client.submit({"name": "burst", "tasks": tasks})

    started = wait_until(
        lambda: len(scratch.events("started")) == CHILDREN and scratch.events("started"),
        JOB_SECONDS,
        message="the burst did not fill every free slot",
    )
    assert {run["worker"] for run in started} == {"w1", "w2"}
    scratch.open_gate("burst")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def test_a_slot_given_back_wakes_the_worker_of_the_queue_its_parked_task_waits_in(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    assert cli("pool", "set", "gpu", "1").code == 0
    # the other queue's worker waits first, so the shard's freed-slot token goes to it
    workers.start("--queues", "q1", concurrency=2, env=NO_IDLE_POLL)
    workers.start("--queues", "q2", concurrency=2, env=NO_IDLE_POLL)
    pooled = {"queue": "q2", "pool": "gpu"}
    tasks = [
        {"id": "a", "task": "tasks_for_tests.block", "args": ["a"], **pooled},
        {"id": "b", "task": RECORD, "depends_on": [], **pooled},
    ]
    job_id = client.submit({"name": "pooled", "tasks": tasks})
    wait_until(lambda: scratch.events("started", "a"), JOB_SECONDS)
    wait_until(lambda: client.status(job_id)["tasks"]["b"]["waiting_for_limit"], JOB_SECONDS)

    scratch.open_gate("a")  # its slot is given back: b's worker must claim it now

    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert [run["worker"] for run in scratch.events("run", "b")] == ["w2"]


def test_a_prefetch_stops_before_the_first_child_of_a_task_the_worker_holds(
    redis_url: str, namespace: str
) -> None:
    """The worker passes the first child of what it holds as the prefetch's bound: holding b,
    whose child c comes after e and before f (fifo), a completion prefetches e, never f (a
    thread freed while b runs would start f before c)."""
    store = Store(connect(redis_url), Settings(redis_url=redis_url, namespace=namespace))
    worker = Worker(store, Options(leader=False, recovery=False, concurrency=2))
    worker.runner = RecordingRunner()  # type: ignore[assignment]
    tasks = [{"id": t, "task": "t.x"} for t in ("a", "b", "d", "e")]
    tasks += [{"id": "c", "task": "t.x", "depends_on": ["b"]}, {"id": "f", "task": "t.x"}]
    store.submit(parse_spec({"name": "held", "order": "fifo", "tasks": tasks}))
    a, b = store.claim(worker.handler, ["default"], max_tasks=2, max_leader=0).tasks
    for task in (a, b):
        worker.running[(task.job_id, task.index)] = Running(task)

    worker._report_with_retry([Outcome(a, True)])

    started = worker.runner.started  # type: ignore[attr-defined]
    assert [t.index for t in started] == [2, 3], "d into a's slot, e prefetched, f left"
    worker.store.redis.close()
