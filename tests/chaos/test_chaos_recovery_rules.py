"""Every recovery rule of ARCHITECTURE.md (Recovery), each shown on a broken state created for
real (a worker killed with -9 or frozen with SIGSTOP, a queue entry or a release or a leader
message lost, a leader killed mid-split, a recovery pass killed half way), and the job
converging from it: every task terminal, the right final state, nothing left queued."""

from __future__ import annotations

import time
from typing import Any

from chaos_harness import (
    TAKEOVER_BOUND_SECONDS,
    WORKER_TIMEOUT_SECONDS,
    Cluster,
    chain_of_layers,
    check_converged,
)
from harness import WorkerProcess
from helpers import wait_until

import jobcenter.storage.jobs.submit as store_module
from jobcenter import Client
from jobcenter.model.spec import spec_from_any
from jobcenter.storage.store import Store

JOB_SECONDS = 30.0
RECOVERY_SECONDS = 15.0  # how long a test runs recovery passes while waiting for a repair
STALL_CHUNK = 100  # tasks per chunk of a stalling leader's split


def step(task_id: str, *deps: str, **kwargs: Any) -> dict[str, Any]:
    task: dict[str, Any] = {"id": task_id, "task": "chaos.step", "kwargs": kwargs}
    if deps:
        task["depends_on"] = list(deps)
    return task


def ensure_split(cluster: Cluster, job_id: str) -> None:
    """A small job is split by its submit; a pending one is split here by a recovery pass
    (no worker runs yet), which runs its due split message."""
    if cluster.job_field(job_id, "state") == "pending":
        assert cluster.recover()["leader_steps"] == 1
    assert cluster.job_field(job_id, "state") == "running"


def leader_split_job(name: str) -> dict[str, Any]:
    """A job too big to be split by its submit: a leader splits it, in chunks."""
    n = getattr(store_module, "INLINE_SPLIT_MAX", 0) + 40
    spec = chain_of_layers(width=n // 4, depth=4, work=0.0, fan_in=2, seed=5)
    return {**spec, "name": name}


def start_stalling_leader(cluster: Cluster) -> WorkerProcess:
    """A worker whose leader writes 2 chunks of 100 tasks of the next job it splits, then
    stops for good (the chaos_tasks hooks). Its rq child has run its recovery round when
    this returns and runs none for 10 minutes: the split falls to the hooked leader."""
    env = {
        "CHAOS_PUBLISH_CHUNK": str(STALL_CHUNK),
        "CHAOS_STALL_SPLIT_AFTER": "2",
        "JOBCENTER_RECOVERY_INTERVAL_SECONDS": "600",
    }
    leader = cluster.start(name="leader", env=env)
    cluster.wait_recovery_round_done(600)
    return leader


def queue_members(cluster: Cluster, queue: str, job_id: str) -> list[str]:
    return [
        m.decode()
        for m in cluster.redis.zrange(cluster.keys.queue(0, queue), 0, -1)
        if f"|{job_id}|" in m.decode()
    ]


def member_index(member: str) -> int:
    """The task index of a queue entry "<seq>|<job>|<index>"."""
    return int(member.rsplit("|", 1)[1])


def recover_until(cluster: Cluster, done: Any, what: str) -> list[dict[str, Any]]:
    """Run `jobcenter recover --once --json` until `done()`; the reports of every pass."""
    reports: list[dict[str, Any]] = []

    def one_pass() -> bool:
        reports.append(cluster.recover())
        return bool(done())

    wait_until(one_pass, timeout=RECOVERY_SECONDS, interval=0.2, message=what)
    return reports


# -- rule 1 -------------------------------------------------------------------------------


def test_rule1_recovery_times_out_then_requeues_the_task_of_a_killed_worker(
    cluster: Cluster, client: Client
) -> None:
    spec = {"name": "rule1", "tasks": [{**step("a", gate="a"), "retries": 2}, step("b", "a")]}
    job_id = client.submit(spec)
    victim = cluster.start(name="victim")
    (first,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    cluster.power_off(victim)

    # nobody claims: only recovery passes see the dead handler's expired lease
    reports = recover_until(
        cluster, lambda: cluster.task_field(job_id, "s", 0) == "queued", "a was not requeued"
    )
    outcomes = [r["leases"] for r in reports if r["leases"]]
    assert outcomes == [{"timed_out": 1}, {"retried": 1}]
    assert queue_members(cluster, "default", job_id) != []

    cluster.start(name="heir")
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 2, "b": 1}
    history = [(h["task"], h["attempt"], h["state"]) for h in client.history(job_id)]
    assert history[0] == ("a", 1, "timed_out")
    assert first["handler"] == victim.handler


def test_rule1_a_killed_workers_task_with_no_attempt_left_fails_and_cascades(
    cluster: Cluster, client: Client
) -> None:
    spec = {"name": "rule1-no-retry", "tasks": [step("a", gate="a"), step("b", "a"), step("c")]}
    job_id = client.submit(spec)
    victim = cluster.start(name="victim")
    wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    wait_until(lambda: cluster.task_field(job_id, "s", 2) == "succeeded", message="c not done")
    cluster.power_off(victim)
    cluster.start(name="survivor")

    status = client.wait(job_id, JOB_SECONDS)

    result = check_converged(cluster, job_id, spec, "failed")
    assert not result.problems, result.problems
    assert {t: s["state"] for t, s in status["tasks"].items()} == {
        "a": "failed",
        "b": "upstream_failed",
        "c": "succeeded",
    }
    assert status["tasks"]["a"]["error"].startswith("timed out: no heartbeat from handler")
    assert result.starts == {"a": 1, "c": 1}


# -- rule 2 -------------------------------------------------------------------------------


def test_rule2_a_queued_task_whose_queue_entry_was_deleted_is_requeued_once(
    cluster: Cluster, client: Client
) -> None:
    spec = {"name": "rule2", "tasks": [step("a"), step("b", "a"), step("c")]}
    job_id = client.submit(spec)
    ensure_split(cluster, job_id)
    entries = queue_members(cluster, "default", job_id)
    assert sorted(map(member_index, entries)) == [0, 2]
    (lost,) = [m for m in entries if member_index(m) == 0]
    cluster.redis.zrem(cluster.keys.queue(0, "default"), lost)

    first, second = cluster.recover(), cluster.recover()

    assert (first["requeued"], second["requeued"]) == (1, 0)
    assert sorted(queue_members(cluster, "default", job_id)) == sorted(entries)  # once each
    cluster.start()
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 1, "b": 1, "c": 1}


