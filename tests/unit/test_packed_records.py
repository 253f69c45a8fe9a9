"""A packed record (storage/keyspace/packed.py) reads back as the tasks hash and history it was made
from, whatever the job's size: one task (each column a single value), a few, or more than a
part holds; integer columns, repeated values and arbitrary bytes alike. A succeeded job's
record leaves the working fields out but for what its readers show: the edges, map links,
queue, attempts allowed, and each task's name and arguments."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobcenter.model import codec
from jobcenter.storage.keyspace.packed import decode, encode
from jobcenter.storage.keyspace.schema import (
    INTEGER_FIELDS,
    SHOWN_WORKING_FIELDS,
    WORKING_FIELDS,
    PayloadKey,
    TaskField,
)

INTEGER = st.integers(0, 2**53).map(lambda n: str(n).encode())  # as Redis holds them
# history columns are UTF-8 text (no surrogates); only the last, the error, may hold a tab
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t"), max_size=20)
ERROR = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
MAP_MARKERS = {*range(0x80, 0x90), 0xDE, 0xDF}  # the first byte of a msgpack map
PLAIN = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
ARG = st.recursive(PLAIN | st.binary(max_size=8), lambda inner: st.lists(inner, max_size=3))


def task_fields(tasks: int) -> st.SearchStrategy[dict[str, bytes]]:
    def value(field: TaskField) -> st.SearchStrategy[bytes]:
        if field in INTEGER_FIELDS:
            return INTEGER
        if field is TaskField.PAYLOAD:  # bytes that are no payload (never a msgpack map)
            return st.binary(max_size=30).filter(lambda b: not b or b[0] not in MAP_MARKERS)
        return st.sampled_from([b"queued", b"succeeded"]) | st.binary(max_size=30)

    per_field = [
        st.dictionaries(st.integers(0, tasks - 1), value(f), max_size=tasks).map(
            lambda by_index, f=f: {f"{f.value}{i}": v for i, v in by_index.items()}
        )
        for f in TaskField
    ]
    return st.tuples(*per_field).map(lambda parts: {k: v for p in parts for k, v in p.items()})


def history_entry() -> st.SearchStrategy[bytes]:
    number = st.integers(0, 2**50).map(str)
    columns = st.tuples(number, number, TEXT, TEXT, number | st.just(""), number, ERROR)
    return columns.map(lambda c: "\t".join(c).encode())


@st.composite
def jobs(draw: st.DrawFn) -> tuple[int, dict[str, bytes], list[bytes]]:
    tasks = draw(st.sampled_from([1, 1, 2, 5, 40]))
    return tasks, draw(task_fields(tasks)), draw(st.lists(history_entry(), max_size=12))


@settings(max_examples=100, deadline=None)
@given(job=jobs(), working=st.booleans())
def test_a_record_reads_back_as_the_hash_and_history_it_was_made_from(
    job: tuple[int, dict[str, bytes], list[bytes]], working: bool
) -> None:
    tasks, fields, history = job
    packed = decode(encode(fields, history, tasks, working))
    freed = [f for f in WORKING_FIELDS if f not in SHOWN_WORKING_FIELDS]
    dropped = () if working else tuple(f.value for f in freed)
    assert packed.fields == {k: v for k, v in fields.items() if not k.startswith(dropped)}
    assert packed.history == history


def payloads(tasks: int) -> st.SearchStrategy[dict[int, dict[str, Any]]]:
    payload = st.fixed_dictionaries(
        {
            PayloadKey.TASK.value: st.sampled_from(["etl.extract", "etl.load", "x"]),
            PayloadKey.ID.value: st.text(min_size=1, max_size=8),
            PayloadKey.TIMEOUT.value: st.none() | st.floats(0.1, 99),
        },
        optional={
            PayloadKey.ARGS.value: st.lists(ARG, max_size=3),
            PayloadKey.KWARGS.value: st.dictionaries(st.text(max_size=5), ARG, max_size=2),
        },
    )
    return st.dictionaries(st.integers(0, tasks - 1), payload, min_size=1, max_size=tasks)


@settings(max_examples=100, deadline=None)
@given(tasks=st.sampled_from([1, 3, 1_500]), data=st.data())
def test_a_succeeded_job_keeps_each_task_name_and_arguments_and_drops_the_rest(
    tasks: int, data: st.DataObject
) -> None:
    by_index = data.draw(payloads(tasks))
    fields = {TaskField.PAYLOAD.of(i): codec.pack(p) for i, p in by_index.items()}
    fields[TaskField.CHILDREN.of(0)] = b"1,2"
    fields[TaskField.DEPS_LEFT.of(0)] = b"0"

    packed = decode(encode(fields, [], tasks, working=False))

    shown = {
        TaskField.PAYLOAD.of(i): {k: v for k, v in p.items() if k in ("t", "a", "k") and v}
        for i, p in by_index.items()
    }
    assert {k: codec.unpack(v) for k, v in packed.fields.items() if k.startswith("p:")} == shown
    assert packed.fields[TaskField.CHILDREN.of(0)] == b"1,2"  # the picture's edges are kept
    assert TaskField.DEPS_LEFT.of(0) not in packed.fields  # what only a run needs is not
