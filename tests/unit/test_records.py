"""The typed records read what the schema's writers wrote, through the schema's names."""

from __future__ import annotations

import pytest

from jobcenter.model import codec
from jobcenter.storage.keyspace.layout import Layout
from jobcenter.storage.keyspace.records import JobRecord, TaskPayload, TaskRecord
from jobcenter.storage.keyspace.schema import JobField, TaskField


def test_payload_reads_what_layout_writes() -> None:
    spec = {
        "name": "j",
        "tasks": [
            {
                "id": "a",
                "task": "add",
                "args": [1, 2],
                "kwargs": {"x": 3},
                "timeout": 5,
                "retry_backoff": 2.0,
                "requires": ["g"],
            },
        ],
    }
    pairs = Layout(spec).pairs(0, 1)  # type: ignore[arg-type]
    fields = dict(zip(pairs[::2], pairs[1::2], strict=True))
    payload = TaskPayload.unpack(fields[TaskField.PAYLOAD.of(0)])
    assert payload == TaskPayload(
        task="add",
        id="a",
        args=(1, 2),
        kwargs={"x": 3},
        timeout=5,
        retry_backoff=2.0,
        retry_backoff_max=300.0,
        gates=("g",),
    )


@pytest.mark.parametrize("raw", [codec.pack([1]), codec.pack({"a": []})])
def test_payload_that_is_not_a_task_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a task"):
        TaskPayload.unpack(raw)


def test_job_record_reads_the_job_fields() -> None:
    job = JobRecord.from_hash(
        {JobField.STATE: b"running", JobField.TASKS: b"3", JobField.STOP: b"cancel"}
    )
    assert (job.state, job.tasks, job.left, job.written, job.stop) == ("running", 3, 1, 0, "cancel")
    assert JobRecord.from_hash({}).state is None


def test_task_records_read_each_task_of_a_job() -> None:
    raw = {
        TaskField.STATE.of(2): b"queued",
        TaskField.ATTEMPTS.of(2): b"2",
        TaskField.WAITING_FOR.of(2): b"1000|etl.load",
        TaskField.LIMITS.of(2): b"p:gpu",
        TaskField.STATE.of(10): b"succeeded",
        TaskField.MAP_INSTANCES.of(10): b"11|3",
        TaskField.CREATED_AT.of(10): b"5000",
    }
    tasks = TaskRecord.of_every_task(raw)
    assert sorted(tasks) == ["10", "2"]
    queued, mapped = tasks["2"], tasks["10"]
    assert (queued.state, queued.attempts, queued.waiting_for, queued.limited) == (
        "queued",
        2,
        "1000|etl.load",
        True,
    )
    assert (queued.error, queued.finished_at, queued.max_attempts) == (None, None, None)
    assert (mapped.map_instances, mapped.created_at, mapped.limited) == ("11|3", 5000, False)
    assert TaskRecord.from_fields({}).attempts == 0
