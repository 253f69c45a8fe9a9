"""Compaction: once a job is finished a leader packs its tasks hash and history into one
record (storage/keyspace/packed.py) and compact.lua swaps it in; status, history, the dashboard's
reads and dead letters read it back as it was; a retry unpacks it; retention and delete
free it."""

from __future__ import annotations

import io
from collections.abc import Collection
from typing import Any

import msgpack
import pytest
from lua_helpers import (
    H1,
    H2,
    LEADER,
    NO_RETRY,
    claim,
    claim_by_index,
    complete_one,
    heartbeat_one,
    job_field,
    leader_messages,
    submit,
    untouched,
)

import jobcenter.storage.jobs.lifecycle
import jobcenter.storage.store
from jobcenter.model import codec
from jobcenter.runtime.leader import Leader
from jobcenter.storage import admin, views
from jobcenter.storage.jobs.attempts import HEARTBEAT_CANCELLED
from jobcenter.storage.keyspace.packed import decode
from jobcenter.storage.keyspace.schema import TaskField, code
from jobcenter.storage.store import CURSOR_MOVED, Store

# A seed-000-like DAG: a retried task, an error with a tab and non-ASCII text, a fan-in.
DAG = {
    "name": "packed",
    "tasks": [
        {"id": "extract", "task": "t.a", "retries": 2},
        {"id": "left", "task": "t.b", "depends_on": ["extract"], "args": [1, "x"]},
        {"id": "right", "task": "t.b", "depends_on": ["extract"], "kwargs": {"k": [1, 2]}},
        {"id": "join", "task": "t.c", "depends_on": ["left", "right"]},
    ],
}
ODD_ERROR = "Traceback:\n\tline 1\tfailed: naïve café ☃"


def _run(store: Store, job_id: str, fail: Collection[str] = ()) -> None:
    """Run every task to its end: `extract` fails once then retries; tasks in `fail` fail
    for good; the others succeed."""
    first = True
    while started := claim(store, H1, 100):
        for t in started:
            task_id = store.records(job_id).values([f"id:{t.index}"])[0].decode()
            if task_id == "extract" and first:
                first = False
                store.fail(H1, job_id, t.index, t.token, ODD_ERROR, 0)
            elif task_id in fail:
                store.fail(H1, job_id, t.index, t.token, ODD_ERROR, NO_RETRY)
            else:
                assert complete_one(store, H1, job_id, t.index, t.token) == 0


def _settle(store: Store, job_id: str) -> None:
    """Play the leader: the job's compaction message is pending; run it."""
    assert leader_messages(store, job_id) == {"compact"}
    Leader(store, LEADER).compact(job_id)
    assert leader_messages(store, job_id) == set()


