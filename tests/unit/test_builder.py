"""builder: a DAG written in code gives the same JobSpec, and the same errors, as a spec file."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.builder import Job, TaskRef
from jobcenter.model.spec import load_spec_file, parse_spec, spec_from_any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_builder_equals_the_equivalent_dict_spec() -> None:
    job = Job("nightly-etl", owner="alice", priority=2, queue="etl", idempotency_key="k")
    a = job.task(
        "extract", "myapp.tasks.extract", args=[1, 2], kwargs={"day": "x"}, retries=3, timeout=600
    )
    b = job.task("load", "myapp.tasks.load", depends_on=[a])
    job.task("report", "myapp.tasks.report", depends_on=["load", b], node="db-host-1")
    expected = parse_spec(
        {
            "name": "nightly-etl",
            "owner": "alice",
            "priority": 2,
            "queue": "etl",
            "idempotency_key": "k",
            "tasks": [
                {
                    "id": "extract",
                    "task": "myapp.tasks.extract",
                    "args": [1, 2],
                    "kwargs": {"day": "x"},
                    "retries": 3,
                    "timeout": 600,
                },
                {"id": "load", "task": "myapp.tasks.load", "depends_on": ["extract"]},
                {
                    "id": "report",
                    "task": "myapp.tasks.report",
                    "depends_on": ["load"],
                    "node": "db-host-1",
                },
            ],
        }
    )
    assert job.build() == expected


def test_builder_reproduces_the_seed000_example() -> None:
    job = Job("seed000")
    t = {i: job.task(f"t{i}", "jobcenter.demo.step", args=[i]) for i in (1, 2, 3)}
    t[4] = job.task("t4", "jobcenter.demo.step", args=[4], depends_on=[t[1], t[2]])
    t[5] = job.task("t5", "jobcenter.demo.step", args=[5], depends_on=t[2])
    t[6] = job.task("t6", "jobcenter.demo.step", args=[6], depends_on=t[2])
    job.task("t7", "jobcenter.demo.step", args=[7], depends_on=[t[1], t[4]])
    job.task("t8", "jobcenter.demo.step", args=[8], depends_on=[t[5], t[6]])
    job.task("t9", "jobcenter.demo.step", args=[9], depends_on=[t[4], t[6]])
    assert job.build() == load_spec_file(EXAMPLES / "seed000.yaml")


def test_task_returns_a_frozen_ref() -> None:
    ref = Job("j").task("a", "t")
    assert ref == TaskRef("a")
    with pytest.raises(AttributeError):
        ref.id = "b"  # type: ignore[misc]


def test_every_task_field_is_accepted() -> None:
    job = Job("j", retention=60)
    job.task(
        "a",
        "t",
        retries=1,
        retry_backoff=0.5,
        retry_backoff_max=2,
        timeout=3,
        queue="q",
        node="n",
        priority=7,
    )
    task = job.build().tasks[0]
    assert (task.retries, task.retry_backoff, task.retry_backoff_max, task.timeout) == (
        1,
        0.5,
        2.0,
        3.0,
    )
    assert (task.queue, task.node, task.priority) == ("q", "n", 7)


def test_duplicate_id_fails_at_once() -> None:
    job = Job("j")
    job.task("a", "t")
    with pytest.raises(SpecError, match=r"^duplicate task id 'a'$"):
        job.task("a", "t")


def test_build_gives_spec_file_errors() -> None:
    job = Job("j")
    job.task("load", "t", depends_on="extrct")
    with pytest.raises(SpecError, match=r"^task 'load' depends on unknown task 'extrct'$"):
        job.build()


def test_build_reports_cycles() -> None:
    job = Job("j")
    job.task("a", "t", depends_on="b")
    job.task("b", "t", depends_on="a")
    with pytest.raises(SpecError, match=r"^cycle: a -> b -> a$"):
        job.build()


def test_build_validates_values() -> None:
    job = Job("j")
    job.task("x", "t", retries=-1)
    with pytest.raises(SpecError, match=r"^task 'x': 'retries' must be an integer >= 0"):
        job.build()


def test_a_builder_is_accepted_wherever_a_spec_is() -> None:
    job = Job("j")
    job.task("a", "t")
    assert spec_from_any(job) == job.build()
