"""jobcenter.testing as a user would use it in a unit test: no server, the user's own tasks,
the job's data flow checked through the same Lua scripts a real Redis runs (fakeredis[lua])."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobcenter import Fatal, Job, spawn, task
from jobcenter.errors import JobcenterError
from jobcenter.model.spec import load_spec_file
from jobcenter.testing import run_job

ATTEMPTS: dict[str, int] = {}


@task(name="usertest.extract")
def extract(day: str) -> list[str]:
    return [f"{day}/a.csv", f"{day}/b.csv", f"{day}/c.csv"]


@task(name="usertest.transform")
def transform(path: str, factor: int) -> int:
    ATTEMPTS[path] = ATTEMPTS.get(path, 0) + 1
    if path.endswith("b.csv") and ATTEMPTS[path] == 1:
        raise RuntimeError("a transient fault: the retry runs at once")
    return len(path) * factor


@task(name="usertest.load")
def load(parts: list[int], files: list[str]) -> dict[str, int]:
    return {"files": len(files), "total": sum(parts)}


@task(name="usertest.broken")
def broken(parts: list[int], files: list[str]) -> None:
    raise Fatal("cannot load")


def etl(load_task: str = "usertest.load") -> Job:
    job = Job("user-etl")
    files = job.task("extract", "usertest.extract", kwargs={"day": "2026-11-23"})
    each = job.task(
        "transform", "usertest.transform", map={"path": files}, kwargs={"factor": 2}, retries=1
    )
    job.task("load", load_task, depends_on=[each, files], inputs={"parts": each, "files": files})
    return job


def test_a_users_etl_dag_runs_in_process_and_returns_each_tasks_result() -> None:
    ATTEMPTS.clear()
    run = run_job(etl())

    assert run.state == "succeeded"
    assert run.result("transform") == [32, 32, 32]
    assert run.result("load") == {"files": 3, "total": 96}
    assert run.tasks["transform[1]"].attempts == 2  # retried, then its result is the success's
    assert set(run.states()) == {"extract", "transform", "load"} | {
        f"transform[{i}]" for i in range(3)
    }


def test_a_failing_task_shows_its_state_and_error() -> None:
    run = run_job(etl("usertest.broken"))

    assert run.state == "failed"
    assert run.tasks["load"].state == "failed"
    assert "Fatal: cannot load" in (run.tasks["load"].error or "")
    assert run.result("load") is None


def test_the_readme_example_runs_the_etl_example_as_shown() -> None:
    """docs/guide/testing.md: the example test, word for word (the docs tier runs the page's
    block itself too)."""
    root = Path(__file__).resolve().parents[2]
    run = run_job(load_spec_file(root / "examples" / "etl.yaml"), modules=["jobcenter.demo"])
    assert run.state == "succeeded"
    assert run.result("summary") == "500 rows in 5 files"
    assert run.states()["transform[4]"] == "succeeded"
    page = (root / "docs" / "guide" / "testing.md").read_text()
    assert 'assert run.result("summary") == "500 rows in 5 files"' in page


def test_a_wait_takes_its_signal_and_a_spawned_child_runs_in_process() -> None:
    @task(name="testing_module.leaf")
    def leaf(n: int) -> int:
        return n * 2

    @task(name="testing_module.parent")
    def parent(n: int) -> object:
        return spawn({"name": "c", "tasks": [
            {"id": "l", "task": "testing_module.leaf", "args": [n]}]}, result="l")  # fmt: skip

    spec = {"name": "w", "tasks": [
        {"id": "ok", "wait_for": {"signal": "approve"}},
        {"id": "p", "task": "testing_module.parent", "args": [21], "depends_on": "ok"},
    ]}  # fmt: skip
    run = run_job(spec, signals={"approve": {"by": "ann"}})
    assert run.state == "succeeded"
    assert run.result("ok") == {"by": "ann"} and run.result("p") == 42
    with pytest.raises(JobcenterError, match="tasks wait for signal approve"):
        run_job(spec)
