"""Worker processes killed with -9 and frozen with SIGSTOP while they run a job's tasks: the
job still converges, each task is taken over within about one lease, and a frozen worker's
late result is rejected by its fencing token."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from chaos_harness import (
    LEASE_SECONDS,
    TAKEOVER_BOUND_SECONDS,
    Cluster,
    chain_of_layers,
    check_converged,
)
from helpers import pid_alive, wait_until

from jobcenter import Client
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.store import Store

JOB_SECONDS = 45.0  # a chaos job not finished by then is stuck
KILL_EVERY_STARTS = 25  # a worker is killed each time this many more attempts have started
SWEEPER_LEASE_SECONDS = 30.0  # a recovery pass configured with a long lease: grace 10 s


def gated_chain(gate: str) -> dict[str, Any]:
    """a (runs until `gate` opens) -> b."""
    return {
        "name": "gated-chain",
        "tasks": [
            {"id": "a", "task": "chaos.step", "kwargs": {"gate": gate}, "retries": 3},
            {"id": "b", "task": "chaos.step", "depends_on": ["a"]},
        ],
    }


def test_kill9_of_random_workers_over_and_over_still_runs_a_300_task_dag_to_success(
    cluster: Cluster, client: Client, record_property: Any
) -> None:
    rng = random.Random(7)
    spec = chain_of_layers(width=30, depth=10, work=0.05, fan_in=3)
    live = [cluster.start(concurrency=4) for _ in range(3)]
    job_id = client.submit(spec)

    def unfinished() -> bool:
        return client.state(job_id) in ("pending", "running")

    def started_at_least(n: int) -> bool:
        return len(cluster.events("start", job_id)) >= n or not unfinished()

    kills = 0
    while unfinished():
        # let the job progress, then kill a random worker (mostly mid-task)
        target = KILL_EVERY_STARTS * (kills + 1)
        wait_until(
            lambda n=target: started_at_least(n),
            timeout=JOB_SECONDS,
            message="no progress between kills",
        )
        if not unfinished():
            break
        victim = rng.choice(live)
        # another worker serves before the kill: a takeover must never wait for one to start
        wait_until(
            lambda v=victim: any(cluster.handler_of(w) for w in live if w is not v),
            timeout=JOB_SECONDS,
            message="no other worker came up",
        )
        victim.kill9()
        kills += 1
        live.remove(victim)
        live.append(cluster.start(concurrency=4, wait_ready=False))
        assert kills < 40, "the job never finished"
    status = client.wait(job_id, JOB_SECONDS)

    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, "\n".join(result.problems[:30])
    assert status["state"] == "succeeded"
    assert set(result.starts) == {t["id"] for t in spec["tasks"]}
    takeovers = takeover_times(cluster, job_id)
    print(
        f"\n[chaos] 300-task DAG, {kills} workers killed -9: {result.reruns} re-runs "
        f"of {len(result.rerun_tasks)} tasks; kill -9 to re-run: {_summary(takeovers)}"
    )
    record_property("kills", kills)
    record_property("reruns", result.reruns)
    record_property("takeover_seconds", _summary(takeovers))
    assert kills >= 3
    assert result.reruns >= 1  # the kills did land on running tasks
    assert all(0 < t <= TAKEOVER_BOUND_SECONDS for t in takeovers), takeovers


def takeover_times(cluster: Cluster, job_id: str) -> list[float]:
    """For each re-run of a task whose previous attempt ran on a worker that was then
    killed: seconds from the kill to the re-run's start."""
    killed_at = {w.name: w.killed_at for w in cluster.started if w.killed_at is not None}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for event in cluster.events("start", job_id):
        by_task.setdefault(event["task"], []).append(event)
    out = []
    for starts in by_task.values():
        for previous, again in zip(starts, starts[1:], strict=False):
            kill = killed_at.get(previous["worker"])
            if kill is not None and previous["at"] < kill < again["at"]:
                out.append(again["at"] - kill)
    return out