# -- rule 3 -------------------------------------------------------------------------------


def test_rule3_a_waiting_task_whose_release_was_lost_is_queued(
    cluster: Cluster, client: Client
) -> None:
    spec = {"name": "rule3", "tasks": [step("a"), {**step("b", "a"), "queue": "later"}]}
    job_id = client.submit(spec)
    first = cluster.start(name="first")  # serves only `default`: b waits in `later`
    wait_until(lambda: cluster.task_field(job_id, "s", 1) == "queued", message="b was not released")
    assert first.stop() == 0  # graceful: its rq child stops too, so only the CLI repairs
    # the release of b is lost: a succeeded, b still waiting on it, in no queue
    (entry,) = queue_members(cluster, "later", job_id)
    cluster.redis.zrem(cluster.keys.queue(0, "later"), entry)
    cluster.redis.hset(cluster.keys.job(job_id).tasks, mapping={"s:1": "waiting", "d:1": 1})

    first_pass, second_pass = cluster.recover(), cluster.recover()

    assert (first_pass["released"], second_pass["released"]) == (1, 0)
    assert queue_members(cluster, "later", job_id) == [entry]
    assert cluster.task_field(job_id, "d", 1) == "0"
    cluster.start("--queues", "later", name="later")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 1, "b": 1}


# -- rule 4 -------------------------------------------------------------------------------