def _reads(store: Store, job_id: str) -> dict[str, Any]:
    """Everything a reader shows of the job's tasks and history."""
    graph = views.job_graph(store, job_id)
    return {
        "status": store.status(job_id),
        "history": store.history(job_id),
        "history page": store.history(job_id, start=1, count=2),
        "graph": (graph.ids, graph.states, graph.edges, graph.edges_known),
        "live": views.live_states(store, job_id).states,
        "detail": [views.task_detail(store, job_id, i) for i in range(4)],
        "fields": store.task_fields(job_id, TaskField.STATE, TaskField.ATTEMPTS, TaskField.ERROR),
    }


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_finished_job_is_one_packed_record_that_reads_back_as_it_was(
    store: Store, outcome: str
) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id, fail={"right"} if outcome == "failed" else ())
    jk = store.keys.job(job_id)
    as_it_was = _reads(store, job_id)
    tasks_hash = store.redis.hgetall(jk.tasks)
    _settle(store, job_id)

    assert job_field(store, job_id, "state") == outcome
    assert job_field(store, job_id, "packed") == "1"
    assert store.redis.exists(jk.tasks, jk.history, jk.frontier) == 0
    assert store.redis.type(jk.packed) == b"string"
    assert 0 < store.redis.pttl(jk.packed) <= store.redis.pttl(jk.job) + 5
    packed = _reads(store, job_id)
    assert packed == as_it_was
    assert packed["graph"][2:] == ([(0, 1), (0, 2), (1, 3), (2, 3)], True)
    assert packed["detail"][1].task == "t.b"
    assert packed["detail"][1].args == '{"args": [1, "x"], "kwargs": {}}'
    assert packed["detail"][0].max_attempts == 3

    # the tasks hash and history exactly as they were packed, a succeeded job's too: each
    # field a run needs (a clear runs its tasks again)
    assert store.restore(job_id)
    assert store.redis.hgetall(jk.tasks) == tasks_hash
    assert job_field(store, job_id, "packed") is None
    assert not store.redis.exists(jk.packed)
    assert store.redis.pttl(jk.tasks) > 0 and store.redis.pttl(jk.history) > 0
    unpacked = _reads(store, job_id)
    payload = codec.unpack(store.redis.hget(jk.tasks, "p:1"))
    assert payload["id"] == "left" and payload["a"] == [1, "x"]  # type: ignore[index]
    assert packed == unpacked
    assert [h["attempt"] for h in packed["history"] if h["task"] == "extract"] == [1, 2]
    assert packed["status"]["tasks"]["extract"]["attempts"] == 2
    assert ODD_ERROR in [h["error"] for h in packed["history"]]


def test_the_record_is_msgpack_parts_column_by_column(store: Store) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id)
    _settle(store, job_id)
    raw = store.redis.get(store.keys.job(job_id).packed)
    parts = list(msgpack.Unpacker(io.BytesIO(raw), raw=False))
    assert [p["k"] for p in parts] == ["t", "h"]
    tasks = parts[0]
    assert (tasks["i"], tasks["n"]) == (0, 4)
    assert tasks["c"]["id"] == [b"extract", b"left", b"right", b"join"]
    assert tasks["c"]["s"] == {"d": [b"succeeded"], "x": [0, 0, 0, 0]}  # few distinct values
    assert set(tasks["c"]["tf"]) == {"b", "v"}  # times: a base and small offsets
    assert len(tasks["c"]["p"]) == 4 and "d" in tasks["c"]  # what a run needs: kept
    assert len(decode(raw).history) == parts[1]["n"] == 5


def test_a_failed_packed_job_is_retried_to_success(store: Store) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id, fail={"left"})
    _settle(store, job_id)
    assert job_field(store, job_id, "packed") == "1"
    assert admin.dead_letter(store, job_id, "left")["error"] == ODD_ERROR

    assert admin.retry_job(store, job_id) == 2  # left again, join back to waiting
    assert job_field(store, job_id, "state") == "running"
    assert job_field(store, job_id, "packed") is None
    _run(store, job_id)
    assert job_field(store, job_id, "state") == "succeeded"
    _settle(store, job_id)  # packed again when it ends
    assert job_field(store, job_id, "packed") == "1"
    history = store.history(job_id)
    assert [h["state"] for h in history if h["task"] == "left"] == ["failed", "succeeded"]


def test_a_cancelled_job_is_packed_and_its_revoked_attempts_are_told_to_stop(
    store: Store,
) -> None:
    job_id = submit(store, DAG)
    (extract,) = claim(store, H1)
    store.stop_job(job_id, "cancel")
    _settle(store, job_id)
    assert job_field(store, job_id, "packed") == "1"
    assert heartbeat_one(store, H1, job_id, 0, extract.token) == HEARTBEAT_CANCELLED
    assert complete_one(store, H1, job_id, 0, extract.token) == -2  # no attempt is current
    assert store.fail(H1, job_id, 0, extract.token, "late", NO_RETRY) == (
        code("JOB_STOPPED"),
        None,
    )
    assert set(t["state"] for t in store.status(job_id)["tasks"].values()) == {"cancelled"}


