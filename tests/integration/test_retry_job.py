"""`jobcenter retry JOB`: a failed job re-runs its failed and upstream_failed tasks only."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml
from harness import Cli
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
