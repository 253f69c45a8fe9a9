"""A packed record (storage/keyspace/packed.py) reads back as the tasks hash and history it was made
from, whatever the job's size: one task (each column a single value), a few, or more than a
part holds; integer columns, repeated values and arbitrary bytes alike; whatever the job
ended as, every field is kept (a succeeded job's tasks may be cleared to run again). A record
an earlier jobcenter wrote for a succeeded job, its payloads as names and arguments, still
reads back as those."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from jobcenter.model import codec
from jobcenter.storage.keyspace.packed import ARGS_COLUMN, NAME_COLUMN, decode, encode
from jobcenter.storage.keyspace.schema import (
    INTEGER_FIELDS,
    PackedKey,
    PayloadKey,
    TaskField,
)

INTEGER = st.integers(0, 2**53).map(lambda n: str(n).encode())  # as Redis holds them
# history columns are UTF-8 text (no surrogates); only the last, the error, may hold a tab
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t"), max_size=20)
ERROR = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
MAP_MARKERS = {*range(0x80, 0x90), 0xDE, 0xDF}  # the first byte of a msgpack map


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
@given(job=jobs())
def test_a_record_reads_back_as_the_hash_and_history_it_was_made_from(
    job: tuple[int, dict[str, bytes], list[bytes]],
) -> None:
    tasks, fields, history = job
    packed = decode(encode(fields, history, tasks))
    assert packed.fields == fields
    assert packed.history == history


def test_a_succeeded_job_an_earlier_jobcenter_packed_reads_back_names_and_arguments() -> None:
    """Its record kept each payload as a name column and an arguments column (absent when a
    task had none), and no working field."""
    names = {PackedKey.DICT.value: [b"etl.load"], PackedKey.INDEXES.value: [0, 0]}
    part = {
        PackedKey.KIND.value: PackedKey.TASKS.value,
        PackedKey.COUNT.value: 2,
        PackedKey.FIRST.value: 0,
        PackedKey.COLUMNS.value: {
            "s": [b"succeeded", b"succeeded"],
            NAME_COLUMN: names,
            ARGS_COLUMN: [codec.pack({PayloadKey.ARGS.value: [1]}), None],
        },
    }
    packed = decode(msgpack.packb(part, use_bin_type=True))
    payloads = {k: codec.unpack(v) for k, v in packed.fields.items() if k.startswith("p:")}
    assert payloads == {"p:0": {"t": "etl.load", "a": [1]}, "p:1": {"t": "etl.load"}}
    assert packed.fields["s:1"] == b"succeeded"