def test_a_large_record_is_written_in_parts_and_read_as_the_hash_until_the_last(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobcenter.storage.jobs.lifecycle, "RECORD_PART", 4_096)
    tasks = [{"id": f"t{k}", "task": "t.x"} for k in range(2_100)]
    job_id = submit(store, {"name": "large", "tasks": tasks})
    Leader(store, LEADER).split(job_id)
    while started := claim_by_index(store, H2, 1_000):
        store.complete(H2, [(job_id, i, t.token) for i, t in started.items()])
    jk = store.keys.job(job_id)
    before = store.status(job_id)
    updated_at = store.redis.hget(jk.job, "updated_at")
    calls: list[int] = []
    write = store._job_call

    def spy(name: str, job: str, args: list[Any], **kw: Any) -> Any:
        if name == "compact":
            calls.append(args[1])
            if len(calls) == 2:  # half way: readers still read the hash
                assert store.status(job_id) == before
                assert job_field(store, job_id, "packed") is None
        return write(name, job, args, **kw)

    monkeypatch.setattr(store, "_job_call", spy)
    reader = store.records(job_id)  # a reader that saw the job unpacked ...
    assert store.compact(job_id)
    assert len(calls) > 2 and calls[0] == 0  # bytes written before each part
    assert job_field(store, job_id, "packed") == "1"
    assert store.redis.exists(jk.tasks, jk.history) == 0
    assert store.status(job_id) == before
    assert len(store.history(job_id)) == 2_100
    assert reader.every_field() == store.records(job_id).every_field()  # ... reads the record
    assert reader.history(0, -1) == store.records(job_id).history(0, -1)
    assert updated_at == store.redis.hget(jk.job, "updated_at")


def _finished(store: Store, fail: Collection[str] = ()) -> str:
    """A job of DAG run to its end (_run), its compaction message pending."""
    job_id = submit(store, DAG)
    _run(store, job_id, fail)
    return job_id


