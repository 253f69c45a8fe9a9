"""The hashes the task path reads are hash tables, not listpacks whose every field read scans
the whole hash (schema.py, HASHTABLE_FIELD): a job of TASKS_HASHTABLE_MIN_TASKS tasks or more
has its tasks hash as one from its first start (or a retry's restore, a map's expansion), while
a smaller job, or one still waiting to run, keeps the compact form; a shard's metrics and
learned-estimates hashes from the task path's first write of a field to them, and once a
recovery pass ran (rule 10) for those loaded from disk. What Redis reports (OBJECT
ENCODING) is the proof; no hash keeps the field that converted it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from lua_helpers import H1, LEADER, NO_RETRY, claim, complete_one, job_field, submit

from jobcenter.model import codec
from jobcenter.runtime.leader import Leader
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.keyspace.schema import TASKS_HASHTABLE_MIN_TASKS
from jobcenter.storage.store import Store

SEED000 = Path(__file__).resolve().parents[2] / "examples" / "seed000.yaml"
COMPACT = {b"ziplist", b"listpack"}  # a small hash's encoding before / since Redis 7
TASK_FIELD = re.compile(r"[a-z]{1,2}:\d+")  # "<prefix><index>", and nothing else


def flat(n: int) -> dict[str, Any]:
    return {"name": "enc", "tasks": [{"id": f"t{i}", "task": "x"} for i in range(n)]}


def tasks_encoding(store: Store, job_id: str) -> bytes:
    tasks = store.keys.job(job_id).tasks
    fields = [f.decode() for f in store.redis.hkeys(tasks)]
    assert fields and all(TASK_FIELD.fullmatch(f) for f in fields), fields  # no marker left
    encoding: bytes = store.redis.object("encoding", tasks)
    return encoding


def test_a_seed000_job_keeps_its_compact_tasks_hash_until_its_first_task_starts(
    store: Store,
) -> None:
    """A job waiting in a backlog costs the compact form's memory; its first start converts
    its tasks hash, before any of its tasks reads it on the task path."""
    job_id = submit(store, yaml.safe_load(SEED000.read_text()))
    assert job_field(store, job_id, "state") == "running"  # split by its submit
    assert tasks_encoding(store, job_id) in COMPACT

    claim(store, H1, n=1)

    assert tasks_encoding(store, job_id) == b"hashtable"


@pytest.mark.parametrize(
    ("tasks", "hashtable"),
    [(1, False), (TASKS_HASHTABLE_MIN_TASKS - 1, False), (TASKS_HASHTABLE_MIN_TASKS, True)],
)
def test_only_a_job_of_enough_tasks_gives_up_the_compact_tasks_hash(
    store: Store, tasks: int, hashtable: bool
) -> None:
    job_id = submit(store, flat(tasks))
    claim(store, H1, n=1)

    assert tasks_encoding(store, job_id) in ({b"hashtable"} if hashtable else COMPACT)


def test_a_restored_job_gets_its_tasks_hash_back_as_a_hashtable(store: Store) -> None:
    job_id = submit(store, flat(TASKS_HASHTABLE_MIN_TASKS))
    first, *rest = claim(store, H1)
    store.fail(H1, job_id, first.index, first.token, "boom", NO_RETRY)
    for t in rest:
        assert complete_one(store, H1, job_id, t.index, t.token) == 0
    Leader(store, LEADER).compact(job_id)
    assert job_field(store, job_id, "packed") == "1"  # its tasks hash is gone

    assert store.restore(job_id)  # what a retry does first: the fields are written again
    assert tasks_encoding(store, job_id) == b"hashtable"


def test_a_map_that_makes_a_small_job_large_turns_its_tasks_hash_into_a_hashtable(
    store: Store,
) -> None:
    spec = {
        "name": "enc-map",
        "tasks": [
            {"id": "src", "task": "x"},
            {"id": "each", "task": "x", "map": {"x": "src"}},
        ],
    }
    job_id = submit(store, spec)
    assert tasks_encoding(store, job_id) in COMPACT
    (src,) = claim(store, H1)

    elements = list(range(TASKS_HASHTABLE_MIN_TASKS))
    store.complete(H1, [(job_id, src.index, src.token, codec.pack(elements))])
    while store.has_frontier(job_id):
        store.continue_frontier(job_id)
    assert job_field(store, job_id, "n") == str(2 + len(elements))
    assert tasks_encoding(store, job_id) == b"hashtable"


def shard_hashes(store: Store) -> list[str]:
    return [store.keys.metrics(0), store.keys.estimates(0)]


def run_one(store: Store, task: str = "x") -> None:
    """A one-task job of `task` on shard 0, claimed and completed: the task path's writes to the
    shard's metrics and estimates hashes."""
    job_id = submit(store, {"name": f"enc-{task}", "tasks": [{"id": "t", "task": task}]})
    assert store.keys.job_shard(job_id) == 0
    (t,) = claim(store, H1)
    assert complete_one(store, H1, job_id, t.index, t.token) == 0


def reload_compact(store: Store, key: str) -> dict[bytes, bytes]:
    """The hash written again field by field, as Redis loads a small one from disk after a
    restart or a failover: a listpack again. Its fields."""
    fields: dict[bytes, bytes] = store.redis.hgetall(key)
    store.redis.delete(key)
    store.redis.hset(key, mapping=fields)
    assert store.redis.object("encoding", key) in COMPACT
    return fields


def test_the_task_path_makes_a_new_shards_metrics_and_estimates_hashes_hashtables(
    store: Store,
) -> None:
    assert store.redis.exists(*shard_hashes(store)) == 0

    run_one(store)

    for key in shard_hashes(store):
        assert store.redis.object("encoding", key) == b"hashtable", key
        assert b"~" not in store.redis.hkeys(key), key  # the converting field is gone


def test_a_hash_loaded_compact_becomes_a_hashtable_when_the_task_path_adds_a_field(
    store: Store,
) -> None:
    run_one(store)
    fields = {key: reload_compact(store, key) for key in shard_hashes(store)}

    run_one(store, "y")  # another task name: new counters and estimates

    for key in shard_hashes(store):
        assert store.redis.object("encoding", key) == b"hashtable", key
        now = store.redis.hgetall(key)
        assert set(now) > set(fields[key]) and b"~" not in now, key


def test_a_recovery_pass_makes_the_shards_metrics_and_estimates_hashes_hashtables(
    store: Store,
) -> None:
    hashes = shard_hashes(store)
    Recovery(store, "test-recovery").run()
    assert store.redis.exists(*hashes) == 0  # a hash not there yet is left so

    run_one(store)
    # loaded from disk after a restart, and no new field written since: listpacks
    fields = {key: reload_compact(store, key) for key in hashes}

    Recovery(store, "test-recovery").run()

    for key in hashes:
        assert store.redis.object("encoding", key) == b"hashtable", key
        assert store.redis.hgetall(key) == fields[key], key  # no field added or left
