"""`jobcenter dashboard` as a person starts it, and `--log-format json` of the worker and
the dashboard."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import click
import httpx
from click.testing import CliRunner
from harness import PROCESS_START_SECONDS, TESTS_DIR, Cli
from harness import subprocess_env as env_for
from helpers import read_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.cli import main

URL = re.compile(r"jobcenter dashboard on (http://127\.0\.0\.1:\d+/)")
JSON_KEYS = {"time", "level", "logger", "worker", "job", "task", "attempt", "event"}


def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.status, reply.read().decode()


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(PROCESS_START_SECONDS)


def test_the_dashboard_command_serves_until_stopped(cli: Cli, client: Client) -> None:
    job_id = client.submit({"name": "to-see", "tasks": [{"id": "a", "task": "x.y"}]})
    proc = cli.start("dashboard", "--port", "0")
    assert proc.stdout is not None

    url = read_until(proc.stdout, URL, PROCESS_START_SECONDS).group(1)
    status, page = fetch(f"{url}jobs")
    code = stop(proc)

    assert status == 200 and job_id in page and "read-only" in page
    assert code == 0


def test_the_dashboard_command_answers_only_the_names_it_is_told(cli: Cli) -> None:
    proc = cli.start("dashboard", "--port", "0", "--allowed-hosts", "dash.example.com,*.corp.test")
    assert proc.stdout is not None
    url = read_until(proc.stdout, URL, PROCESS_START_SECONDS).group(1)
    hosts = ["dash.example.com", "a.corp.test:80", "localhost", "evil.example", "corp.test.evil"]
    with httpx.Client(base_url=url, timeout=10) as http:
        answers = {host: http.get("/metrics", headers={"Host": host}).status_code for host in hosts}
    stop(proc)
    bad = cli("dashboard", "--port", "0", "--allowed-hosts", "dash.example.com:8080")

    assert answers == {
        "dash.example.com": 200,
        "a.corp.test:80": 200,
        "localhost": 200,
        "evil.example": 400,
        "corp.test.evil": 400,
    }
    assert bad.code == 2 and "JOBCENTER_ALLOWED_HOSTS: 'dash.example.com:8080'" in bad.stderr


def test_the_dashboard_command_names_the_extra_it_needs(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    hidden = tmp_path / "hide" / "starlette"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('starlette is hidden by this test')\n")
    path = f"{hidden.parent}:{TESTS_DIR}"

    done = subprocess.run(
        [sys.executable, "-m", "jobcenter", "dashboard", "--port", "0"],
        env=env_for(redis_url, namespace, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=PROCESS_START_SECONDS,
    )

    assert done.returncode == 2
    assert "the dashboard needs its extra: pip install 'jobcenter[dashboard]'" in done.stderr


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a log, parsed; a line that is not one JSON object fails the test."""
    entries = []
    for line in text.splitlines():
        if line.strip():
            entry = json.loads(line)
            assert set(entry) >= JSON_KEYS, line
            entries.append(entry)
    return entries


def test_a_worker_logs_json_lines_naming_the_job_task_and_attempt(
    workers: Workers, client: Client
) -> None:
    worker = workers.start("--log-format", "json")
    handler = workers.handler_of(worker)
    spec = {"name": "log", "tasks": [{"id": "talk", "task": "tasks_for_tests.log_line"}]}
    job_id = client.submit({**spec, "tasks": [{**spec["tasks"][0], "args": ["said by a task"]}]})
    client.wait(job_id, JOB_SECONDS)
    assert worker.stop() == 0

    entries = json_lines(worker.log())

    said = [e for e in entries if e["event"] == "said by a task"]
    assert said and said[0]["job"] == job_id and said[0]["task"] == "talk"
    assert said[0]["attempt"] == 1 and said[0]["worker"] == handler
    assert said[0]["level"] == "warning" and said[0]["logger"] == "tasks_for_tests"
    assert any("stopping" in e["event"] and e["worker"] == handler for e in entries)


def test_the_dashboard_logs_json_lines(cli: Cli) -> None:
    proc = cli.start("-v", "dashboard", "--port", "0", "--log-format", "json")
    assert proc.stderr is not None

    url = read_until(proc.stderr, URL, PROCESS_START_SECONDS).group(1)
    fetch(f"{url}jobs")
    assert stop(proc) == 0
    rest = proc.stderr.read()

    entries = json_lines(rest)
    assert any("GET /jobs" in e["event"] and e["logger"] == "uvicorn.access" for e in entries)


def test_a_tasks_info_lines_reach_the_workers_log_by_default_and_v_follows_the_command(
    workers: Workers, client: Client
) -> None:
    """A worker logs at info by default, its tasks' logging.info too; `worker -v` (after
    the command, as before it) adds debug lines."""
    plain = workers.start(name="plain")
    spec = {"name": "log", "tasks": [
        {"id": "talk", "task": "tasks_for_tests.log_line", "args": ["info from a task", "info"]},
    ]}  # fmt: skip
    client.wait(client.submit(spec), JOB_SECONDS)
    assert plain.stop() == 0
    assert "INFO tasks_for_tests: info from a task" in plain.log()
    assert " DEBUG " not in plain.log()

    verbose = workers.start("-v", name="verbose")
    assert verbose.stop() == 0
    assert " DEBUG " in verbose.log()


def test_every_command_takes_v_after_its_name() -> None:
    """-v is the main command's option; each command takes it after its name too."""

    def leaves(group: click.Group, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = []
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found += leaves(command, (*path, name))
            else:
                found.append((*path, name))
        return found

    commands = leaves(main, ())
    assert ("worker",) in commands and ("schedule", "list") in commands
    for path in commands:
        result = CliRunner().invoke(main, [*path, "-v", "--help"])
        assert result.exit_code == 0, (path, result.output)
