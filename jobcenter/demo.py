"""Tasks for the demo and the seed-000 examples (`jobcenter worker jobcenter.demo`)."""

from __future__ import annotations

import os
import time

from jobcenter.runtime.context import current_task
from jobcenter.runtime.registry import task

STEP_SECONDS = float(os.environ.get("JOBCENTER_DEMO_STEP_SECONDS", "0.3"))


@task(name="jobcenter.demo.step")
def step(n: int) -> int:
    """One step of the example DAG: reports progress, works a moment, returns its number."""
    current_task().progress(f"step {n} working")
    time.sleep(STEP_SECONDS)
    return n


@task(name="jobcenter.demo.fail")
def fail(n: int) -> None:
    """A step that always fails, for the seed-000 failure example."""
    time.sleep(STEP_SECONDS)
    raise RuntimeError(f"step {n} failed on purpose")
