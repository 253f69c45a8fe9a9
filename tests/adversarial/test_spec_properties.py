"""Property tests of spec validation (parse_spec, the builder, the DAG check): whatever a
caller passes, the answer is a JobSpec or a SpecError that names the problem, never
another exception, a crash or a hang."""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spec_strategies import PURE, Broken, broken_specs, python_garbage, valid_specs

from jobcenter.errors import SpecError
from jobcenter.model import codec
from jobcenter.model.builder import Job
from jobcenter.model.dag import check_dag
from jobcenter.model.spec import ID_RE, MAX_TASK_PAYLOAD_BYTES, parse_spec

# An error names one problem in a line or two: no value is pasted into it whole.
MESSAGE_MAX_CHARS = 400


def refusal(data: Any) -> str:
    """The SpecError message parse_spec gives for `data` (failing if it accepts it)."""
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    message = str(info.value)
    assert len(message) <= MESSAGE_MAX_CHARS, message
    return message


@PURE
@given(broken_specs())
def test_a_broken_field_is_refused_naming_it(broken: Broken) -> None:
    try:
        spec = parse_spec(broken.spec)
    except SpecError as exc:
        message = str(exc)
        assert broken.named_by(message), f"{broken.field!r} not named in: {message}"
        assert len(message) <= MESSAGE_MAX_CHARS, message
    else:  # the garbage happened to be valid there (a 0 priority, a None timeout)
        assert not broken.unknown
        assert parse_spec(spec.to_dict()) == spec


@PURE
@given(st.one_of(python_garbage, st.dictionaries(st.text(max_size=8), python_garbage)))
def test_any_value_at_all_is_refused_with_a_spec_error(data: Any) -> None:
    refusal(data)


@PURE
@given(valid_specs(), st.randoms())
def test_a_valid_spec_parses_in_any_task_order_and_round_trips(
    data: dict[str, Any], rnd: random.Random
) -> None:
    rnd.shuffle(data["tasks"])
    spec = parse_spec(data)
    assert parse_spec(spec.to_dict()) == spec
    order = check_dag([t.id for t in spec.tasks], {t.id: t.depends_on for t in spec.tasks})
    position = {task_id: i for i, task_id in enumerate(order)}
    for task in spec.tasks:
        assert all(position[dep] < position[task.id] for dep in task.depends_on)


@PURE
@given(valid_specs(max_tasks=8), st.data())
def test_a_cycle_is_refused_naming_a_real_cycle(data: dict[str, Any], draw: st.DataObject) -> None:
    tasks = data["tasks"]
    i = draw.draw(st.integers(0, len(tasks) - 1))
    j = draw.draw(st.integers(i, len(tasks) - 1))
    a, b = tasks[i], tasks[j]
    b["depends_on"] = [*b.get("depends_on", []), a["id"]]
    a["depends_on"] = [*a.get("depends_on", []), b["id"]]  # a needs b, which needs a
    message = refusal(data)
    if i == j:
        assert message == f"task {a['id']!r} depends on itself"
        return
    assert message.startswith("cycle: "), message
    path = message.removeprefix("cycle: ").split(" -> ")
    deps = {t["id"]: set(t.get("depends_on", [])) for t in tasks}
    assert path[0] == path[-1] and len(path) > 2
    for upstream, downstream in zip(path, path[1:], strict=False):  # "a -> b": b needs a
        assert upstream in deps[downstream], message


@PURE
@given(valid_specs(max_tasks=8), st.data())
def test_a_repeated_id_is_refused(data: dict[str, Any], draw: st.DataObject) -> None:
    tasks = data["tasks"]
    copy = dict(draw.draw(st.sampled_from(tasks)))
    copy.pop("depends_on", None)
    tasks.insert(draw.draw(st.integers(0, len(tasks))), copy)
    assert refusal(data) == f"duplicate task id {copy['id']!r}"


@PURE
@given(st.text(max_size=140) | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{100,140}", fullmatch=True))
def test_an_id_is_accepted_exactly_when_it_follows_the_rule(task_id: str) -> None:
    data = {"name": "j", "tasks": [{"id": task_id, "task": "app.run"}]}
    if ID_RE.fullmatch(task_id):
        assert parse_spec(data).tasks[0].id == task_id
    else:
        assert refusal(data).startswith("tasks[0]: invalid id ")


@PURE
@given(
    st.integers(MAX_TASK_PAYLOAD_BYTES - 40, MAX_TASK_PAYLOAD_BYTES + 10),
    st.integers(0, 30),
    st.sampled_from(["x", "é"]),
)
def test_the_task_payload_limit_is_exact(size: int, split: int, char: str) -> None:
    args = [char * (size // len(char.encode()) - split)]
    kwargs = {"k": "y" * split} if split else {}
    packed = len(codec.pack(args)) + (len(codec.pack(kwargs)) if kwargs else 0)
    data = {"name": "j", "tasks": [{"id": "a", "task": "app.run", "args": args, "kwargs": kwargs}]}
    if packed <= MAX_TASK_PAYLOAD_BYTES:
        parse_spec(data)
    else:
        assert "args and kwargs take more than 524288 bytes packed" in refusal(data)


@PURE
@given(python_garbage, python_garbage)
def test_the_builder_refuses_garbage_with_a_spec_error(task_id: Any, depends_on: Any) -> None:
    job = Job("j")
    try:
        job.task(task_id, "app.run", depends_on=depends_on)
        job.build()
    except SpecError as exc:
        assert len(str(exc)) <= MESSAGE_MAX_CHARS
    else:
        assert isinstance(task_id, str)


def test_a_payload_that_repeats_itself_is_refused_before_it_expands() -> None:
    """Shared references (what YAML aliases produce): six levels of ten copies of a
    kilobyte are a gigabyte once packed; the refusal must come without building it."""
    value: Any = "x" * 1024
    for _ in range(6):
        value = [value] * 10
    tracemalloc.start()
    try:
        message = refusal({"name": "j", "tasks": [{"id": "a", "task": "t", "args": [value]}]})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "args and kwargs take more than 524288 bytes packed" in message
    assert peak < 10 * 1024 * 1024, f"{peak} bytes allocated to refuse it"
