"""`jobcenter retry JOB`: a failed job re-runs its failed tasks and everything below them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml
from harness import Cli
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Scratch, Workers, parents_finished_first

from jobcenter import Client


def test_retry_of_a_failed_job_reruns_only_the_failed_part_and_succeeds(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    # Seed 000's failing run, with t4 failing only on its first call.
    spec = yaml.safe_load((EXAMPLES / "seed000_fail.yaml").read_text())
    for task in spec["tasks"]:
        if task["id"] == "t4":
            task.update(task="tasks_for_tests.fail_times", args=[1, "t4"])
        else:
            task.update(task="tasks_for_tests.record", args=[task["id"]])
    path = tmp_path / "seed000_flaky.json"
    path.write_text(json.dumps(spec))
    workers.start()
    first = cli("submit", str(path), "--wait", "--json", "--timeout", str(JOB_SECONDS))
    assert first.code == 1, first.stderr
    job_id = first.json()["id"]

    result = cli("retry", job_id)

    assert result.code == 0, result.stderr
    assert "3 tasks" in result.stdout  # t4, and t7 and t9 below it
    status = client.wait(job_id, JOB_SECONDS)
    assert status["state"] == "succeeded"
    assert {t["state"] for t in status["tasks"].values()} == {"succeeded"}
    deps = {t["id"]: t.get("depends_on", []) for t in spec["tasks"]}
    assert parents_finished_first(status, deps) == []
    runs = Counter(r["task"] for r in scratch.events("run"))
    assert runs == {**dict.fromkeys(deps, 1), "t4": 2}
    history = cli("history", job_id, "--json")
    assert history.code == 0, history.stderr
    t4 = [(h["attempt"], h["state"]) for h in history.json() if h["task"] == "t4"]
    assert [state for _, state in t4] == ["failed", "succeeded"]


def test_retry_runs_a_cleanup_that_ran_again_after_its_parents_new_attempt(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """An all_done cleanup ran after the failure; a retry runs it again once the failed
    task's new attempt ended, and the job ends as that run says."""
    workers.start()
    job_id = client.submit(
        {
            "name": "cleanup-after-retry",
            "tasks": [
                {"id": "load", "task": "tasks_for_tests.fail_times", "args": [1, "load"]},
                {
                    "id": "cleanup",
                    "task": "tasks_for_tests.record",
                    "args": ["cleanup"],
                    "depends_on": ["load"],
                    "trigger_rule": "all_done",
                },
            ],
        }  # fmt: skip
    )
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    result = cli("retry", job_id)

    assert result.code == 0, result.stderr
    assert "2 tasks" in result.stdout
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"
    attempts = {(h["task"], h["attempt"]): h for h in client.history(job_id)}
    assert set(attempts) == {("load", 1), ("load", 2), ("cleanup", 1), ("cleanup", 2)}
    assert attempts["cleanup", 2]["started_at"] >= attempts["load", 2]["finished_at"]
    assert Counter(r.get("label") for r in scratch.events("run"))["cleanup"] == 2


def test_retry_is_refused_while_a_task_below_the_failed_one_runs(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch
) -> None:
    """An error handler started by the failure is running: a retry would run it twice at
    once, so it is refused (exit 5) naming it, and works once it ended."""
    workers.start()
    job_id = client.submit(
        {
            "name": "handler-running",
            "tasks": [
                {"id": "load", "task": "tasks_for_tests.fail_times", "args": [1, "load2"]},
                {
                    "id": "alert",
                    "task": "tasks_for_tests.block",
                    "args": ["alert"],
                    "depends_on": ["load"],
                    "trigger_rule": "one_failed",
                },
            ],
        }  # fmt: skip
    )
    wait_until(lambda: client.status(job_id)["tasks"]["alert"]["state"] == "running", JOB_SECONDS)

    refused = cli("retry", job_id)

    assert refused.code == 5, refused.stderr
    assert "task alert, downstream of the tasks to retry, is running" in refused.stderr
    scratch.open_gate("alert")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    assert cli("retry", job_id).code == 0
    assert client.wait(job_id, JOB_SECONDS)["tasks"]["alert"]["state"] == "skipped"