def _round_trips(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the store's round trips from now on: one send per command or pipeline."""
    sends: list[int] = []
    connection = store.redis.connection_pool.connection_class
    send = connection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sends.append(1)
        send(self, command, check_health)

    monkeypatch.setattr(connection, "send_packed_command", counted)
    return sends


def test_small_finished_jobs_are_compacted_together_in_three_round_trips(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader's batch of compactions reads every small job in one pipeline and writes
    their records in another; a bigger job, and one with nothing to do, go alone."""
    small = [_finished(store) for _ in range(3)]
    failed = _finished(store, fail={"right"})
    big = submit(
        store, {"name": "big", "tasks": [{"id": f"t{k}", "task": "t.x"} for k in range(5)]}
    )
    while started := claim_by_index(store, H2, 10):
        store.complete(H2, [(big, i, t.token) for i, t in started.items()])
    running = submit(store, DAG)  # a stray message for a job still running: dropped
    store.redis.zadd(store.keys.job(running).leader, {f"compact|{running}": 0})
    jobs = [*small, failed]
    as_they_were = {job_id: _reads(store, job_id) for job_id in [*jobs, big]}

    sends = _round_trips(store, monkeypatch)
    Leader(store, LEADER).compact_many(jobs)
    assert len(sends) == 3
    monkeypatch.setattr(jobcenter.storage.jobs.lifecycle, "COMPACT_BATCH_TASKS_MAX", 4)
    Leader(store, LEADER).compact_many([big, running])

    for job_id in [*jobs, big]:
        assert job_field(store, job_id, "packed") == "1"
        assert leader_messages(store, job_id) == set()
        packed = _reads(store, job_id)
        assert packed["status"] == as_they_were[job_id]["status"]
        assert packed["history"] == as_they_were[job_id]["history"]
    assert _reads(store, failed) == as_they_were[failed]  # a failed job keeps every field
    assert job_field(store, running, "packed") is None
    assert leader_messages(store, running) == set()


def test_a_job_changed_between_the_batched_read_and_write_is_read_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compact.lua refuses the batch's record of a job that changed since the batch read it
    (here: its updated_at moves, as a retry moves it); that job is read again alone."""
    changed, other = _finished(store, fail={"left"}), _finished(store)
    encode = jobcenter.storage.jobs.lifecycle.packed_encode
    moved: list[bytes] = []

    def encode_then_change(*args: Any) -> bytes:
        if not moved:  # the first job's record is made from what is no longer so
            moved.append(store.redis.hget(store.keys.job(changed).job, "updated_at"))
            store.redis.hset(store.keys.job(changed).job, "updated_at", "1")
        return encode(*args)

    monkeypatch.setattr(jobcenter.storage.jobs.lifecycle, "packed_encode", encode_then_change)
    as_it_was = _reads(store, changed)
    Leader(store, LEADER).compact_many([changed, other])

    assert moved and job_field(store, changed, "updated_at") == "1"  # the refusal came first
    for job_id in (changed, other):
        assert job_field(store, job_id, "packed") == "1"
        assert leader_messages(store, job_id) == set()
    assert _reads(store, changed) == as_it_was


def test_a_record_written_for_a_job_that_changed_since_is_refused(store: Store) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id, fail={"left"})
    jk = store.keys.job(job_id)
    updated_at = store.redis.hget(jk.job, "updated_at")
    with untouched(store):  # read before a change: refused, nothing written
        assert store._job_call("compact", job_id, [b"1", 0, 1, b"x", 1], with_meta=False)[0] == (
            CURSOR_MOVED
        )
        # a later part whose earlier parts another leader did not write
        assert (
            store._job_call("compact", job_id, [updated_at, 7, 1, b"x", 1], with_meta=False)[0]
            == CURSOR_MOVED
        )
    assert store.compact(job_id)
    with untouched(store):  # packed already: nothing to do
        assert not store.compact(job_id)


def test_delete_removes_the_packed_record(store: Store) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id)
    _settle(store, job_id)
    admin.delete_job(store, job_id)
    assert not store.redis.exists(store.keys.job(job_id).packed)


def test_a_restore_refused_changes_nothing(store: Store) -> None:
    job_id = submit(store, DAG)
    _run(store, job_id, fail={"left"})
    _settle(store, job_id)
    with untouched(store):  # another restore moved the cursor: -6, nothing written
        assert store._job_call("restore", job_id, [5, 1, 0], with_meta=False)[0] == -6
    assert store.restore(job_id)
    with untouched(store):  # not packed: nothing to restore
        assert store._job_call("restore", job_id, [0, 1, 0], with_meta=False)[0] == 1
        assert not store.restore(job_id)


def test_results_and_inputs_survive_compaction_of_a_succeeded_job(
    store: Store,
) -> None:
    job_id = submit(store, {"name": "results", "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "depends_on": ["a"], "inputs": {"x": "a"}},
    ]})  # fmt: skip
    while started := claim(store, H1):
        for t in started:
            value = codec.pack({"from": t.index, "bytes": b"\x00\xff"})
            codes, _ = store.complete(H1, [(job_id, t.index, t.token, value)])
            assert codes == {(job_id, t.index): 0}
    before = store.results(job_id)
    _settle(store, job_id)

    assert job_field(store, job_id, "packed") == "1"
    assert (
        store.results(job_id)
        == before
        == {
            "a": {"from": 0, "bytes": b"\x00\xff"},
            "b": {"from": 1, "bytes": b"\x00\xff"},
        }
    )
    assert store.result(job_id, "b") == {"from": 1, "bytes": b"\x00\xff"}
    assert views.task_detail(store, job_id, 1).result is not None
    assert store.records(job_id).values(["in:1"]) == [b"x=0"]  # a working field: kept
