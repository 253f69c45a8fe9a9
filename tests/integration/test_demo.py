"""The README's main command: `make demo` runs scripts/demo.py, which must work on a machine
with no Redis (it starts its own) and stop everything it started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
DEMO_SECONDS = 120  # generous for a loaded CI machine; the demo takes ~2 s


@pytest.mark.parametrize(
    ("args", "last_line", "job_state"),
    [
        ([], "demo: the seed-000 example succeeded", "succeeded"),
        (["--fail"], "demo: the seed-000 failure example failed", "failed"),
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