def _summary(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    s = sorted(seconds)
    return f"n={len(s)} min={s[0]:.2f}s median={s[len(s) // 2]:.2f}s max={s[-1]:.2f}s"


def test_a_killed_workers_task_runs_again_elsewhere_within_about_one_lease(
    cluster: Cluster, client: Client, record_property: Any
) -> None:
    first = cluster.start(name="first")
    spec = gated_chain("a")
    job_id = client.submit(spec)
    (started,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    assert started["worker"] == "first"
    second = cluster.start(name="second")

    killed_at = first.kill9()
    again = wait_until(
        lambda: [e for e in cluster.starts(job_id, "a") if e["token"] != started["token"]],
        timeout=TAKEOVER_BOUND_SECONDS + 5,
        message="a never ran again",
    )[0]
    takeover = again["at"] - killed_at
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)

    print(f"\n[chaos] kill -9 to takeover: {takeover:.2f} s (lease {LEASE_SECONDS} s)")
    record_property("takeover_seconds", round(takeover, 3))
    assert again["worker"] == "second"
    assert again["token"].startswith(f"2:{second.handler}:")
    assert takeover <= TAKEOVER_BOUND_SECONDS
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 2, "b": 1}
    history = [(h["task"], h["attempt"], h["state"]) for h in client.history(job_id)]
    assert history == [("a", 1, "timed_out"), ("a", 2, "succeeded"), ("b", 1, "succeeded")]


def test_a_worker_frozen_past_its_lease_loses_the_task_and_its_late_completion_is_rejected(
    cluster: Cluster, client: Client
) -> None:
    frozen = cluster.start(name="frozen")
    spec = gated_chain("a")
    job_id = client.submit(spec)
    (first,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    other = cluster.start(name="other")

    frozen.freeze()
    frozen_at = time.time()
    taken = wait_until(
        lambda: [e for e in cluster.starts(job_id, "a") if e["token"] != first["token"]],
        timeout=TAKEOVER_BOUND_SECONDS + 5,
        message="a was not taken over from the frozen worker",
    )[0]
    assert taken["worker"] == "other"
    assert taken["at"] - frozen_at >= LEASE_SECONDS * 0.6  # not before its lease ran out
    cluster.open_gate("a")  # both attempts of a may now finish; only the second counts
    client.wait(job_id, JOB_SECONDS)

    frozen.thaw()
    # Its result is refused by Redis (its token is stale), or never sent: its first heartbeat,
    # refused, may stop the attempt before it reports (test_chaos_stopped_attempts.py).
    late = (
        f"late result of job {job_id} task a discarded: attempt 2 (handler {other.handler}) "
        "took the task over"
    )
    stopped = (
        f"job {job_id} task a attempt 1 stopped: attempt 2 (handler {other.handler}) took the "
        "task over"
    )
    wait_until(
        lambda: late in frozen.log() or stopped in frozen.log(),
        message="the late completion was not rejected",
    )
    wait_until(
        lambda: any(e["token"] == first["token"] for e in cluster.events("finish", job_id)),
        message="the frozen attempt never finished",
    )
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 2, "b": 1}  # b was released once, by the second attempt
    assert cluster.task_field(job_id, "d", 1) == "0"  # b's dependency counted down once
    assert cluster.task_field(job_id, "a", 0) == "2"
    assert cluster.task_field(job_id, "h", 0) == other.handler
    assert client.status(job_id)["state"] == "succeeded"
    assert frozen.alive and other.alive


