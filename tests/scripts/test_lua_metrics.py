"""The metric counters the transitions keep in their shard's hash: tasks finished by queue,
task name and state, retries, repairs by rule, lease expiries, and histograms whose counts
match the attempts; JOBCENTER_METRICS=0 keeps none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lua_helpers import H1, H2, claim, claim_by_index, complete_one, submit_and_split

from jobcenter.storage.keyspace.schema import HISTOGRAM_BUCKETS_MS
from jobcenter.storage.metrics import read_counters
from jobcenter.storage.store import Store

SPEC = {
    "name": "metrics",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "retries": 1, "queue": "other"},
        {"id": "c", "task": "t.c", "depends_on": ["a", "b"]},
        {"id": "d", "task": "t.d", "depends_on": ["c"]},
    ],
}
A, B = 0, 1


def test_a_run_with_a_retry_and_a_failure_is_counted_once_per_transition(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    a = claim_by_index(store, H1)[A]
    (b,) = claim(store, H1, queues=["other"])
    complete_one(store, H1, job_id, A, a.token)
    assert store.fail(H1, job_id, B, b.token, "boom", 0) == (0, "queued")
    (b2,) = claim(store, H2, queues=["other"])
    assert store.fail(H2, job_id, B, b2.token, "boom", -1) == (0, "failed")

    c = read_counters(store)
    assert c.finished == {
        ("default", "t.a", "succeeded"): 1,
        ("other", "t.b", "failed"): 1,
        ("default", "t.c", "upstream_failed"): 1,
        ("default", "t.d", "upstream_failed"): 1,
    }
    assert c.jobs == {("failed",): 1}
    assert c.retries == {("other", "t.b"): 1}
    assert c.wait[("default",)].count == 1  # a
    assert c.wait[("other",)].count == 2  # b's two attempts
    assert c.run[("default", "t.a")].count == 1
    assert c.run[("other", "t.b")].count == 2  # a failed attempt ran too
    assert len(c.run[("other", "t.b")].counts) == len(HISTOGRAM_BUCKETS_MS) + 1
    assert c.run[("other", "t.b")].cumulative()[-1] == ("+Inf", 2)


def test_repairs_are_counted_by_rule(store: Store) -> None:
    job_id, _ = submit_and_split(store, SPEC)
    store.redis.delete(store.keys.queue(0, "default"))  # a's queue entry is lost
    assert store.repair(job_id, "requeue", [A]) == 1
    assert store.resubmit(job_id, "continue")
    assert read_counters(store).repairs == {("requeue",): 1, ("resubmit_continue",): 1}


def test_metrics_off_count_nothing(make_store: Callable[..., Store]) -> None:
    store = make_store()
    quiet = Store(store.redis, replace(store.settings, metrics=False))
    job_id, _ = submit_and_split(quiet, SPEC)
    a = claim_by_index(quiet, H1)[A]
    complete_one(quiet, H1, job_id, A, a.token)
    assert not store.redis.exists(store.keys.metrics(0))
