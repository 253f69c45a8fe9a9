"""Bulk actions with real workers and the CLI: `retry`, `cancel`, `delete` and `dlq requeue`
by filter, with `--dry-run` printing what they would touch, batches, and a count."""

from __future__ import annotations

from typing import Any

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client

ACME, ZED = {"customer": "acme"}, {"customer": "zed"}


def failing_once(name: str, tags: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A job that fails its first run (no retries) and succeeds when run again."""
    task = {"id": "t1", "task": "tasks_for_tests.fail_times"}
    task["kwargs"] = {"times": 1, "counter": name}
    return {"name": name, "tags": tags, "tasks": [task], **extra}


def test_retry_the_failed_jobs_of_one_customer_in_one_command(
    cli: Cli, client: Client, workers: Workers
) -> None:
    workers.start()
    acme = [client.submit(failing_once(f"acme-{i}", ACME)) for i in range(3)]
    zed = client.submit(failing_once("zed-0", ZED))
    for job_id in [*acme, zed]:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    listed = cli("list", "--tag", "customer=acme", "--json").json()
    assert {row["id"] for row in listed} == set(acme)
    assert all(row["tags"] == ACME for row in listed)
    assert cli("list", "--tag", "customer").code == 2  # not key=value
    dry = cli("retry", "--tag", "customer=acme", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert {line.split()[3] for line in dry.stdout.splitlines()[:-1]} == set(acme), dry.stdout
    assert dry.stdout.splitlines()[-1].startswith("3 job(s) would be retried")
    assert {client.state(j) for j in acme} == {"failed"}  # a dry run touches nothing

    done = cli("retry", "--tag", "customer=acme", "--state", "failed", "--batch", "2")
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "3 job(s) retried"
    assert {client.wait(j, JOB_SECONDS)["state"] for j in acme} == {"succeeded"}
    assert client.state(zed) == "failed"  # another customer's job is left alone


def test_cancel_delete_and_requeue_by_filter(cli: Cli, client: Client, workers: Workers) -> None:
    client.pause_queue("default")  # nothing runs: the jobs stay unfinished
    held = [client.submit({**failing_once(f"held-{i}", ZED), "owner": "ops"}) for i in range(4)]
    other = client.submit(failing_once("other", ACME))

    cancelled = cli("cancel", "--owner", "ops", "--batch", "3")
    assert cancelled.stdout.splitlines()[-1] == "4 job(s) cancelled", cancelled.stderr
    assert {client.state(j) for j in held} == {"cancelled"} and client.state(other) == "running"
    deleted = cli("delete", "--state", "cancelled", "--tag", "customer=zed")
    assert deleted.stdout.splitlines()[-1] == "4 job(s) deleted", deleted.stderr
    assert client.list(owner="ops") == []

    client.resume_queue("default")
    workers.start()
    assert client.wait(other, JOB_SECONDS)["state"] == "failed"
    requeued = cli("dlq", "requeue", "--tag", "customer=acme")
    assert requeued.stdout.splitlines()[-1] == "1 job(s) requeued", requeued.stderr
    assert client.wait(other, JOB_SECONDS)["state"] == "succeeded"


def test_a_bulk_command_takes_a_job_or_filters_not_both_nor_neither(
    cli: Cli, client: Client
) -> None:
    job_id = client.submit(failing_once("one", ACME))
    for args in (["retry"], ["retry", job_id, "--state", "failed"], ["cancel", "--dry-run"]):
        result = cli(*args)
        assert result.code == 2 and "filters" in result.stderr, (args, result.stderr)
    wait_until(lambda: client.state(job_id) == "running", timeout=JOB_SECONDS)