def test_a_frozen_worker_resumed_before_takeover_keeps_its_timed_out_attempt(
    cluster: Cluster, client: Client, store: Store
) -> None:
    # Seed 004: a timed_out attempt goes back to running if it progresses before anyone
    # takes it over. The only worker is frozen, so only this test's recovery pass sweeps
    # the lease (its rq child runs one pass at start, then none for 10 minutes); the pass
    # uses a long lease, so the second deadline (lease / 3 = 10 s) leaves the resumed
    # worker plenty of time to heartbeat in.
    worker = cluster.start(name="only", env={"JOBCENTER_RECOVERY_INTERVAL_SECONDS": "600"})
    spec = gated_chain("a")
    job_id = client.submit(spec)
    wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    # the rq child's start-up pass (SIGSTOP stops the worker, not its child) must be over:
    # late under load, it would hold the recovery lease or sweep the lease itself
    cluster.wait_recovery_round_done(600)

    worker.freeze()
    wait_until(
        lambda: _lease_overdue(cluster, f"{job_id}|0"),
        timeout=LEASE_SECONDS + 2,
        message="the frozen worker's lease never ran out",
    )
    sweeper = Store(store.redis, replace(store.settings, lease_seconds=SWEEPER_LEASE_SECONDS))
    report = Recovery(sweeper, "test-sweeper").run()
    assert report.leases == {"timed_out": 1}
    assert cluster.task_field(job_id, "s", 0) == "timed_out"

    worker.thaw()
    wait_until(
        lambda: cluster.task_field(job_id, "s", 0) == "running",
        timeout=SWEEPER_LEASE_SECONDS / 3,
        message="the resumed attempt's heartbeat did not bring it back to running",
    )
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 1, "b": 1}
    assert [(h["task"], h["attempt"]) for h in client.history(job_id)] == [("a", 1), ("b", 1)]


def _lease_overdue(cluster: Cluster, member: str) -> bool:
    deadline = cluster.redis.zscore(cluster.keys.leases(0), member)
    seconds, micros = cluster.redis.time()
    return deadline is not None and deadline < seconds * 1000 + micros // 1000


def test_a_process_pool_attempt_dies_with_its_kill9d_worker(
    cluster: Cluster, client: Client
) -> None:
    victim = cluster.start("--pool", "process", name="victim")
    spec = gated_chain("a")
    job_id = client.submit(spec)
    (started,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    assert started["pid"] != victim.pid  # the attempt runs in a child process

    victim.kill9()
    cluster.start("--pool", "process", name="heir")
    wait_until(
        lambda: not pid_alive(started["pid"]),
        timeout=3.0,  # an orphan notices within a second or two
        message=f"the attempt's process {started['pid']} outlived its worker",
    )
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert not any(e["token"] == started["token"] for e in cluster.events("finish", job_id))


def test_a_prefetched_task_held_by_a_killed_worker_is_recovered_like_any_other(
    cluster: Cluster, client: Client
) -> None:
    """One slot: completing "quick" takes "held" into the slot and "after" beyond it (a
    prefetch: started and leased for this worker, waiting for its thread). kill -9 then: the
    prefetched attempt's lease runs out like a running one's, and it runs once, elsewhere."""
    first = cluster.start(name="first", concurrency=1)
    spec = {
        "name": "prefetched",
        "tasks": [
            {"id": "quick", "task": "chaos.step"},
            {"id": "held", "task": "chaos.step", "kwargs": {"gate": "held"}, "retries": 3},
            {"id": "after", "task": "chaos.step", "retries": 3},
        ],
    }
    job_id = client.submit(spec)
    wait_until(lambda: cluster.starts(job_id, "held"), message="held never started")
    after = client.status(job_id)["tasks"]["after"]
    assert after["state"] == "running" and not cluster.starts(job_id, "after"), (
        "after was not prefetched (taken for the worker, not begun)",
        after,
    )

    cluster.power_off(first)
    second = cluster.start(name="second")
    wait_until(
        lambda: cluster.starts(job_id, "after"),
        timeout=TAKEOVER_BOUND_SECONDS + 5,
        message="the prefetched task was never recovered",
    )
    cluster.open_gate("held")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"quick": 1, "held": 2, "after": 1}
    (ran,) = cluster.starts(job_id, "after")
    assert ran["worker"] == "second" and ran["token"].startswith(f"2:{second.handler}:")
    history = [(h["task"], h["attempt"], h["state"]) for h in client.history(job_id)]
    assert ("after", 1, "timed_out") in history and ("after", 2, "succeeded") in history