def test_rule4_a_task_pinned_to_a_node_whose_workers_died_is_retried_then_fails(
    cluster: Cluster, client: Client, record_property: Any
) -> None:
    spec = {
        "name": "rule4",
        "tasks": [
            {**step("a", gate="a"), "node": "n1", "retries": 2},
            step("b", "a"),
            step("c", "b"),
            step("d"),
        ],
    }
    node_worker = cluster.start("--node", "n1", "--queues", "other", name="n1")
    job_id = client.submit(spec)
    cluster.start(name="default")  # splits, runs d, sweeps leases, runs recovery
    wait_until(lambda: cluster.starts(job_id, "a"), message="a never started on n1")
    killed_at = cluster.power_off(node_worker)

    status = client.wait(job_id, JOB_SECONDS)
    failed_after = time.time() - killed_at

    result = check_converged(cluster, job_id, spec, "failed")
    assert not result.problems, result.problems
    states = {t: s["state"] for t, s in status["tasks"].items()}
    assert states == {
        "a": "failed",
        "b": "upstream_failed",
        "c": "upstream_failed",
        "d": "succeeded",
    }
    # its attempt timed out and was retried; each verdict of the dead node then used one
    # more attempt (never started): retried while one remained, then failed
    history = [(h["attempt"], h["state"], h["handler"]) for h in client.history(job_id)]
    assert [h for h in history if h[1] != "succeeded"] == [
        (1, "timed_out", node_worker.handler),
        (2, "retry_wait", None),
        (3, "failed", None),
    ]
    assert status["tasks"]["a"]["error"] == (
        f"no live worker on its node 'n1' for {WORKER_TIMEOUT_SECONDS:g} s"
    )
    assert result.starts == {"a": 1, "d": 1}  # a never ran anywhere but on n1
    print(f"\n[chaos] node n1 killed -9: its task failed after {failed_after:.2f} s")
    record_property("node_failed_seconds", round(failed_after, 3))
    assert failed_after >= 2 * WORKER_TIMEOUT_SECONDS  # two verdicts, a timeout apart


def test_rule4_a_pinned_task_of_a_dead_node_keeps_its_retries_and_runs_once_the_node_is_back(
    cluster: Cluster, client: Client
) -> None:
    spec = {
        "name": "rule4-back",
        "tasks": [{**step("a", gate="a"), "node": "n1", "retries": 20}, step("b", "a")],
    }
    node_worker = cluster.start("--node", "n1", "--queues", "other", name="n1")
    job_id = client.submit(spec)
    cluster.start(name="default")
    wait_until(lambda: cluster.starts(job_id, "a"), message="a never started on n1")
    cluster.power_off(node_worker)

    # the dead node's first verdict: a used one more attempt (its second), and waits again
    wait_until(
        lambda: (
            int(cluster.task_field(job_id, "a", 0) or 0) >= 2
            or cluster.task_field(job_id, "s", 0) == "failed"
        ),
        timeout=JOB_SECONDS,
        message="no verdict on the dead node",
    )
    assert cluster.task_field(job_id, "s", 0) == "queued"
    assert "no live worker on its node 'n1'" in (cluster.task_field(job_id, "e", 0) or "")

    cluster.start("--node", "n1", "--queues", "other", name="n1-again")
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 2, "b": 1}


def test_rule4_a_stalled_node_worker_is_alive_so_its_pinned_tasks_wait_for_it(
    cluster: Cluster, client: Client
) -> None:
    """A worker that cannot heartbeat (here SIGSTOP; a task holding its GIL does the same) is
    alive: its rq child keeps its node present, so recovery fails none of its pinned tasks,
    and they run once it goes on."""
    node_worker = cluster.start("--node", "n1", "--queues", "other", name="n1")
    node_worker.freeze()  # the worker alone: its rq child runs on
    frozen_ms = redis_ms(cluster)
    spec = {
        "name": "rule4-stalled",
        "tasks": [{**step(t), "node": "n1", "retries": 2} for t in "abc"],
    }
    job_id = client.submit(spec)  # split by its submit: queued on n1's queue
    timeout_ms = WORKER_TIMEOUT_SECONDS * 1000

    def past_the_node_timeout() -> bool:
        """Recovery has run since the frozen worker's last heartbeat and its tasks' queueing
        were both two worker timeouts old: a node judged by heartbeats was dead by then."""
        queued_ms = [int(cluster.task_field(job_id, "tq", i) or 0) for i in range(3)]
        late_enough = redis_ms(cluster) > max(frozen_ms, *queued_ms) + 2 * timeout_ms
        return bool(cluster.recover()["ran"]) and late_enough

    wait_until(past_the_node_timeout, timeout=JOB_SECONDS, interval=0.2)
    states = [cluster.task_field(job_id, "s", i) for i in range(3)]
    assert states == ["queued"] * 3
    assert [cluster.task_field(job_id, "a", i) for i in range(3)] == [None] * 3

    node_worker.thaw()
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 1, "b": 1, "c": 1}


def redis_ms(cluster: Cluster) -> int:
    seconds, micros = cluster.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


# -- rule 5 -------------------------------------------------------------------------------


