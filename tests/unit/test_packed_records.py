"""A packed record (storage/packed.py) reads back as the tasks hash and history it was made
from, whatever the job's size: one task (each column a single value), a few, or more than a
part holds; integer columns, repeated values and arbitrary bytes alike. A succeeded job's
record leaves the working fields out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobcenter.storage.packed import decode, encode
from jobcenter.storage.schema import INTEGER_FIELDS, WORKING_FIELDS, TaskField

INTEGER = st.integers(0, 2**53).map(lambda n: str(n).encode())  # as Redis holds them
# history columns are UTF-8 text (no surrogates); only the last, the error, may hold a tab
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t"), max_size=20)
ERROR = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


def task_fields(tasks: int) -> st.SearchStrategy[dict[str, bytes]]:
    def value(field: TaskField) -> st.SearchStrategy[bytes]:
        if field in INTEGER_FIELDS:
            return INTEGER
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
    dropped = () if working else tuple(f.value for f in WORKING_FIELDS)
    assert packed.fields == {k: v for k, v in fields.items() if not k.startswith(dropped)}
    assert packed.history == history
