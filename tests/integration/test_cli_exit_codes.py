"""Exit code 1 means only "the job failed or was cancelled": a `--wait` that gives up exits 4
and a request the job's state refuses exits 5 (README: exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Scratch, Workers

from jobcenter import Client

BLOCKED = {"name": "blocked", "tasks": [{"id": "busy", "task": "tasks_for_tests.block",
                                         "args": ["busy"]}]}  # fmt: skip


def write(tmp_path: Path, spec: dict[str, object]) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_a_wait_that_times_out_exits_4_and_the_job_goes_on(
    cli: Cli, client: Client, tmp_path: Path
) -> None:
    result = cli("submit", write(tmp_path, BLOCKED), "--wait", "--timeout", "0.2")

    assert result.code == 4, result.stderr
    assert "not finished after 0.2s" in result.stderr
    (row,) = client.list()
    assert row["state"] == "running"


def test_a_failed_or_cancelled_job_waited_for_exits_1(
    cli: Cli, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start()
    spec = {"name": "fails", "tasks": [{"id": "f", "task": "tasks_for_tests.fatal"}]}
    result = cli("submit", write(tmp_path, spec), "--wait", "--timeout", str(JOB_SECONDS))
    assert result.code == 1, result.stderr


def test_a_refused_delete_and_a_refused_retry_exit_5(
    cli: Cli, client: Client, workers: Workers, scratch: Scratch, tmp_path: Path
) -> None:
    workers.start()
    job_id = client.submit(BLOCKED)

    deleted = cli("delete", job_id)
    assert deleted.code == 5, deleted.stderr
    assert "cancel it first" in deleted.stderr

    spec = {"name": "cancelled", "tasks": [
        {"id": "f", "task": "tasks_for_tests.fatal"},
        {"id": "g", "task": "tasks_for_tests.block", "args": ["g"]},
    ]}  # fmt: skip
    other = client.submit(spec)
    wait_until(lambda: client.status(other)["tasks"]["f"]["state"] == "failed", JOB_SECONDS)
    assert cli("cancel", other).code == 0
    retried = cli("retry", other)
    assert retried.code == 5, retried.stderr
    assert "cancelled" in retried.stderr
    scratch.open_gate("busy")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"


def test_each_refusal_exits_with_the_code_the_readme_gives_it(
    cli: Cli, client: Client, workers: Workers, tmp_path: Path
) -> None:
    """Retry of a cancelled job or of one with nothing failed: 5 (refused in its state);
    an unknown pool or rate limit: 2 naming it; the result of a task that failed: 7, saying
    it ended so (not "yet")."""
    cancelled = client.submit(BLOCKED)
    client.cancel(cancelled)
    workers.start()
    failed = client.submit(
        {"name": "fails", "tasks": [{"id": "f", "task": "tasks_for_tests.fatal"}]}
    )
    succeeded = client.submit(
        {"name": "ok", "tasks": [{"id": "ok", "task": "tasks_for_tests.record"}]}
    )
    client.wait(failed, JOB_SECONDS)
    client.wait(succeeded, JOB_SECONDS)

    cases = {
        ("retry", cancelled): (5, f"job {cancelled} was cancelled"),
        ("retry", succeeded): (5, "has no failed task to retry"),
        ("pool", "delete", "nosuch"): (2, "no pool 'nosuch' is set"),
        ("rate", "delete", "queue:nosuch"): (2, "no rate limit on queue:nosuch"),
        ("result", failed, "f"): (7, "has no result: it ended failed"),
        ("result", cancelled, "busy"): (7, "has no result: it ended cancelled"),
    }
    for args, (code, message) in cases.items():
        result = cli(*args)
        assert (result.code, message in result.stderr) == (code, True), (args, result.stderr)
