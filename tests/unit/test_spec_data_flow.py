"""`inputs` and `map` in specs and the builder: what they accept, and the errors naming
what is wrong (exit 2 at submit), before anything reaches Redis."""

from __future__ import annotations

from typing import Any

import pytest

from jobcenter import Job
from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec


def spec(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"name": "flow", "tasks": [{"id": "a", "task": "t"}, *tasks]}


def test_inputs_and_map_parse_and_round_trip() -> None:
    parsed = parse_spec(
        spec(
            {"id": "b", "task": "t", "map": {"item": "a"}},
            {"id": "c", "task": "t", "depends_on": ["b"], "inputs": {"parts": "b"}},
        )
    )
    b, c = parsed.tasks[1], parsed.tasks[2]
    assert b.map == {"item": "a"}
    assert b.depends_on == ("a",)  # a mapped task depends on its source
    assert c.inputs == {"parts": "b"}
    assert parse_spec(parsed.to_dict()) == parsed


def test_the_builder_takes_task_handles_for_inputs_and_map() -> None:
    job = Job("flow")
    a = job.task("a", "t")
    each = job.task("each", "t", map={"item": a})
    job.task("merge", "t", depends_on=[each], inputs={"parts": each, "source": a.id})
    with pytest.raises(SpecError, match="input 'source' names task 'a', which it does not"):
        job.build()
    job2 = Job("flow")
    a = job2.task("a", "t")
    each = job2.task("each", "t", map={"item": a})
    job2.task("merge", "t", depends_on=[each, a], inputs={"parts": each, "source": a})
    built = job2.build()
    assert built.tasks[2].inputs == {"parts": "each", "source": "a"}
    assert built.tasks[1].map == {"item": "a"}


@pytest.mark.parametrize(
    ("task", "error"),
    [
        (
            {"id": "b", "task": "t", "inputs": {"rows": "a"}},
            "task 'b': input 'rows' names task 'a', which it does not depend on",
        ),
        (
            {"id": "b", "task": "t", "depends_on": ["a"], "inputs": {"rows": "a"},
             "kwargs": {"rows": 1}},
            "task 'b': 'rows' is both in 'kwargs' and an input",
        ),
        (
            {"id": "b", "task": "t", "map": {"rows": "a"}, "kwargs": {"rows": 1}},
            "task 'b': 'rows' is both in 'kwargs' and an input",
        ),
        (
            {"id": "b", "task": "t", "map": {"x": "a"}, "inputs": {"x": "a"}},
            "task 'b': 'x' is both an input and the map argument",
        ),
        (
            {"id": "b", "task": "t", "depends_on": ["a"], "inputs": {"not-a-name": "a"}},
            "task 'b': 'inputs': 'not-a-name' is not a keyword argument name",
        ),
        ({"id": "b", "task": "t", "inputs": ["a"]}, "'inputs' must map argument names"),
        ({"id": "b", "task": "t", "map": {"x": "a", "y": "a"}}, "'map' takes one argument"),
        ({"id": "b", "task": "t", "map": {"x": "zz"}}, "task 'b' depends on unknown task 'zz'"),
    ],
    ids=[
        "input-not-a-dependency", "input-clashes-with-kwargs", "map-clashes-with-kwargs",
        "input-is-the-map-argument", "input-not-an-identifier", "inputs-not-a-mapping",
        "two-map-arguments", "map-over-unknown-task",
    ],
)  # fmt: skip
def test_bad_inputs_and_maps_are_spec_errors_naming_the_task(
    task: dict[str, Any], error: str
) -> None:
    with pytest.raises(SpecError, match=error.replace("(", r"\(").replace("[", r"\[")):
        parse_spec(spec(task))


def test_a_map_over_a_mapped_task_is_refused() -> None:
    with pytest.raises(SpecError, match="task 'c': maps over 'b', itself a mapped task"):
        parse_spec(
            spec(
                {"id": "b", "task": "t", "map": {"x": "a"}},
                {"id": "c", "task": "t", "map": {"y": "b"}},
            )
        )
