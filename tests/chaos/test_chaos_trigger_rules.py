"""A worker killed with -9 in the middle of a cascade of failures and skips (its leader
stopped after one chunk, the rest of the cascade still in the job's frontier, one of its
tasks running): another worker carries the cascade on, and every task still ends in its one
correct state by its trigger rule, as the pure reference (tests/trigger_reference.py) says."""

from __future__ import annotations

from typing import Any

from chaos_harness import Cluster, check_converged
from helpers import wait_until
from trigger_reference import Node, expected_states

from jobcenter import Client

JOB_SECONDS = 60.0
FAILED_FAN = 700  # children of the failing task: several chunks of the cascade
SKIPPED_FAN = 400  # children of the skipped task


def _task(task_id: str, name: str = "chaos.step", *deps: str, **extra: Any) -> dict[str, Any]:
    task: dict[str, Any] = {"id": task_id, "task": name, **extra}
    if deps:
        task["depends_on"] = list(deps)
    return task


def cascade_spec() -> dict[str, Any]:
    """`boom` fails: its fan-out ends upstream_failed; `ok` succeeds, so `on_error`
    (one_failed) is skipped and so is its fan-out; `cleanup` (all_done) runs after all of
    them, `strict` (none_failed over the skipped ones) runs, `after` runs when both did;
    `slow` runs on the killed worker and is taken over."""
    failed = [f"f{k}" for k in range(FAILED_FAN)]
    skipped = [f"s{k}" for k in range(SKIPPED_FAN)]
    tasks = [
        _task("slow", "chaos.step", kwargs={"gate": "slow"}, retries=2),
        _task("boom", "chaos.fail"),
        _task("ok"),
        _task("on_error", "chaos.step", "ok", trigger_rule="one_failed"),
        *(_task(f, "chaos.step", "boom") for f in failed),
        *(_task(s, "chaos.step", "on_error") for s in skipped),
        _task("cleanup", "chaos.step", *failed, *skipped, trigger_rule="all_done"),
        _task("strict", "chaos.step", *skipped, trigger_rule="none_failed"),
        _task("after", "chaos.step", "cleanup", "strict", "slow"),
    ]
    return {"name": "rules-cascade", "tasks": tasks}


def _reference(spec: dict[str, Any]) -> dict[str, str]:
    nodes = {
        t["id"]: Node(
            deps=t.get("depends_on", []),
            rule=t.get("trigger_rule", "all_success"),
            outcome="failed" if t["task"] == "chaos.fail" else "succeeded",
        )
        for t in spec["tasks"]
    }
    return expected_states(nodes)


def test_a_worker_killed_mid_cascade_leaves_every_task_in_its_one_correct_state(
    cluster: Cluster, client: Client
) -> None:
    spec = cascade_spec()
    victim = cluster.start(name="victim", env={"CHAOS_STALL_CONTINUE_AFTER": "1"})
    job_id = client.submit(spec)
    (stalled,) = wait_until(
        lambda: cluster.events("cascade-stalled", job_id),
        timeout=JOB_SECONDS,
        message="the victim's leader never took a step of the cascade",
    )
    assert stalled["left"] > 0  # mid-cascade: the rest is still in the frontier
    assert cluster.redis.llen(cluster.keys.job(job_id).frontier) > 0
    wait_until(lambda: cluster.starts(job_id, "slow"), message="slow never started")
    # the cascades' roots have ended (the stall may come from either cascade first): killed
    # while still running, `ok` (no retries) would fail and turn the skips into runs
    wait_until(
        lambda: [client.task_states(job_id)[t] for t in ("boom", "ok")] == ["failed", "succeeded"],
        timeout=JOB_SECONDS,
        message="boom and ok did not end before the kill",
    )
    waiting = [t for t, s in client.task_states(job_id).items() if s == "waiting"]
    assert waiting, "the cascade ended before the kill"  # (slow runs on the victim)

    cluster.power_off(victim)
    cluster.start(name="heir")
    cluster.open_gate("slow")
    status = client.wait(job_id, JOB_SECONDS)

    expected = _reference(spec)
    states = {t: s["state"] for t, s in status["tasks"].items()}
    assert states == expected
    assert status["state"] == "failed"
    result = check_converged(cluster, job_id, spec, "failed")
    assert not result.problems, result.problems
    assert set(result.starts) == {t for t, s in expected.items() if s in ("succeeded", "failed")}
    assert max(n for t, n in result.starts.items() if t != "slow") == 1  # ran once each
    tasks = status["tasks"]
    last_parent_end = max(tasks[f"f{k}"]["finished_at"] for k in range(FAILED_FAN))
    assert tasks["cleanup"]["started_at"] >= last_parent_end
