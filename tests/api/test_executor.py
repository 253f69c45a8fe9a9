"""The reference executor (examples/executor/executor.sh: POSIX sh over curl) run for real:
beside a Python worker it runs the seed-000 DAG; killed mid-task (kill -9 of its whole
process group) it loses nothing, its task taken again once its lease ran out; and the
README's walk-through works from a shell with only curl against `jobcenter serve`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from api_harness import EXAMPLE_TASKS, JOB_SECONDS, SETTINGS, ApiServer, Executor, Workers
from harness import PROCESS_START_SECONDS, REPO_ROOT, Cli
from helpers import read_until, wait_until

from jobcenter import Client

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the executor needs curl")
SEED000 = yaml.safe_load((REPO_ROOT / "examples" / "seed000.yaml").read_text())


def tasks_dir(path: Path, scripts: dict[str, str]) -> Path:
    path.mkdir()
    for name, body in scripts.items():
        (path / name).write_text("#!/bin/sh\n" + body)
        (path / name).chmod(0o755)
    return path


def test_the_executor_runs_the_seed000_dag_beside_a_python_worker(
    api: ApiServer, workers: Workers, client: Client, tmp_path: Path, executors: list[Executor]
) -> None:
    job_id = api.submit(api.token("submit"), SEED000)
    executors.append(Executor(api.base, api.token("work"), EXAMPLE_TASKS, tmp_path, "sh"))
    workers.start(concurrency=1)

    assert api.wait_finished(api.token("read"), job_id) == "succeeded", executors[0].log()
    by_executor = [h for h in client.history(job_id) if h["handler"].startswith("sh.")]
    assert by_executor, client.history(job_id)  # it ran some tasks ...
    assert all(client.result(job_id, h["task"]) == int(h["task"][1:]) for h in by_executor)
    assert executors[0].stop() == 0  # ... and stops on SIGTERM


def test_an_executor_killed_mid_task_loses_nothing(
    api: ApiServer, client: Client, tmp_path: Path, executors: list[Executor]
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    step = (EXAMPLE_TASKS / "jobcenter.demo.step").read_text()
    slow = tasks_dir(
        tmp_path / "slow",
        {
            "api.hold": f'touch {marks}/"$JOBCENTER_ATTEMPT"\nexec sleep 600\n',
            "jobcenter.demo.step": step,
        },
    )
    quick = tasks_dir(
        tmp_path / "quick", {"api.hold": "echo '\"held\"'\n", "jobcenter.demo.step": step}
    )
    spec = {
        "name": "killed",
        "tasks": [
            {"id": "hold", "task": "api.hold", "retries": 1, "retry_backoff": 0},
            {"id": "after", "task": "jobcenter.demo.step", "args": [2], "inputs": {"x": "hold"},
             "depends_on": ["hold"]},
            {"id": "beside", "task": "jobcenter.demo.step", "args": [3]},
        ],
    }  # fmt: skip
    job_id = api.submit(api.token("submit"), spec)
    work = api.token("work")
    doomed = Executor(api.base, work, slow, tmp_path, "doomed")
    executors.append(doomed)
    wait_until(lambda: (marks / "1").exists(), timeout=PROCESS_START_SECONDS)

    doomed.kill9()  # the script, its heartbeat loop and the task: all at once
    executors.append(Executor(api.base, work, quick, tmp_path, "heir"))

    assert api.wait_finished(api.token("read"), job_id) == "succeeded", executors[1].log()
    status = client.status(job_id)
    history = [(h["task"], h["attempt"], h["state"]) for h in client.history(job_id)]
    assert {t["state"] for t in status["tasks"].values()} == {"succeeded"}
    assert ("hold", 1, "timed_out") in history and ("hold", 2, "succeeded") in history, history
    assert client.result(job_id, "hold") == "held" and client.result(job_id, "after") == 2


def curl(*args: str) -> str:
    done = subprocess.run(
        ["curl", "-sS", "--fail-with-body", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_from_a_shell_with_only_curl_seed000_runs_to_succeeded(
    redis_url: str, namespace: str, tmp_path: Path, executors: list[Executor]
) -> None:
    cli = Cli(redis_url, namespace, tmp_path, settings=SETTINGS)
    try:
        server = cli.start("serve", "--port", "0")
        assert server.stdout is not None
        base = (
            read_until(
                server.stdout, re.compile(r"dashboard on (http://\S+)/ "), PROCESS_START_SECONDS
            ).group(1)
            + "/api/v1"
        )
        admin = cli("token", "create", "--scope", "operate").stdout.strip()
        work = cli("token", "create", "--scope", "work").stdout.strip()
        auth = ["-H", f"Authorization: Bearer {admin}"]
        (tmp_path / "seed000.json").write_text(json.dumps(SEED000))

        created = json.loads(
            curl(
                *auth,
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                f"@{tmp_path / 'seed000.json'}",
                f"{base}/jobs",
            )  # fmt: skip
        )
        executors.append(Executor(base, work, EXAMPLE_TASKS, tmp_path, "curl"))
        wait_until(
            lambda: json.loads(curl(*auth, f"{base}/jobs/{created['id']}"))["state"] == "succeeded",
            timeout=JOB_SECONDS,
            interval=0.2,
        )
        result = json.loads(curl(*auth, f"{base}/jobs/{created['id']}/tasks/t9/result"))

        assert result == {"job": created["id"], "task": "t9", "result": 9}
    finally:
        cli.close()
