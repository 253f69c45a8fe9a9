"""Trigger rules with real workers: a cleanup task (all_done) runs after a failure and the
job still fails; an error handler (one_failed) is skipped when nothing failed; status shows
skipped; an unknown rule is a spec error (exit 2) that writes nothing."""

from __future__ import annotations

from pathlib import Path

import redis
import yaml
from harness import Cli
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client, Job

ETL_WITH_CLEANUP = {
    "name": "etl-with-cleanup",
    "tasks": [
        {"id": "extract", "task": "tasks_for_tests.record", "args": ["extract"]},
        {"id": "load", "task": "tasks_for_tests.fatal", "depends_on": ["extract"]},
        {"id": "report", "task": "tasks_for_tests.record", "depends_on": ["load"]},
        {
            "id": "cleanup",
            "task": "tasks_for_tests.record",
            "args": ["cleanup"],
            "depends_on": ["load", "report"],
            "trigger_rule": "all_done",
        },
        {
            "id": "alert",
            "task": "tasks_for_tests.record",
            "args": ["alert"],
            "depends_on": ["extract"],
            "trigger_rule": "one_failed",
        },
    ],
}


def _write(tmp_path: Path, spec: dict[str, object]) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_cleanup_task_runs_after_a_failure_and_the_job_still_fails(
    cli: Cli, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    workers.start()
    workers.start()

    result = cli(
        "submit", _write(tmp_path, ETL_WITH_CLEANUP), "--wait", "--json",
        "--timeout", str(JOB_SECONDS),
    )  # fmt: skip

    assert result.code == 1, result.stderr
    status = result.json()
    assert status["state"] == "failed"
    states = {task_id: t["state"] for task_id, t in status["tasks"].items()}
    assert states == {
        "extract": "succeeded",
        "load": "failed",
        "report": "upstream_failed",
        "cleanup": "succeeded",
        "alert": "skipped",  # extract did not fail
    }
    assert [r["task"] for r in scratch.events("run", "cleanup")] == ["cleanup"]
    assert scratch.events("run", "alert") == []
    assert status["tasks"]["cleanup"]["started_at"] >= status["tasks"]["load"]["finished_at"]
    assert status["tasks"]["alert"]["attempts"] == 0
    assert status["tasks"]["alert"]["error"] == "trigger rule one_failed not met"

    job_id = status["id"]
    shown = cli("status", job_id)
    assert shown.code == 0, shown.stderr
    alert_row = next(line for line in shown.stdout.splitlines() if line.startswith("alert "))
    assert " skipped " in alert_row


def test_the_builder_takes_a_trigger_rule_and_a_skip_does_not_fail_the_job(
    client: Client, workers: Workers
) -> None:
    workers.start()
    job = Job("skips")
    work = job.task("work", "tasks_for_tests.record", args=["work"])
    on_error = job.task(
        "on_error", "tasks_for_tests.record", depends_on=[work], trigger_rule="one_failed"
    )
    job.task("after", "tasks_for_tests.record", depends_on=[on_error, work])

    status = client.wait(client.submit(job), timeout=JOB_SECONDS)

    assert status["state"] == "succeeded"
    states = {task_id: t["state"] for task_id, t in status["tasks"].items()}
    assert states == {"work": "succeeded", "on_error": "skipped", "after": "skipped"}
    assert status["tasks"]["after"]["error"] == "upstream task on_error skipped"


def test_an_unknown_rule_is_a_spec_error_naming_rule_and_task(
    cli: Cli, tmp_path: Path, redis_client: redis.Redis, namespace: str
) -> None:
    spec = {
        "name": "typo",
        "tasks": [
            {"id": "a", "task": "tasks_for_tests.record"},
            {"id": "b", "task": "tasks_for_tests.record", "depends_on": ["a"],
             "trigger_rule": "al_done"},
        ],
    }  # fmt: skip

    result = cli("submit", _write(tmp_path, spec))

    assert result.code == 2
    assert "task 'b'" in result.stderr and "'al_done'" in result.stderr
    assert "all_done" in result.stderr  # the rules it could be
    assert list(redis_client.scan_iter(match=f"jc:{namespace}:*")) == []
