"""The order queued tasks run in (priority, then submission; queues in the order a worker
serves them), retention (finished jobs expire and recovery trims them from the indexes, so
memory stays flat under a steady load), and `list`/`history` filters and shapes."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import redis
from harness import CLI_TIMEOUT_SECONDS, Cli
from harness import subprocess_env as harness_env
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers
from retry_tasks import records

from jobcenter import Client
from jobcenter.model.states import JobState
from jobcenter.runtime.recovery import Recovery, RecoveryReport
from jobcenter.storage.keyspace.keys import Keys

MODULES = ("tasks_for_tests", "retry_tasks")
RETENTION = "1"  # seconds: JOBCENTER_RETENTION_SECONDS of the retention tests
# The retention tests' workers run their recovery round at start and then not for a day:
# a test waits for that pass to end, then only its own passes trim (and count) what expired.
ONE_ROUND = 86_400
HISTORY_KEYS = {"task", "attempt", "state", "handler", "started_at", "finished_at", "error"}


def ordered(task_id: str, **more: Any) -> dict[str, Any]:
    return {"id": task_id, "task": "retry_tasks.ordered", "args": [task_id], **more}


def queue_everything(client: Client, job_ids: list[str], roots: int) -> None:
    """Have every root task queued before the first one is claimed: no worker serves their
    queues yet. Small jobs are split at submit; a recovery pass plays leader for any split
    message still due (a worker started before that would race its own leader thread: it
    could claim the first job's tasks before the later jobs are split)."""
    Recovery(client.store, "test-splitter").run()
    states = [s["state"] for job_id in job_ids for s in client.status(job_id)["tasks"].values()]
    assert states.count("queued") == roots, states


def run_order(redis_client: redis.Redis, namespace: str) -> list[str]:
    return [r["label"] for r in records(redis_client, namespace, "order")]


def test_one_worker_runs_queued_tasks_by_priority_then_submission_order(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    job_ids = [
        client.submit({"name": "low", "tasks": [
            ordered("low-1"), ordered("low-urgent", priority=5), ordered("low-2")]}),
        client.submit({"name": "high", "priority": 3, "tasks": [
            ordered("high-1"), ordered("high-demoted", priority=-1)]}),
        client.submit({"name": "low-again", "tasks": [ordered("low-again")]}),
        client.submit({"name": "high-again", "priority": 3, "tasks": [ordered("high-again")]}),
    ]  # fmt: skip
    queue_everything(client, job_ids, roots=7)

    workers.start(modules=MODULES, concurrency=1)
    for job_id in job_ids:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    assert run_order(redis_client, namespace) == [
        "low-urgent",  # 5: a task's own priority beats its job's
        "high-1", "high-again",  # 3, in submission order
        "low-1", "low-2", "low-again",  # 0: spec order within a job, then submission order
        "high-demoted",  # -1
    ]  # fmt: skip


def test_worker_serves_its_queues_in_the_order_given(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    # b's tasks are queued first: only the worker's queue order puts a's first
    job_ids = [
        client.submit({"name": "b", "queue": "b", "tasks": [ordered("b-1"), ordered("b-2")]}),
        client.submit({"name": "a", "queue": "a", "tasks": [ordered("a-1"), ordered("a-2")]}),
        client.submit({"name": "b2", "queue": "b", "tasks": [ordered("b-3")]}),
        client.submit({"name": "a2", "queue": "a", "tasks": [ordered("a-3")]}),
    ]
    queue_everything(client, job_ids, roots=6)

    workers.start("--queues", "a,b", modules=MODULES, concurrency=1)
    for job_id in job_ids:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    assert run_order(redis_client, namespace) == ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"]


def test_child_released_by_its_parent_runs_after_higher_priority_queued_tasks(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    job_ids = [
        client.submit({"name": "low", "tasks": [
            ordered("parent", priority=9), ordered("child", depends_on=["parent"])]}),
        client.submit({"name": "high", "priority": 5, "tasks": [ordered("high")]}),
    ]  # fmt: skip
    queue_everything(client, job_ids, roots=2)

    workers.start(modules=MODULES, concurrency=1)
    for job_id in job_ids:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    # when parent ends, child (0) and high (5) are both ready: high goes first
    assert run_order(redis_client, namespace) == ["parent", "high", "child"]


def test_one_worker_runs_a_critical_path_jobs_long_chain_head_first(
    client: Client, workers: Workers, redis_client: redis.Redis, namespace: str
) -> None:
    """The default order: of the ready tasks, the one with the longest remaining path of
    estimates first (an `estimate` makes a lone task outweigh a chain); fifo keeps spec order."""
    chain = [ordered("chain-1", estimate=1), ordered("chain-2", depends_on=["chain-1"], estimate=1),
             ordered("chain-3", depends_on=["chain-2"], estimate=1)]  # fmt: skip
    job_ids = [
        client.submit({"name": "cp", "tasks": [ordered("short", estimate=0.5),
                                               ordered("heavy", estimate=9), *chain]}),
        client.submit({"name": "fifo", "order": "fifo", "tasks": [
            ordered("fifo-short"), ordered("fifo-chain", depends_on=["fifo-short"]),
            ordered("fifo-other")]}),
    ]  # fmt: skip
    queue_everything(client, job_ids, roots=5)

    workers.start(modules=MODULES, concurrency=1)
    for job_id in job_ids:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    assert run_order(redis_client, namespace)[:6] == [
        "heavy", "chain-1", "chain-2", "chain-3", "short",  # the older job first, by path
        "fifo-short",  # then the next job: fifo, spec order
    ]  # fmt: skip


# -- retention ------------------------------------------------------------------------------


def recover(redis_url: str, namespace: str) -> dict[str, Any]:
    """`jobcenter recover --once --json` with the retention of these tests; retried while a
    worker's own recovery pass holds the singleton lease."""

    def run() -> dict[str, Any] | None:
        done = subprocess.run(
            [sys.executable, "-m", "jobcenter", "recover", "--once", "--json"],
            env=harness_env(redis_url, namespace, JOBCENTER_RETENTION_SECONDS=RETENTION),
            capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report if report["ran"] else None

    return wait_until(run, timeout=JOB_SECONDS, interval=0.1, message="recovery never ran")


def retention_env() -> dict[str, str]:
    return {
        "JOBCENTER_RETENTION_SECONDS": RETENTION,
        "JOBCENTER_RECOVERY_INTERVAL_SECONDS": str(ONE_ROUND),
    }


def job_keys_gone(client: Client, job_ids: list[str]) -> bool:
    jks = [client.store.keys.job(job_id) for job_id in job_ids]
    keys = [k for jk in jks for k in (jk.job, jk.tasks, jk.history, jk.frontier)]
    return client.store.redis.exists(*keys) == 0


def test_finished_jobs_expire_and_recovery_drops_them_from_list(
    redis_url: str, namespace: str, workers: Workers, cli: Cli
) -> None:
    client = Client.from_url(redis_url, namespace, retention_seconds=float(RETENTION))
    # the expired jobs are left for the pass this test runs (a slow rq child would trim them)
    workers.start(modules=MODULES, env=retention_env())
    workers.wait_recovery_round_done(ONE_ROUND)
    job_ids = [
        client.submit({"name": "ok", "owner": "dora",
                       "tasks": [{"id": "n", "task": "retry_tasks.noop"}]}),
        client.submit({"name": "bad", "tasks": [{"id": "f", "task": "tasks_for_tests.fatal"}]}),
    ]  # fmt: skip
    for job_id in job_ids:
        client.wait(job_id, JOB_SECONDS)
    keys = client.store.keys
    ttl_ms = client.store.redis.pttl(keys.job(job_ids[0]).job)
    assert 0 < ttl_ms <= 1000, f"a finished job's keys expire with the retention ({ttl_ms} ms)"
    assert {r["id"] for r in client.list()} == set(job_ids)

    wait_until(lambda: job_keys_gone(client, job_ids), timeout=JOB_SECONDS,
               message="finished jobs' keys did not expire")  # fmt: skip
    report = recover(redis_url, namespace)

    assert report["trimmed"] == 2, report
    listed = cli("list", "--json")
    assert listed.code == 0 and listed.json() == [], listed.stdout
    r = client.store.redis
    assert r.zcard(keys.jobs(0)) == 0
    assert r.zcard(keys.owner_jobs(0, "dora")) == 0
    assert r.zcard(keys.expiring(0)) == 0
    assert r.zcard(keys.dlq(0)) == 0, "the failed job's dead letter goes with it"
    assert cli("status", job_ids[0]).code == 2


def recovery_pass(client: Client) -> RecoveryReport:
    """One recovery pass in this process, retried while a worker's own pass holds the
    singleton lease."""

    def run() -> RecoveryReport | None:
        report = Recovery(client.store, "test-load").run()
        return report if report.ran else None

    report = wait_until(run, timeout=JOB_SECONDS, interval=0.1, message="recovery never ran")
    assert report is not None
    return report


def marked_late(client: Client, job_id: str) -> bool:
    """Run a recovery pass, then whether the job is marked late: by that pass or by a
    worker's own, whichever ran first once its sla had passed (a test that waited for its
    own pass to mark it would wait for ever after a worker's did)."""
    recovery_pass(client)
    return client.status(job_id)["late_at"] is not None


def namespace_keys(r: redis.Redis, namespace: str) -> set[str]:
    return {k.decode() for k in r.scan_iter(match=f"jc:{namespace}:*", count=1000)}


def test_steady_load_keeps_key_count_and_memory_flat(
    redis_url: str, namespace: str, workers: Workers
) -> None:
    rounds, jobs_per_round = 10, 30
    client = Client.from_url(redis_url, namespace, retention_seconds=float(RETENTION))
    r = client.store.redis
    keys = Keys(namespace)
    workers.start(modules=MODULES, env=retention_env())
    # the worker's pass writes the recovery round key: before round 0 counts the keys
    workers.wait_recovery_round_done(ONE_ROUND)
    spec = {
        "name": "steady", "owner": "load",
        "tasks": [{"id": "a", "task": "retry_tasks.noop", "args": [1]},
                  {"id": "b", "task": "retry_tasks.noop", "depends_on": ["a"]}],
    }  # fmt: skip
    succeeded = keys.state_jobs(0, JobState.SUCCEEDED)
    figures, key_names = [], []
    for round_no in range(rounds):
        started = time.monotonic()
        job_ids = [client.submit(spec) for _ in range(jobs_per_round)]
        # a job's own keys may expire before it is read: the state index keeps it until the
        # recovery pass below trims it
        wait_until(lambda ids=job_ids: None not in r.zmscore(succeeded, ids), timeout=JOB_SECONDS,
                   message=f"round {round_no}: not every job succeeded")  # fmt: skip
        wait_until(lambda ids=job_ids: job_keys_gone(client, ids), timeout=JOB_SECONDS,
                   message=f"round {round_no}: job keys did not expire")  # fmt: skip
        report = recovery_pass(client)
        key_names.append(names := namespace_keys(r, namespace))
        figures.append({
            "round": round_no,
            "trimmed": report.trimmed,
            "keys": len(names),
            "jobs_index": r.zcard(keys.jobs(0)),
            "owner_index": r.zcard(keys.owner_jobs(0, "load")),
            "expiring": r.zcard(keys.expiring(0)),
            "used_memory": int(r.info("memory")["used_memory"]),
            "seconds": round(time.monotonic() - started, 2),
        })  # fmt: skip
    print("\nsteady load, per round:")
    for f in figures:
        print("  " + "  ".join(f"{k}={v}" for k, v in f.items()))

    assert [f["trimmed"] for f in figures] == [jobs_per_round] * rounds
    assert {(f["jobs_index"], f["owner_index"], f["expiring"]) for f in figures} == {(0, 0, 0)}
    added = [sorted(later - earlier) for earlier, later in itertools.pairwise(key_names)]
    assert not any(added), added  # no round leaves a key the one before did not have
    memory = [f["used_memory"] for f in figures]
    # allocator noise, and the other clients of the session's shared Redis, move it a little
    assert max(memory[1:]) - memory[0] < 1_000_000, memory


# -- list and history ---------------------------------------------------------------------


def test_list_filters_by_age_and_state_and_history_rows_have_their_fields(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(modules=MODULES)
    ok_id = client.submit({"name": "ok", "owner": "erin", "tasks": [ordered("ok")]})
    ok = client.wait(ok_id, JOB_SECONDS)
    bad_id = client.submit({"name": "bad", "tasks": [
        ordered("fine"), {"id": "doomed", "task": "tasks_for_tests.fatal", "args": ["boom"],
                          "depends_on": ["fine"]}]})  # fmt: skip
    bad = client.wait(bad_id, JOB_SECONDS)
    busy_id = client.submit({"name": "busy", "owner": "erin", "tasks": [
        {"id": "busy", "task": "tasks_for_tests.block", "args": ["busy"]}]})  # fmt: skip
    wait_until(lambda: scratch.events("started"), timeout=JOB_SECONDS)
    between = (ok["created_at"] + bad["created_at"]) / 2
    assert ok["created_at"] < between < bad["created_at"]

    def ids(*options: str) -> list[str]:
        result = cli("list", "--json", *options)
        assert result.code == 0, result.stderr
        return [row["id"] for row in result.json()]

    # an age window wide enough for a loaded machine's slow CLI runs: every job is in it
    assert ids("--since", "1h") == [busy_id, bad_id, ok_id]  # newest first
    assert ids("--since", "0.001s") == []
    assert ids("--since", f"{between:.3f}") == [busy_id, bad_id]
    iso = datetime.fromtimestamp(between, UTC).isoformat()
    assert ids("--since", iso) == [busy_id, bad_id]
    assert ids("--state", "succeeded") == [ok_id]
    assert ids("--state", "failed", "--since", "1h") == [bad_id]
    assert ids("--owner", "erin", "--state", "running") == [busy_id]
    scratch.open_gate("busy")  # now: slow CLI runs must not outlast the gate's deadline
    bad_since = cli("list", "--since", "yesterday-ish")
    assert bad_since.code == 2
    assert "--since" in bad_since.stderr

    history = cli("history", bad_id, "--json")

    assert history.code == 0, history.stderr
    rows = history.json()
    assert all(set(row) == HISTORY_KEYS for row in rows), rows
    assert [(h["task"], h["attempt"], h["state"]) for h in rows] == [
        ("fine", 1, "succeeded"), ("doomed", 1, "failed"),
    ]  # fmt: skip
    fine, doomed = rows
    assert fine["error"] is None
    assert doomed["error"].startswith("Fatal: boom")
    for h in rows:
        assert h["handler"] == workers.handler_of(workers.started[0])
        assert bad["created_at"] <= h["started_at"] <= h["finished_at"] <= bad["finished_at"]
    assert cli("history", "01NOSUCHJOB0000000000000000").code == 2
    assert client.wait(busy_id, JOB_SECONDS)["state"] == "succeeded"