def test_rule5_a_finished_job_is_finalized_even_if_its_finalize_message_is_lost(
    cluster: Cluster, client: Client, store: Store
) -> None:
    spec = {"name": "rule5", "tasks": [step("a")]}
    job_id = client.submit(spec)
    ensure_split(cluster, job_id)
    # this test is the follower: it runs a, and any finalize message is then lost
    claimed = store.claim("test-follower", ["default"], max_tasks=1, max_leader=0)
    (started,) = claimed.tasks
    codes, _ = store.complete("test-follower", [(job_id, started.index, started.token)])
    assert codes == {(job_id, 0): 0}
    assert cluster.job_field(job_id, "left") == "0"
    store.drop_leader_message("finalize", job_id)

    if cluster.job_field(job_id, "state") == "running":  # finalizing is a leader step
        report = cluster.recover()
        assert report["resubmitted"] == {"finalize": 1} or report["finalized"] == 1
        cluster.start()
    # else the last completion finalized the job in its own script: nothing to lose
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    assert cluster.redis.zscore(cluster.keys.active(0), job_id) is None


def test_rule5_a_pending_job_whose_split_message_was_lost_is_split(
    cluster: Cluster, client: Client, store: Store
) -> None:
    spec = leader_split_job("rule5-split")
    job_id = client.submit(spec)
    assert cluster.job_field(job_id, "state") == "pending"
    store.drop_leader_message("split", job_id)  # lost before any leader took it

    first_pass, second_pass = cluster.recover(), cluster.recover()

    assert first_pass["resubmitted"] == {"split": 1}
    assert second_pass["leader_steps"] == 1  # the resubmitted split, run by recovery
    cluster.start()
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert set(result.starts.values()) == {1}


def test_rule5_a_split_whose_leader_was_killed_mid_way_resumes_where_it_stopped(
    cluster: Cluster, client: Client, record_property: Any
) -> None:
    spec = leader_split_job("rule5-resume")
    leader = start_stalling_leader(cluster)
    job_id = client.submit(spec)
    wait_until(lambda: cluster.events("split-stalled"), message="the split never stalled")
    assert cluster.job_field(job_id, "written") == str(2 * STALL_CHUNK)
    assert cluster.job_field(job_id, "state") == "pending"
    killed_at = cluster.power_off(leader)

    cluster.start(name="heir", env={"CHAOS_PUBLISH_CHUNK": str(STALL_CHUNK)})
    wait_until(
        lambda: cluster.job_field(job_id, "state") != "pending",
        timeout=TAKEOVER_BOUND_SECONDS + 5,
        message="the split was not resumed",
    )
    resumed_after = time.time() - killed_at
    client.wait(job_id, JOB_SECONDS)

    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert set(result.starts.values()) == {1}
    assert cluster.job_field(job_id, "written") == str(len(spec["tasks"]))
    # resumed by the heir's leader, or by a recovery pass of its rq child (rule 5)
    assert cluster.job_field(job_id, "leader") not in (None, leader.handler)
    print(f"\n[chaos] leader killed -9 mid-split: resumed after {resumed_after:.2f} s")
    record_property("split_resumed_seconds", round(resumed_after, 3))


# -- rule 6 -------------------------------------------------------------------------------


def test_rule6_a_scheduled_job_whose_leader_stalled_mid_split_is_failed_not_resubmitted(
    cluster: Cluster, client: Client, store: Store
) -> None:
    spec = leader_split_job("rule6")
    leader = start_stalling_leader(cluster)
    job_id, _ = store.submit(spec_from_any(spec), schedule_id="s1", fire_time=time.time())
    wait_until(lambda: cluster.events("split-stalled"), message="the split never stalled")
    cluster.power_off(leader)
    cluster.start(name="heir")

    status = client.wait(job_id, JOB_SECONDS)

    assert status["state"] == "failed"
    assert cluster.events("start", job_id) == []
    assert [j["id"] for j in client.list()] == [job_id]  # not resubmitted as a new job
    # no split message again; the finished job's compaction is the leader's last step, after
    # the job finished: wait it out
    wait_until(
        lambda: (
            not [
                m
                for m in cluster.redis.zrange(cluster.keys.leader(0), 0, -1)
                if job_id in m.decode()
            ]
        ),
        message="a leader message of the job stayed",
    )
    assert leader.handler in (cluster.job_field(job_id, "error") or "")
    result = check_converged(cluster, job_id, spec, "failed")
    assert not result.problems, result.problems
    assert {t["state"] for t in status["tasks"].values()} == {"failed"}


