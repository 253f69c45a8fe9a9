"""A job's timeout and sla with real workers: a job whose task runs past the job's timeout
fails at the next recovery pass, the attempt revoked on its worker; a job past its sla is
marked late (status, list) and goes on to succeed."""

from __future__ import annotations

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers
from test_priority_and_retention import marked_late, recovery_pass

from jobcenter import Client


def blocked(name: str, gate: str, **extra: object) -> dict[str, object]:
    task = {"id": "t1", "task": "tasks_for_tests.block", "kwargs": {"gate": gate}}
    return {"name": name, "tasks": [task], **extra}


def test_a_job_past_its_timeout_fails_and_its_running_attempt_is_revoked(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start()
    job_id = client.submit(blocked("stuck", "never", timeout="1s"))
    wait_until(lambda: client.status(job_id)["tasks"]["t1"]["state"] == "running")
    wait_until(lambda: recovery_pass(client).timed_out == 1, timeout=JOB_SECONDS)

    status = client.status(job_id)
    assert status["state"] == "failed" and "timed out" in status["error"]
    assert status["tasks"]["t1"]["state"] == "failed"
    scratch.open_gate("never")  # the revoked attempt ends; its result is refused
    assert client.status(job_id)["state"] == "failed"


def test_the_nightly_job_past_its_sla_is_marked_late_and_goes_on(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start()
    job_id = client.submit(blocked("nightly", "nightly-gate", sla="1s"))
    wait_until(lambda: client.status(job_id)["tasks"]["t1"]["state"] == "running")
    wait_until(lambda: marked_late(client, job_id), timeout=JOB_SECONDS)

    assert "late: unfinished past its sla" in cli("status", job_id).stdout
    assert "running (late)" in cli("list").stdout
    assert " late" in cli("events", "--job", job_id).stdout
    scratch.open_gate("nightly-gate")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
