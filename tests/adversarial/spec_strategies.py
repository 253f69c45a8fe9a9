"""Hypothesis strategies for job specs: valid ones, and the malformed ones a hostile or
careless user writes, each paired with the field the error message must name."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from jobcenter.model.spec import MAX_PRIORITY, MAX_RETRIES, MAX_SECONDS

# Bounded runs: each file or CLI example costs a write and a parse; a pure check's examples
# cost their generation: 100, hypothesis's default (200 took 14 s for these nine tests
# instead of 6). The deadline only trips on a pathological input (a parse taking seconds,
# as an alias bomb did), never on a loaded CI machine's ordinary jitter.
DEADLINE = timedelta(seconds=10)
PURE = settings(max_examples=100, deadline=DEADLINE, suppress_health_check=[HealthCheck.too_slow])
FILES = settings(max_examples=150, deadline=DEADLINE, suppress_health_check=list(HealthCheck))
CLI = settings(max_examples=100, deadline=DEADLINE, suppress_health_check=list(HealthCheck))

JOB_FIELDS = ("name", "owner", "priority", "queue", "idempotency_key", "retention", "tasks")
TASK_FIELDS = (
    "id",
    "task",
    "args",
    "kwargs",
    "depends_on",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "queue",
    "node",
    "priority",
)

# What a refusal's message must contain to name the field that was broken. A broken id
# may surface where the id is used (a dependency on it, a repeat of it).
_NAMED_BY: dict[str, tuple[str, ...]] = {
    "id": ("id", "depends on unknown task"),
    "depends_on": ("'depends_on'", "depends on", "cycle: "),
    "args": ("args",),
    "kwargs": ("kwargs",),
    "tasks": ("tasks",),
    "retry_backoff": ("'retry_backoff'", "'retry_backoff_max'"),
    "retry_backoff_max": ("'retry_backoff'", "'retry_backoff_max'"),
}


# --- valid specs ----------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,11}", fullmatch=True)
task_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:-]{0,15}", fullmatch=True)
# What str.isprintable accepts: letters, marks, numbers, punctuation, symbols, and space.
labels = st.text(
    st.characters(categories=("L", "M", "N", "P", "S")) | st.just(" "), min_size=1, max_size=20
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=10),
)
plain_data = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
seconds = st.floats(min_value=0.001, max_value=MAX_SECONDS)


@st.composite
def valid_specs(draw: st.DrawFn, max_tasks: int = 6) -> dict[str, Any]:
    """A valid spec: a DAG (each task depends only on earlier ones) with optional fields."""
    task_ids = draw(st.lists(ids, min_size=1, max_size=max_tasks, unique=True))
    tasks = []
    for i, task_id in enumerate(task_ids):
        task: dict[str, Any] = {"id": task_id, "task": draw(task_names)}
        if i and draw(st.booleans()):
            task["depends_on"] = draw(
                st.lists(st.sampled_from(task_ids[:i]), min_size=1, max_size=3, unique=True)
            )
        optional = {
            "args": st.lists(plain_data, max_size=3),
            "kwargs": st.dictionaries(st.text(max_size=5), plain_data, max_size=3),
            "retries": st.integers(0, MAX_RETRIES),
            "timeout": seconds,
            "queue": ids,
            "node": ids,
            "priority": st.integers(-MAX_PRIORITY, MAX_PRIORITY),
        }
        task.update(draw(st.fixed_dictionaries({}, optional=optional)))
        if draw(st.booleans()):
            low, high = sorted((draw(seconds), draw(seconds)))
            task.update(retry_backoff=low, retry_backoff_max=high)
        tasks.append(task)
    job_optional = {
        "owner": ids,
        "priority": st.integers(-MAX_PRIORITY, MAX_PRIORITY),
        "queue": ids,
        "idempotency_key": labels,
        "retention": seconds,
    }
    job: dict[str, Any] = {
        "name": draw(labels),
        **draw(st.fixed_dictionaries({}, optional=job_optional)),
    }
    job["tasks"] = tasks
    return job


# --- garbage --------------------------------------------------------------------------

SPECIAL_STRINGS = [
    "",
    " ",
    "\x00",
    "\t",
    "\n",
    "a|b",
    "a:b",
    "{x}",
    "a b",
    "-lead",
    "é",
    "日本語",
    "\u202eevil",
    "\u2028",
    "🙂",
    "x" * 129,
    "y" * 201,
    "z" * 100_000,
]
SPECIAL_NUMBERS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    1e300,
    -1e300,
    10**400,
    -(10**400),
    2**64,
    -(2**63) - 1,
    MAX_SECONDS + 1,
    MAX_RETRIES + 1,
    MAX_PRIORITY + 1,
    -1,
    0,
]


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# Values a JSON or YAML file can hold.
file_garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.sampled_from(SPECIAL_NUMBERS),
    st.text(max_size=20),
    st.sampled_from(SPECIAL_STRINGS),
    st.lists(st.one_of(st.integers(), st.text(max_size=5), st.none()), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.integers(30, 100).map(nested_lists),
)
# Values only Python code can pass (the client, the builder).
python_garbage = st.one_of(
    file_garbage,
    st.binary(max_size=10),
    st.sets(st.integers(), max_size=3),
    st.tuples(st.integers(), st.text(max_size=3)),
    st.just(object()),
    st.just(datetime.date(2026, 1, 1)),
    st.complex_numbers(allow_nan=True),
    st.integers(33, 5000).map(nested_lists),
)


@dataclass(frozen=True)
class Broken:
    """A spec with one field broken, and the field its refusal must name."""

    spec: dict[str, Any]
    field: str
    unknown: bool = False  # the field is one a spec does not have

    def named_by(self, message: str) -> bool:
        """Whether an error message names the broken field."""
        if self.unknown:  # shown as its repr; a long one is cut in the middle
            return "unknown key" in message and repr(self.field)[:20] in message
        return any(part in message for part in _NAMED_BY.get(self.field, (f"'{self.field}'",)))


@st.composite
def broken_specs(draw: st.DrawFn, garbage: st.SearchStrategy[Any] = python_garbage) -> Broken:
    """A valid spec with one field replaced by garbage, a required field dropped, or an
    unknown field added (at the job or at one task)."""
    spec = draw(valid_specs())
    tasks = spec["tasks"]
    at_task = draw(st.booleans())
    target = tasks[draw(st.integers(0, len(tasks) - 1))] if at_task else spec
    fields = TASK_FIELDS if at_task else JOB_FIELDS
    how = draw(st.sampled_from(("replace", "replace", "replace", "drop", "unknown")))
    if how == "unknown":
        key = draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in fields))
        target[key] = draw(file_garbage)
        return Broken(spec, key, unknown=True)
    if how == "drop":
        field = draw(st.sampled_from(("id", "task") if at_task else ("name", "tasks")))
        del target[field]
        return Broken(spec, field)
    field = draw(st.sampled_from(fields))
    target[field] = draw(garbage)
    return Broken(spec, field)
