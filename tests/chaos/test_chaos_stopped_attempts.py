"""A worker cut off longer than its lease (frozen with SIGSTOP: no heartbeat goes out) whose
task another worker took over stops its own attempt as soon as it learns so, from its first
heartbeat after it resumes: the process pool kills the attempt's child, a coroutine is
cancelled, a thread is told. The old attempt never runs beside the new one past that moment,
the worker logs how long it ran on, and the stop is counted in the metrics."""

from __future__ import annotations

import re
from typing import Any

import pytest
from chaos_harness import TAKEOVER_BOUND_SECONDS, Cluster, check_converged
from helpers import pid_alive, wait_until

from jobcenter import Client
from jobcenter.storage.metrics import read_counters
from jobcenter.storage.store import Store

JOB_SECONDS = 45.0  # a chaos job not finished by then is stuck
# pool, task, what runs the attempt (the metrics' `runner` label)
KINDS = {
    "thread": ("thread", "chaos.heeding_step", "thread"),  # told: a thread cannot be killed
    "async": ("thread", "chaos.async_step", "async"),  # its coroutine is cancelled
    "process": ("process", "chaos.step", "process"),  # its child is killed; it need not look
}
# The resumed worker's first heartbeat comes within a third of a lease; a deadline that
# catches an attempt that is never stopped, not a bound the test asserts.
STOP_SECONDS = 10.0
ENDED = r"job {job} task a attempt 1 ended ([0-9.]+) s after it was stopped \(([^)]*)\)"


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_that_learns_its_attempt_was_taken_over_stops_it(
    kind: str, cluster: Cluster, client: Client, store: Store, record_property: Any
) -> None:
    pool, task, runner = KINDS[kind]
    frozen = cluster.start("--pool", pool, name="frozen")
    spec = {"name": "gated", "tasks": [{"id": "a", "task": task, "kwargs": {"gate": "a"},
                                        "retries": 3}]}  # fmt: skip
    job_id = client.submit(spec)
    (first,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    other = cluster.start("--pool", pool, name="other")

    frozen.freeze()  # its heartbeats stop; its lease runs out; `other` takes the task over
    taken = wait_until(
        lambda: [e for e in cluster.starts(job_id, "a") if e["token"] != first["token"]],
        timeout=TAKEOVER_BOUND_SECONDS + 5,
        message="a was not taken over from the frozen worker",
    )[0]
    assert taken["worker"] == "other"
    frozen.thaw()

    if kind == "process":
        wait_until(
            lambda: not pid_alive(first["pid"]),
            timeout=STOP_SECONDS,
            message="the old attempt's child still runs beside the new attempt",
        )
    else:
        wait_until(
            lambda: [e for e in cluster.events("stopped", job_id) if e["token"] == first["token"]],
            timeout=STOP_SECONDS,
            message="the old attempt was not told: it runs on beside the new attempt",
        )
    ended = wait_until(
        lambda: re.search(ENDED.format(job=job_id), frozen.log()),
        message="the frozen worker did not log how long its stopped attempt ran on",
    )
    ran_on = float(ended.group(1))
    print(f"\n[chaos] {kind}: the taken-over attempt ran {ran_on:.3f} s after its heartbeat "
          "was refused")  # fmt: skip
    record_property("ran_after_refusal_seconds", ran_on)
    assert ended.group(2).startswith("another attempt took the task over")
    # logged by the heartbeat thread once it has asked Redis why: it may come after the end
    told = f"job {job_id} task a attempt 1 stopped: attempt 2 (handler {other.handler}) took " \
        "the task over"  # fmt: skip
    wait_until(lambda: told in frozen.log(), message="the stop was not logged with its cause")
    # the new attempt still runs: the old one ended first, it did not wait for it
    assert [e["token"] for e in cluster.starts(job_id, "a")] == [first["token"], taken["token"]]
    assert client.status(job_id)["tasks"]["a"]["state"] == "running"
    wait_until(
        lambda: read_counters(store).stopped.get(("taken_over", runner)) == 1,
        message="the stop was not counted",
    )

    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert not [e for e in cluster.events("finish", job_id) if e["token"] == first["token"]]
    assert read_counters(store).stop_overdue == {}
    assert frozen.alive and other.alive
