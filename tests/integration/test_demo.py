"""The README's main command: `make demo` runs scripts/demo.py, which must work on a machine
with no Redis (it starts its own) and stop everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
DEMO_SECONDS = 120  # generous for a loaded CI machine; the demo takes ~2 s


@pytest.mark.parametrize(
    ("args", "last_line", "job_state"),
    [
        ([], "demo: the example DAG succeeded", "succeeded"),
        (["--fail"], "demo: the example DAG (failure run) failed", "failed"),
    ],
)
def test_the_demo_runs_the_seed_000_example_and_stops_what_it_started(
    args: list[str], last_line: str, job_state: str
) -> None:
    env = {**os.environ, "JOBCENTER_DEMO_STEP_SECONDS": "0.05"}
    env.pop("JOBCENTER_REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, str(DEMO), *args],
        env=env, capture_output=True, text=True, timeout=DEMO_SECONDS,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == last_line
    assert "workers and redis stopped" in lines
    assert any(line.startswith("job ") and line.endswith(f" {job_state}") for line in lines)
    assert sum(" t" in line and "/9]" in line for line in lines) == 9  # every task's progress


def test_the_demo_keeps_running_with_the_dashboard_until_ctrl_c() -> None:
    env = {**os.environ, "JOBCENTER_DEMO_STEP_SECONDS": "0.05", "PYTHONUNBUFFERED": "1"}
    env.pop("JOBCENTER_REDIS_URL", None)
    demo = subprocess.Popen(
        [sys.executable, str(DEMO), "--keep"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,  # Ctrl-C: its whole group
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        lines = []
        while not (lines and lines[-1].startswith(("dashboard at ", "demo: "))):
            line = demo.stdout.readline()  # the pytest timeout bounds a demo that hangs
            assert line, f"the demo ended early: {lines}, {demo.stderr and demo.stderr.read()}"
            lines.append(line.rstrip("\n"))
        job_url = lines[-1].removeprefix("dashboard at ")
        job_id = job_url.rsplit("/", 1)[1]
        with urllib.request.urlopen(job_url, timeout=DEMO_SECONDS) as page:
            assert page.status == 200 and job_id in page.read().decode()
        os.killpg(demo.pid, signal.SIGINT)
        out, err = demo.communicate(timeout=DEMO_SECONDS)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.communicate()
    assert demo.returncode == 0, err
    assert out.splitlines()[-2:] == [
        "workers and redis stopped",
        "demo: the example DAG succeeded",
    ]
