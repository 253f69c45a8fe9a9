"""spec: parsing, every refusal naming its cause, file loading, and the to_dict round trip."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.spec import (
    MAX_TASK_PAYLOAD_BYTES,
    JobSpec,
    TaskSpec,
    load_spec_file,
    parse_spec,
    spec_from_any,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def job(*tasks: Any, **fields: Any) -> dict[str, Any]:
    return {"name": "j", **fields, "tasks": list(tasks)}


def one(**fields: Any) -> dict[str, Any]:
    """A one-task job whose task 'x' has the given extra fields."""
    return job({"id": "x", "task": "app.run", **fields})


def refused(data: Any, pattern: str, **kwargs: Any) -> None:
    with pytest.raises(SpecError, match=pattern):
        parse_spec(data, **kwargs)


# --- what parses --------------------------------------------------------------------


def test_full_spec_from_the_design_parses() -> None:
    spec = parse_spec(
        {
            "name": "nightly-etl",
            "owner": "alice",
            "priority": 5,
            "queue": "etl",
            "idempotency_key": "etl-2026-11-22",
            "retention": 3600,
            "tasks": [
                {
                    "id": "extract",
                    "task": "myapp.tasks.extract",
                    "args": [1, 2],
                    "kwargs": {"day": "2026-11-22"},
                    "retries": 3,
                    "timeout": 600,
                },
                {
                    "id": "load",
                    "task": "myapp.tasks.load",
                    "depends_on": ["extract"],
                    "node": "db-host-1",
                    "queue": "io",
                    "priority": -2,
                    "retry_backoff": 0.5,
                    "retry_backoff_max": 10,
                },
            ],
        }
    )
    assert spec == JobSpec(
        name="nightly-etl",
        owner="alice",
        priority=5,
        queue="etl",
        idempotency_key="etl-2026-11-22",
        retention=3600.0,
        tasks=(
            TaskSpec(
                id="extract",
                task="myapp.tasks.extract",
                args=(1, 2),
                kwargs={"day": "2026-11-22"},
                retries=3,
                timeout=600.0,
            ),
            TaskSpec(
                id="load",
                task="myapp.tasks.load",
                depends_on=("extract",),
                node="db-host-1",
                queue="io",
                priority=-2,
                retry_backoff=0.5,
                retry_backoff_max=10.0,
            ),
        ),
    )


def test_defaults() -> None:
    spec = parse_spec(one())
    assert (spec.owner, spec.priority, spec.queue, spec.idempotency_key, spec.retention) == (
        None,
        0,
        "default",
        None,
        None,
    )
    assert spec.tasks[0] == TaskSpec(id="x", task="app.run")


def test_depends_on_may_be_a_single_string() -> None:
    spec = parse_spec(job({"id": "a", "task": "t"}, {"id": "b", "task": "t", "depends_on": "a"}))
    assert spec.tasks[1].depends_on == ("a",)


def test_repeated_deps_are_collapsed_in_order() -> None:
    spec = parse_spec(
        job(
            {"id": "a", "task": "t"},
            {"id": "b", "task": "t"},
            {"id": "c", "task": "t", "depends_on": ["b", "a", "b", "a"]},
        )
    )
    assert spec.tasks[2].depends_on == ("b", "a")


def test_null_args_kwargs_and_deps_mean_none() -> None:
    task = parse_spec(one(args=None, kwargs=None, depends_on=None)).tasks[0]
    assert (task.args, task.kwargs, task.depends_on) == ((), {}, ())


def test_integral_floats_are_accepted_for_integer_fields() -> None:
    task = parse_spec(one(retries=3.0, priority=2.0)).tasks[0]
    assert (task.retries, task.priority) == (3, 2)
    assert type(task.retries) is int and type(task.priority) is int


def test_parsed_spec_does_not_share_the_callers_kwargs() -> None:
    kwargs = {"a": 1}
    spec = parse_spec(one(kwargs=kwargs))
    kwargs["a"] = 2
    assert spec.tasks[0].kwargs == {"a": 1}


def test_tasks_may_be_listed_children_first() -> None:
    spec = parse_spec(job({"id": "b", "task": "t", "depends_on": ["a"]}, {"id": "a", "task": "t"}))
    assert [t.id for t in spec.tasks] == ["b", "a"]  # input order is kept


# --- job-level refusals ---------------------------------------------------------------


def test_not_a_mapping() -> None:
    refused([1, 2], "^a job spec must be a mapping, got list$")


def test_unknown_job_key_names_the_key_and_suggests_the_fix() -> None:
    refused({"name": "j", "taks": []}, r"^unknown key 'taks' in job \(did you mean 'tasks'\?\)$")


def test_missing_name() -> None:
    refused({"tasks": [{"id": "x", "task": "t"}]}, "^job has no 'name'$")


@pytest.mark.parametrize("name", ["", "x" * 201, "tab\there", 5, None])
def test_bad_job_name(name: object) -> None:
    refused(job({"id": "x", "task": "t"}, name=name), r"^job: 'name' must be 1-200 printable")


@pytest.mark.parametrize("tasks", [None, []])
def test_job_without_tasks(tasks: object) -> None:
    refused({"name": "j", "tasks": tasks}, "^job has no tasks$")


def test_missing_tasks_key() -> None:
    refused({"name": "j"}, "^job has no tasks$")


def test_tasks_not_a_list() -> None:
    refused({"name": "j", "tasks": {"x": {}}}, "^job: 'tasks' must be a list, got dict$")


def test_too_many_tasks() -> None:
    tasks = [{"id": f"t{i}", "task": "t"} for i in range(100_001)]
    refused({"name": "j", "tasks": tasks}, "^job has 100001 tasks; the limit is 100000$")


def test_max_tasks_can_be_lowered() -> None:
    refused(job(*[{"id": f"t{i}", "task": "t"} for i in range(3)]), "limit is 2", max_tasks=2)


@pytest.mark.parametrize("owner", ["a b", "a:b", "", 7])
def test_bad_owner(owner: object) -> None:
    refused(one() | {"owner": owner}, r"^job: 'owner' must be 1-128 letters")


@pytest.mark.parametrize("queue", ["a|b", "a{b}", "a b", "", "-lead"])
def test_bad_job_queue(queue: object) -> None:
    refused(one() | {"queue": queue}, r"^job: 'queue' must be 1-128 letters")


@pytest.mark.parametrize("priority", [True, 1.5, "high", 1_000_000_001, -1_000_000_001])
def test_bad_job_priority(priority: object) -> None:
    refused(one() | {"priority": priority}, r"^job: 'priority' must be")


@pytest.mark.parametrize("retention", [0, -5, "1 day", True, float("inf"), "0s"])
def test_bad_retention(retention: object) -> None:
    refused(one() | {"retention": retention}, r"^job: 'retention' must be a duration")


def test_bad_idempotency_key() -> None:
    refused(one() | {"idempotency_key": ""}, r"^job: 'idempotency_key' must be 1-200 printable")


# --- task-level refusals -------------------------------------------------------------


def test_task_not_a_mapping() -> None:
    refused(job("extract"), r"^tasks\[0\] must be a mapping, got str$")


def test_task_without_id() -> None:
    refused(job({"task": "t"}), r"^tasks\[0\] has no 'id'$")


@pytest.mark.parametrize("task_id", ["a b", "a:b", "a|b", "{a}", "_a", "", "x" * 129, 5])
def test_bad_task_id(task_id: object) -> None:
    refused(job({"id": task_id, "task": "t"}), r"^tasks\[0\]: invalid id .*: use 1-128 letters")


def test_unknown_task_key_names_key_and_task() -> None:
    refused(
        job({"id": "extract", "task": "t"}, {"id": "load", "task": "t", "depends-on": "extract"}),
        r"^unknown key 'depends-on' in task 'load' \(did you mean 'depends_on'\?\)$",
    )


def test_unknown_task_key_without_valid_id_names_the_position() -> None:
    refused(job({"ID": "x", "task": "t"}), r"^unknown key 'ID' in tasks\[0\]")


def test_task_without_task_name() -> None:
    refused(job({"id": "x"}), r"^task 'x' has no 'task'")


@pytest.mark.parametrize("name", ["1abc", "my app", "a|b", "x" * 201, ["a"], 3])
def test_bad_task_name(name: object) -> None:
    refused(job({"id": "x", "task": name}), r"^task 'x': 'task' must be")


def test_duplicate_task_id() -> None:
    refused(
        job({"id": "extract", "task": "t"}, {"id": "extract", "task": "t"}),
        r"^duplicate task id 'extract'$",
    )


def test_unknown_dependency() -> None:
    refused(
        job({"id": "extract", "task": "t"}, {"id": "load", "task": "t", "depends_on": ["extrct"]}),
        r"^task 'load' depends on unknown task 'extrct'$",
    )


def test_self_dependency() -> None:
    refused(one(depends_on=["x"]), r"^task 'x' depends on itself$")


def test_two_cycle() -> None:
    refused(
        job(
            {"id": "a", "task": "t", "depends_on": "b"}, {"id": "b", "task": "t", "depends_on": "a"}
        ),
        r"^cycle: a -> b -> a$",
    )


def test_three_cycle() -> None:
    refused(
        job(
            {"id": "a", "task": "t", "depends_on": "c"},
            {"id": "b", "task": "t", "depends_on": "a"},
            {"id": "c", "task": "t", "depends_on": "b"},
        ),
        r"^cycle: a -> b -> c -> a$",
    )


@pytest.mark.parametrize("deps", [5, ["a", 5], {"a": 1}])
def test_bad_depends_on(deps: object) -> None:
    refused(one(depends_on=deps), r"^task 'x': 'depends_on' must be a task id or a list")


@pytest.mark.parametrize("retries", ["three", -1, 1.5, True, None])
def test_bad_retries(retries: object) -> None:
    refused(
        one(retries=retries), rf"^task 'x': 'retries' must be an integer >= 0, got {retries!r}$"
    )


def test_too_many_retries() -> None:
    refused(one(retries=101), r"^task 'x': 'retries' must be at most 100, got 101$")


@pytest.mark.parametrize("timeout", [0, -1, "10 s", True, float("nan"), "PT0S"])
def test_bad_timeout(timeout: object) -> None:
    refused(one(timeout=timeout), r"^task 'x': 'timeout' must be a duration")


@pytest.mark.parametrize("backoff", [-1, "1 s", False, float("inf")])
def test_bad_retry_backoff(backoff: object) -> None:
    refused(one(retry_backoff=backoff), r"^task 'x': 'retry_backoff' must be a duration")


def test_retry_backoff_max_below_base() -> None:
    refused(
        one(retry_backoff=10, retry_backoff_max=5),
        r"^task 'x': 'retry_backoff_max' \(5\) must be >= 'retry_backoff' \(10\)$",
    )


def test_zero_backoff_is_allowed() -> None:
    task = parse_spec(one(retry_backoff=0, retry_backoff_max=0)).tasks[0]
    assert (task.retry_backoff, task.retry_backoff_max) == (0.0, 0.0)


@pytest.mark.parametrize("field", ["queue", "node"])
@pytest.mark.parametrize("value", ["db host", "db:host", "", 5])
def test_bad_task_queue_or_node(field: str, value: object) -> None:
    refused(one(**{field: value}), rf"^task 'x': '{field}' must be 1-128 letters")


@pytest.mark.parametrize("priority", [False, 0.5, "1", 2_000_000_000])
def test_bad_task_priority(priority: object) -> None:
    refused(one(priority=priority), r"^task 'x': 'priority' must be")


def test_args_must_be_a_list() -> None:
    refused(one(args="abc"), r"^task 'x': 'args' must be a list, got str$")


def test_kwargs_must_be_a_mapping() -> None:
    refused(one(kwargs=[1]), r"^task 'x': 'kwargs' must be a mapping, got list$")


def test_kwargs_keys_must_be_strings() -> None:
    refused(one(kwargs={1: "a"}), r"^task 'x': 'kwargs' keys must be strings, got 1$")


def test_args_that_cannot_be_encoded() -> None:
    refused(one(args=[{1, 2}]), r"^task 'x': args cannot be encoded: .*set")


def test_kwargs_that_cannot_be_encoded() -> None:
    refused(one(kwargs={"when": object()}), r"^task 'x': kwargs cannot be encoded: .*object")


def test_args_too_deep_to_store_inside_the_job_spec() -> None:
    deep: list[object] = []
    for _ in range(29):
        deep = [deep]  # 30 levels with the args list itself
    refused(one(args=deep), r"^task 'x': args cannot be encoded: nested deeper than 29 levels$")


def test_oversized_payload() -> None:
    refused(
        one(args=["x" * MAX_TASK_PAYLOAD_BYTES]),
        rf"^task 'x': args and kwargs take more than {MAX_TASK_PAYLOAD_BYTES} bytes packed "
        r"\(the limit per task\)$",
    )


def test_payload_just_under_the_limit_is_accepted() -> None:
    parse_spec(one(args=["x" * (MAX_TASK_PAYLOAD_BYTES - 100)]))


def test_long_bad_values_are_cut_short_in_messages() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(one(retries="x" * 10_000))
    assert len(str(info.value)) < 150


# --- seed 000 and files --------------------------------------------------------------


SEED_DEPS = {
    "t4": ("t1", "t2"),
    "t5": ("t2",),
    "t6": ("t2",),
    "t7": ("t1", "t4"),
    "t8": ("t5", "t6"),
    "t9": ("t4", "t6"),
}


def test_seed000_example_is_the_nine_task_dag() -> None:
    spec = load_spec_file(EXAMPLES / "seed000.yaml")
    assert [t.id for t in spec.tasks] == [f"t{i}" for i in range(1, 10)]
    assert {t.id: t.depends_on for t in spec.tasks if t.depends_on} == SEED_DEPS
    assert {t.task for t in spec.tasks} == {"jobcenter.demo.step"}
    assert [t.args for t in spec.tasks] == [(i,) for i in range(1, 10)]


def test_seed000_fail_example_differs_only_in_task_4() -> None:
    ok = load_spec_file(EXAMPLES / "seed000.yaml")
    bad = load_spec_file(EXAMPLES / "seed000_fail.yaml")
    assert bad.tasks[3].task == "jobcenter.demo.fail"
    assert bad.tasks[3:4] != ok.tasks[3:4]
    assert bad.tasks[:3] + bad.tasks[4:] == ok.tasks[:3] + ok.tasks[4:]


def test_yaml_and_json_files_give_the_same_spec(tmp_path: Path) -> None:
    spec = load_spec_file(EXAMPLES / "seed000.yaml")
    as_json = tmp_path / "seed.json"
    as_json.write_text(json.dumps(spec.to_dict()))
    assert load_spec_file(as_json) == spec
    json_named_yaml = tmp_path / "seed.yml"  # YAML reads JSON too
    json_named_yaml.write_text(json.dumps(spec.to_dict()))
    assert load_spec_file(str(json_named_yaml)) == spec


def test_missing_file() -> None:
    with pytest.raises(SpecError, match=r"^spec file 'nope/x.yaml' not found$"):
        load_spec_file("nope/x.yaml")


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: j\ntasks:\n  - id: a\n    task: [t\n")
    with pytest.raises(
        SpecError, match=r"bad\.yaml' is not valid YAML: .*\(line \d+, column \d+\)"
    ):
        load_spec_file(path)


def test_json_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "j",\n "tasks": [}\n')
    with pytest.raises(SpecError, match=r"bad\.json' is not valid JSON: .*\(line 2, column 12\)"):
        load_spec_file(path)


@pytest.mark.parametrize(("text", "problem"), [("- a\n- b\n", "got list"), ("", "is empty")])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=problem):
        load_spec_file(path)


def test_spec_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("name: j\ntasks:\n  - {id: load, task: t, depends_on: [extrct]}\n")
    with pytest.raises(
        SpecError, match=r"typo\.yaml': task 'load' depends on unknown task 'extrct'$"
    ):
        load_spec_file(path)


def test_yaml_dates_in_args_are_refused_as_unencodable(tmp_path: Path) -> None:
    path = tmp_path / "date.yaml"
    path.write_text("name: j\ntasks:\n  - {id: x, task: t, args: [2026-11-22]}\n")
    with pytest.raises(SpecError, match=r"task 'x': args cannot be encoded: .*datetime\.date"):
        load_spec_file(path)


# --- round trip and spec_from_any ------------------------------------------------------


def test_to_dict_round_trips() -> None:
    full = {
        "name": "n",
        "owner": "o",
        "priority": 3,
        "queue": "q",
        "idempotency_key": "k",
        "retention": 60,
        "tasks": [
            {"id": "a", "task": "t", "args": [1, [2]], "kwargs": {"k": {"n": None}}},
            {
                "id": "b",
                "task": "t",
                "depends_on": ["a"],
                "retries": 2,
                "retry_backoff": 0.25,
                "retry_backoff_max": 4,
                "timeout": 1.5,
                "queue": "q2",
                "node": "n1",
                "priority": 0,
            },
        ],
    }
    spec = parse_spec(full)
    assert parse_spec(spec.to_dict()) == spec
    assert spec.to_dict()["tasks"][1]["priority"] == 0  # an explicit 0 differs from "inherit"
    seed = load_spec_file(EXAMPLES / "seed000.yaml")
    assert parse_spec(seed.to_dict()) == seed


def test_to_dict_omits_defaults() -> None:
    assert parse_spec(one()).to_dict() == {"name": "j", "tasks": [{"id": "x", "task": "app.run"}]}


def test_spec_from_any() -> None:
    spec = parse_spec(one())
    assert spec_from_any(spec) is spec
    assert spec_from_any(one()) == spec

    class Builder:
        def build(self) -> JobSpec:
            return spec

    assert spec_from_any(Builder()) is spec
    with pytest.raises(SpecError, match="cannot make a job spec from int"):
        spec_from_any(5)


def test_a_hand_built_jobspec_is_validated_before_submit() -> None:
    from jobcenter.model.spec import JobSpec, TaskSpec, spec_from_any

    looped = JobSpec(
        name="by-hand",
        tasks=(TaskSpec(id="a", task="t.a", depends_on=("b",)),
               TaskSpec(id="b", task="t.b", depends_on=("a",))),
    )  # fmt: skip
    with pytest.raises(SpecError, match="cycle: a -> b -> a"):
        spec_from_any(looped)
    parsed = parse_spec({"name": "ok", "tasks": [{"id": "a", "task": "t.a"}]})
    assert spec_from_any(parsed) is parsed  # what parse_spec made is not parsed again


# -- pools, limits and gates ------------------------------------------------------------


def test_limits_and_gates_parse_and_round_trip() -> None:
    spec = parse_spec(
        {
            "name": "limited",
            "max_running": 3,
            "tasks": [
                {
                    "id": "a",
                    "task": "t.a",
                    "kwargs": {"tenant": "acme"},
                    "pool": "gpu",
                    "pool_slots": 2,
                    "concurrency_key": "tenant-{tenant}",
                    "concurrency_limit": 2,
                    "requires": "warehouse",
                }
            ],
        }
    )
    task = spec.tasks[0]
    assert (spec.max_running, task.pool, task.pool_slots) == (3, "gpu", 2)
    assert task.rendered_key() == "tenant-acme" and task.requires == ("warehouse",)
    assert parse_spec(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"pool_slots": 2}, "'pool_slots' needs a 'pool'"),
        ({"pool": "g|pu"}, "'pool' must be"),
        ({"pool": "gpu", "pool_slots": 0}, "'pool_slots' must be an integer from 1"),
        ({"concurrency_key": "{tenant}"}, "give both"),
        ({"concurrency_limit": 2}, "give both"),
        (
            {"concurrency_key": "{tenant}", "concurrency_limit": 2},
            "names kwarg 'tenant', which the task does not have",
        ),
        ({"concurrency_key": "", "concurrency_limit": 2}, "must be a text template"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "'concurrency_limit' must be"),
        ({"requires": []}, "'requires' must be a gate name or a list"),
        ({"requires": ["ok", "not ok"]}, "'requires' must be"),
    ],
)
def test_bad_limits_and_gates_are_refused_naming_the_problem(
    task: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=f"task 'a'.*{re.escape(message)}"):
        parse_spec({"name": "bad", "tasks": [{"id": "a", "task": "t.a", **task}]})


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_a_bad_max_running_is_refused(value: object) -> None:
    with pytest.raises(SpecError, match="'max_running' must be"):
        parse_spec({"name": "bad", "max_running": value, "tasks": [{"id": "a", "task": "t"}]})
