"""The two worked examples of seed 000, run through the CLI against real worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from harness import Cli
from integration_harness import EXAMPLES, JOB_SECONDS, Workers, parents_finished_first


def _deps(spec_path: Path) -> dict[str, list[str]]:
    spec = yaml.safe_load(spec_path.read_text())
    return {t["id"]: list(t.get("depends_on", [])) for t in spec["tasks"]}


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_seed000_success_runs_every_task_after_all_its_parents(
    pool: str, cli: Cli, workers: Workers
) -> None:
    workers.start("--pool", pool)
    workers.start("--pool", pool)
    spec = EXAMPLES / "seed000.yaml"

    result = cli("submit", str(spec), "--wait", "--json", "--timeout", str(JOB_SECONDS))

    assert result.code == 0, result.stderr
    status = result.json()
    assert status["state"] == "succeeded"
    deps = _deps(spec)
    assert set(status["tasks"]) == set(deps) == {f"t{i}" for i in range(1, 10)}
    for task_id, task in status["tasks"].items():
        assert task["state"] == "succeeded", (task_id, task)
        assert task["attempts"] == 1, (task_id, task)
        assert task["error"] is None, (task_id, task)
    assert parents_finished_first(status, deps) == []
    last = max(t["finished_at"] for t in status["tasks"].values())
    assert status["finished_at"] >= last


def test_seed000_failure_marks_descendants_of_t4_upstream_failed_and_runs_t8(
    cli: Cli, workers: Workers
) -> None:
    workers.start()
    workers.start()
    spec = EXAMPLES / "seed000_fail.yaml"

    result = cli("submit", str(spec), "--wait", "--json", "--timeout", str(JOB_SECONDS))

    assert result.code == 1, result.stderr
    status = result.json()
    assert status["state"] == "failed"
    tasks = status["tasks"]
    assert tasks["t4"]["state"] == "failed"
    assert tasks["t4"]["attempts"] == 1
    assert "RuntimeError: step 4 failed on purpose" in tasks["t4"]["error"]
    for task_id in ("t7", "t9"):
        task = tasks[task_id]
        assert task["state"] == "upstream_failed", (task_id, task)
        assert task["started_at"] is None, (task_id, task)
        assert task["attempts"] == 0, (task_id, task)
        assert "t4" in (task["error"] or ""), (task_id, task)
    for task_id in ("t1", "t2", "t3", "t5", "t6", "t8"):
        assert tasks[task_id]["state"] == "succeeded", (task_id, tasks[task_id])
    assert parents_finished_first(status, _deps(spec)) == []
