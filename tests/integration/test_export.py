"""`jobcenter export`: finished jobs as JSON lines, read back from their packed records, a
time window and states chosen; a running job is not exported; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Cli
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Scratch, Workers

from jobcenter import Client


def _lines(stdout: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in stdout.splitlines()]


def test_export_prints_each_finished_job_with_its_tasks_and_history(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    workers.start()
    ok = cli("submit", str(EXAMPLES / "seed000.yaml"), "--wait", "--json")
    failed = cli("submit", str(EXAMPLES / "seed000_fail.yaml"), "--wait", "--json")
    assert (ok.code, failed.code) == (0, 1), ok.stderr + failed.stderr
    ok_id, failed_id = ok.json()["id"], failed.json()["id"]
    for job_id in (ok_id, failed_id):  # a leader packs a finished job afterwards
        job_key = client.store.keys.job(job_id).job
        wait_until(lambda k=job_key: client.store.redis.hget(k, "packed") == b"1", JOB_SECONDS,
                   message=f"{job_id} was never compacted")  # fmt: skip
    held = tmp_path / "held.json"  # a job still running when the export runs
    held.write_text(
        json.dumps(
            {
                "name": "held",
                "tasks": [{"id": "b", "task": "tasks_for_tests.block", "args": ["gate"]}],
            }
        )  # fmt: skip
    )
    running_id = cli("submit", str(held)).stdout.strip()

    result = cli("export", "--since", "1h")

    assert result.code == 0, result.stderr
    jobs = _lines(result.stdout)
    assert [j["id"] for j in jobs] == [ok_id, failed_id]  # oldest first; not the running one
    first, second = jobs
    assert first["state"] == "succeeded" and second["state"] == "failed"
    assert first["tasks"] == client.status(ok_id)["tasks"]  # as `status --json` shows them
    assert len(first["tasks"]) == 9 and first["task_count"] == 9
    assert first["history"] == client.history(ok_id)
    assert second["tasks"]["t4"]["state"] == "failed"
    assert second["tasks"]["t7"]["error"] == "upstream task t4 failed"
    assert [h["task"] for h in second["history"] if h["state"] == "failed"] == ["t4"]

    only_failed = cli("export", "--since", "1h", "--state", "failed")
    assert [j["id"] for j in _lines(only_failed.stdout)] == [failed_id]
    assert cli("export", "--since", "1h", "--until", "2h").code == 2
    assert cli("export", "--since", "0", "--until", "1").stdout == ""  # 1970: nothing
    bad = cli("export", "--since", "yesterday")
    assert bad.code == 2 and "'yesterday'" in bad.stderr
    assert cli("export", "--since", "1h", "--state", "running").code == 2

    scratch.open_gate("gate")
    assert client.wait(running_id, JOB_SECONDS)["state"] == "succeeded"
    assert [j["id"] for j in _lines(cli("export", "--since", "1h").stdout)][-1] == running_id
