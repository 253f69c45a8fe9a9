"""Results, inputs and maps with real workers and the CLI: the README's ETL example end to
end, `jobcenter result` and its exit codes, and results a worker refuses to store."""

from __future__ import annotations

import json

from harness import Cli
from integration_harness import EXAMPLES, JOB_SECONDS, Workers

from jobcenter import Client

EXIT_BAD_INPUT, EXIT_NO_RESULT = 2, 7


def test_the_etl_example_passes_results_through_inputs_and_a_map(
    cli: Cli, workers: Workers
) -> None:
    workers.start("--pool", "process")
    workers.start()

    submitted = cli(
        "submit", str(EXAMPLES / "etl.yaml"), "--wait", "--json", "--timeout", str(JOB_SECONDS)
    )

    assert submitted.code == 0, submitted.stderr
    status = submitted.json()
    assert {t["state"] for t in status["tasks"].values()} == {"succeeded"}
    assert {f"transform[{i}]" for i in range(5)} <= set(status["tasks"])
    job_id = status["id"]
    summary = cli("result", job_id, "summary")
    assert (summary.code, summary.stdout.strip()) == (0, "500 rows in 5 files")
    parts = cli("result", job_id, "transform", "--json")
    assert parts.code == 0, parts.stderr
    assert json.loads(parts.stdout) == [{"path_length": 12, "rows": 100}] * 5
    assert cli("result", job_id, "transform[2]", "--json").json() == {
        "path_length": 12,
        "rows": 100,
    }


def test_result_exits_2_for_an_unknown_job_or_task_and_7_before_the_task_succeeded(
    cli: Cli, client: Client
) -> None:
    job_id = client.submit({"name": "nobody-runs-it", "tasks": [{"id": "a", "task": "t.x"}]})

    unknown_task = cli("result", job_id, "b")
    unknown_job = cli("result", "01NOSUCHJOB", "a")
    not_yet = cli("result", job_id, "a")

    assert unknown_task.code == EXIT_BAD_INPUT and "has no task 'b'" in unknown_task.stderr
    assert unknown_job.code == EXIT_BAD_INPUT and "no job 01NOSUCHJOB" in unknown_job.stderr
    assert not_yet.code == EXIT_NO_RESULT, not_yet.stderr
    assert "has no result yet: it is queued" in not_yet.stderr


def test_a_result_that_cannot_be_stored_fails_the_task_without_a_retry(
    client: Client, workers: Workers
) -> None:
    workers.start(env={"JOBCENTER_RESULT_MAX_BYTES": "1000"})
    job_id = client.submit(
        {
            "name": "bad-results",
            "tasks": [
                {"id": "set", "task": "tasks_for_tests.returns", "args": ["set"], "retries": 3},
                {
                    "id": "big",
                    "task": "tasks_for_tests.returns",
                    "args": ["bytes", 2000],
                    "retries": 3,
                },
                {"id": "fits", "task": "tasks_for_tests.returns", "args": ["bytes", 900]},
            ],
        }
    )

    tasks = client.wait(job_id, timeout=JOB_SECONDS)["tasks"]

    assert tasks["set"]["state"] == "failed" and tasks["set"]["attempts"] == 1
    assert tasks["set"]["error"].startswith(
        "TypeError: task 'tasks_for_tests.returns' returned a set"
    )
    assert tasks["big"]["state"] == "failed" and tasks["big"]["attempts"] == 1
    assert "more than 1000 bytes packed (JOBCENTER_RESULT_MAX_BYTES)" in tasks["big"]["error"]
    assert client.result(job_id, "fits") == b"x" * 900