# -- rule 7 -------------------------------------------------------------------------------


def test_rule7_duplicate_queue_entries_and_leader_messages_are_dropped(
    cluster: Cluster, client: Client, store: Store
) -> None:
    spec = {
        "name": "rule7",
        "tasks": [step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c"), step("e")],
    }
    job_id = client.submit(spec)
    ensure_split(cluster, job_id)  # a and e queued
    queue = cluster.keys.queue(0, "default")
    for member in queue_members(cluster, "default", job_id):
        _, job, index = member.split("|")
        for seq in (0, 999_999_999_999):  # the same task, queued twice more
            cluster.redis.zadd(queue, {f"{seq:012d}|{job}|{index}": 0})
    assert store.resubmit(job_id, "split")  # a second split of a job already split
    assert store.resubmit(job_id, "finalize")  # a finalize while tasks are unfinished

    cluster.start(concurrency=4)
    cluster.start(concurrency=4)
    client.wait(job_id, JOB_SECONDS)

    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems
    assert result.starts == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    assert [h["attempt"] for h in client.history(job_id)] == [1] * 5
    # each task started once (above), and each dependency was counted down once: a duplicate
    # release would have left a counter below 0
    assert cluster.task_field(job_id, "d", 3) == "0"


def test_rule7_a_duplicate_claimed_while_the_task_runs_leaves_it_taken_over_on_worker_death(
    cluster: Cluster, client: Client
) -> None:
    spec = {"name": "rule7-running", "tasks": [{**step("a", gate="a"), "retries": 2}]}
    job_id = client.submit(spec)
    ensure_split(cluster, job_id)  # a is queued
    (entry,) = queue_members(cluster, "default", job_id)
    runner = cluster.start(name="runner", concurrency=1)
    (first,) = wait_until(lambda: cluster.starts(job_id, "a"), message="a never started")
    runner.freeze()  # no heartbeat from here on
    queue = cluster.keys.queue(0, "default")
    cluster.redis.zadd(queue, {entry: 0})  # a duplicate message of a, still running
    cluster.start(name="other")
    wait_until(
        lambda: not queue_members(cluster, "default", job_id),
        message="the duplicate was not taken",
    )
    cluster.power_off(runner)

    again = wait_until(
        lambda: [e for e in cluster.starts(job_id, "a") if e["token"] != first["token"]],
        timeout=TAKEOVER_BOUND_SECONDS,
        message=f"a was never taken over; its lease: "
        f"{cluster.redis.zscore(cluster.keys.leases(0), f'{job_id}|0')}",
    )
    assert again[0]["worker"] == "other"
    cluster.open_gate("a")
    client.wait(job_id, JOB_SECONDS)
    result = check_converged(cluster, job_id, spec, "succeeded")
    assert not result.problems, result.problems


# -- a recovery pass killed half way ---------------------------------------------------------


def test_a_recovery_pass_killed_half_way_is_finished_by_the_next_pass(
    cluster: Cluster, client: Client
) -> None:
    specs = [{"name": f"lost-{n}", "tasks": [step("a")]} for n in range(6)]
    job_ids = [client.submit(spec) for spec in specs]
    for job_id in job_ids:
        ensure_split(cluster, job_id)  # every job's task a is queued
    queue = cluster.keys.queue(0, "default")
    for job_id in job_ids:  # every queue entry is lost
        cluster.redis.zrem(queue, *queue_members(cluster, "default", job_id))

    half = cluster.spawn("-m", "chaos_tasks", "recover-pausing", "2")
    wait_until(lambda: cluster.events("recovery-paused"), message="recovery never paused")
    half.kill()
    half.wait()
    requeued = [j for j in job_ids if queue_members(cluster, "default", j)]
    assert len(requeued) == 2

    report = wait_until(
        lambda: (r := cluster.recover())["ran"] and r,
        timeout=WORKER_TIMEOUT_SECONDS + 1,
        interval=0.2,
        message="no recovery pass could run after one was killed",
    )
    assert report["requeued"] == 4
    cluster.start()
    for job_id, spec in zip(job_ids, specs, strict=True):
        client.wait(job_id, JOB_SECONDS)
        result = check_converged(cluster, job_id, spec, "succeeded")
        assert not result.problems, result.problems
        assert result.starts == {"a": 1}
