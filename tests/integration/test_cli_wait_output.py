"""What `submit --wait` prints while it follows a job: a line per task off a terminal,
counted against the job's tasks as a map expands them, every task that ended without an
attempt of its own (upstream_failed, a mapped task's join), and on a terminal the task that
failed, named under the bar."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers

# a map of three instances, then a task that fails and one that cannot run after it
MAPPED_THEN_FAILS = {
    "name": "mapped-then-fails",
    "tasks": [
        {"id": "files", "task": "jobcenter.demo.list_files", "args": [3]},
        {"id": "rows", "task": "jobcenter.demo.count_rows", "map": {"path": "files"}},
        {"id": "load", "task": "tasks_for_tests.fatal", "args": ["no room"],
         "depends_on": ["rows"]},
        {"id": "report", "task": "jobcenter.demo.step", "args": [1], "depends_on": ["load"]},
    ],
}  # fmt: skip
TASKS_WITH_INSTANCES = 7  # the four of the spec and rows[0..2]
LINE = re.compile(r"^  \[(\d+)/(\d+)\] (\S+) (\S+?)(?::|$)")


def _spec(tmp_path: Path) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(MAPPED_THEN_FAILS))
    return str(path)


def test_off_a_terminal_each_task_of_a_mapped_job_is_counted_once_and_shown(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    workers.start()

    result = cli("submit", _spec(tmp_path), "--wait", "--timeout", str(JOB_SECONDS))

    assert result.code == 1, result.stderr
    lines = [m.groups() for m in map(LINE.match, result.stdout.splitlines()) if m]
    assert [int(n) for n, _, _, _ in lines] == list(range(1, TASKS_WITH_INSTANCES + 1))
    assert all(int(n) <= int(total) for n, total, _, _ in lines), result.stdout
    assert lines[-1][1] == str(TASKS_WITH_INSTANCES)
    states = {task: state for _, _, task, state in lines}
    assert states == {
        "files": "succeeded", "rows[0]": "succeeded", "rows[1]": "succeeded",
        "rows[2]": "succeeded", "rows": "succeeded", "load": "failed",
        "report": "upstream_failed",
    }  # fmt: skip
    assert "load failed: Fatal: no room" in result.stdout


def test_on_a_terminal_the_failed_task_is_named_under_the_bar(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    workers.start()
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcenter", "submit", _spec(tmp_path), "--wait",
         "--timeout", str(JOB_SECONDS)],
        env=cli.env(), cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=terminal,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    _, stderr = proc.communicate(timeout=JOB_SECONDS)
    shown = output.decode(errors="replace")

    assert proc.returncode == 1, stderr
    assert "tasks finished" in shown  # the bar
    assert "load failed: Fatal: no room" in shown
    assert "1 upstream_failed" in shown


def test_a_task_no_live_worker_has_is_named_at_submit_and_in_status(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    """With workers known, submit warns of a task name none of them registered (its tasks
    would wait silently), and status says so of its queued tasks; known names, or no worker
    known at all, give no warning."""
    spec = tmp_path / "typo.json"
    spec.write_text(json.dumps({"name": "typo", "tasks": [
        {"id": "ok", "task": "tasks_for_tests.record"},
        {"id": "typo", "task": "tasks_for_tests.recrod"},
    ]}))  # fmt: skip
    alone = cli("submit", str(spec))
    assert alone.code == 0 and "warning" not in alone.stderr  # no worker known yet
    workers.start()

    submitted = cli("submit", str(spec))

    assert submitted.code == 0, submitted.stderr
    assert (
        "warning: no live worker has task 'tasks_for_tests.recrod' on queue 'default'"
        in submitted.stderr
    )
    assert "tasks_for_tests.record'" not in submitted.stderr
    job_id = submitted.stdout.strip()

    def typo_line_saying_no_worker() -> str | None:
        status = cli("status", job_id)
        line = next(x for x in status.stdout.splitlines() if x.startswith("typo "))
        return line if "no live worker has" in line else None

    # said of it while it is queued: a worker may hold it a moment first (it claims it, then
    # gives it back for want of its code, and says since when)
    line = wait_until(
        typo_line_saying_no_worker,
        timeout=JOB_SECONDS,
        message="status never said that no live worker has the task",
    )
    assert "tasks_for_tests.recrod" in line, line
