"""Tasks for the demo and the example DAGs (`jobcenter worker jobcenter.demo`)."""

from __future__ import annotations

import logging
import os
import time

from jobcenter.runtime.context import current_task
from jobcenter.runtime.registry import task

log = logging.getLogger(__name__)
STEP_SECONDS = float(os.environ.get("JOBCENTER_DEMO_STEP_SECONDS", "0.3"))


@task(name="jobcenter.demo.step")
def step(n: int) -> int:
    """One step of the example DAG: reports progress, works a moment, returns its number."""
    current_task().progress(f"step {n} working")
    time.sleep(STEP_SECONDS)
    return n


@task(name="jobcenter.demo.fail")
def fail(n: int) -> None:
    """A step that always fails, for the example DAG's failing run (its log says why)."""
    log.info("step %d: reading its input", n)
    print(f"step {n}: input has no rows")
    time.sleep(STEP_SECONDS)
    raise RuntimeError(f"step {n} failed on purpose")


# The small ETL example of the data-flow guide (examples/etl.yaml): results, inputs and a map.


@task(name="jobcenter.demo.list_files")
def list_files(count: int) -> list[str]:
    """Extract: the names of the files to process (a map runs one instance per name)."""
    return [f"part-{i:03d}.csv" for i in range(count)]


@task(name="jobcenter.demo.count_rows")
def count_rows(path: str, rows_per_file: int = 10) -> dict[str, int]:
    """Transform one file (a map instance: `path` is its element of the list)."""
    return {"path_length": len(path), "rows": rows_per_file}


@task(name="jobcenter.demo.total_rows")
def total_rows(parts: list[dict[str, int]]) -> int:
    """Load: gather the instances' results (in element order) into one figure."""
    return sum(part["rows"] for part in parts)


@task(name="jobcenter.demo.report")
def report(total: int, files: list[str]) -> str:
    """A summary of the run, from two parents' results."""
    return f"{total} rows in {len(files)} files"
