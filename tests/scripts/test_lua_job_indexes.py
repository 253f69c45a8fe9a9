"""The job indexes `list` reads. Every transition that changes a job's state moves the job
between the per-state indexes; submit files a fired job under its schedule; delete and the
trimming of expired jobs take it out of all of them. `list` then reads about `limit` entries
of one index, whatever the namespace holds; `status` and `history` read long lists in pages."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from helpers import CommandLog, wait_until
from lua_helpers import H1, claim, job_field, redis_now_ms, submit, submit_and_split

import jobcenter.storage.jobs.reads
import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.model.spec import parse_spec
from jobcenter.model.states import JobState
from jobcenter.storage import admin
from jobcenter.storage.store import Store

ONE = {"name": "one", "tasks": [{"id": "a", "task": "t.a"}]}
PAIR = {"name": "pair", "tasks": [{"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b"}]}
MANY = 300  # jobs in the namespace besides the ones a list asks for
ASKED = 10  # jobs that match the list's filter (older than the MANY others)
LIMIT = 5


def indexed(store: Store, job_id: str) -> list[str]:
    """The states whose index holds the job (exactly its state, when the indexes are right)."""
    shard = store.keys.job_shard(job_id)
    return [
        state
        for state in JobState
        if store.redis.zscore(store.keys.state_jobs(shard, state), job_id) is not None
    ]


def run_all(store: Store, outcome: str) -> None:
    """Claim every queued task and end each: 'complete' or 'fail' (for good)."""
    started = claim(store, H1, 1000)
    assert started
    for t in started:
        if outcome == "complete":
            store.complete(H1, [(t.job_id, t.index, t.token)])
        else:
            store.fail(H1, t.job_id, t.index, t.token, "boom", -1)


def test_a_small_job_is_indexed_running_from_its_submit_then_succeeded(store: Store) -> None:
    job_id = submit(store, ONE)
    assert indexed(store, job_id) == ["running"]
    run_all(store, "complete")
    assert job_field(store, job_id, "state") == "succeeded"
    assert indexed(store, job_id) == ["succeeded"]


def test_a_split_job_is_indexed_pending_until_a_leader_queues_its_roots(
    store: Store, leader_split: None
) -> None:
    job_id = submit(store, ONE)
    assert indexed(store, job_id) == ["pending"]
    job_id, _ = submit_and_split(store, ONE)
    assert indexed(store, job_id) == ["running"]


def test_a_failed_job_is_indexed_failed_then_running_again_when_retried(store: Store) -> None:
    job_id = submit(store, PAIR)
    run_all(store, "fail")
    assert indexed(store, job_id) == ["failed"]
    admin.retry_job(store, job_id)
    assert indexed(store, job_id) == ["running"]
    assert store.redis.zcard(store.keys.expiring(0)) == 0  # no longer on its way out
    run_all(store, "complete")
    assert indexed(store, job_id) == ["succeeded"]


@pytest.mark.parametrize("split", [False, True], ids=["running", "pending"])
def test_a_cancelled_job_is_indexed_cancelled(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    if split:
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    job_id = submit(store, PAIR)
    store.cancel_step(job_id, from_client=True)
    assert job_field(store, job_id, "state") == "cancelled"
    assert indexed(store, job_id) == ["cancelled"]


def test_delete_takes_a_job_out_of_every_index(store: Store) -> None:
    job_id, _ = store.submit(parse_spec({**ONE, "owner": "ann"}), schedule_id="s1", fire_time=1.0)
    run_all(store, "fail")
    admin.delete_job(store, job_id)
    assert indexed(store, job_id) == []
    for index in (store.keys.schedule_jobs(0, "s1"), store.keys.owner_jobs(0, "ann")):
        assert store.redis.zcard(index) == 0


def test_trimming_takes_an_expired_job_out_of_every_index(store: Store) -> None:
    spec = parse_spec({**ONE, "owner": "ann", "retention": 0.05})
    job_id, _ = store.submit(spec, schedule_id="s1", fire_time=1.0)
    run_all(store, "complete")
    wait_until(lambda: not store.redis.exists(store.keys.job(job_id).job), timeout=5)
    assert indexed(store, job_id) == ["succeeded"]  # until recovery trims it
    assert admin.trim_expired(store) == 1
    assert indexed(store, job_id) == []
    for index in (store.keys.schedule_jobs(0, "s1"), store.keys.owner_jobs(0, "ann")):
        assert store.redis.zcard(index) == 0


def _job_hash_reads(log: CommandLog, store: Store) -> int:
    prefix = store.keys.job("x").job[: -len("x")]
    return sum(
        1
        for c in log.commands
        if c.name == "HMGET" and not c.in_script and (c.key or "").startswith(prefix)
    )


@pytest.mark.parametrize("by", ["state", "schedule"])
def test_list_by_state_or_schedule_reads_about_limit_jobs_whatever_the_namespace_holds(
    store: Store, redis_url: str, by: str
) -> None:
    asked = store.submit_many(
        [parse_spec(ONE)] * ASKED, fired=[("s1", 1.0)] * ASKED if by == "schedule" else None
    )
    asked_ids = [job_id for job_id, _ in asked]
    if by == "state":
        run_all(store, "fail")
    store.submit_many([parse_spec(ONE)] * MANY)  # newer, running, fired by no schedule
    query: dict[str, Any] = {"state": "failed"} if by == "state" else {"schedule_id": "s1"}

    with CommandLog(redis_url) as log:
        rows = store.list_jobs(limit=LIMIT, **query)

    assert len(rows) == LIMIT and {row["id"] for row in rows} <= set(asked_ids)
    assert _job_hash_reads(log, store) == LIMIT


def test_list_with_several_filters_reads_the_smallest_index_and_says_when_it_stops(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ann_spec = parse_spec({**ONE, "owner": "ann"})
    store.submit_many([parse_spec({**ONE, "owner": "carol"})] * 5)
    ann = [submit(store, ann_spec.to_dict())]
    run_all(store, "fail")  # carol's five and ann's first
    wait_until(lambda: redis_now_ms(store) > int(job_field(store, ann[0], "created_at") or 0))
    ann += [submit(store, ann_spec.to_dict()) for _ in range(2)]
    store.submit_many([parse_spec({**ONE, "owner": "bob"})] * 20)
    assert [r["id"] for r in store.list_jobs(owner="ann", state="failed")] == [ann[0]]
    assert {r["id"] for r in store.list_jobs(owner="ann", state="running")} == set(ann[1:])

    # ann's index is the smallest
    monkeypatch.setattr(jobcenter.storage.jobs.reads, "LIST_SCAN_MAX", 2)
    monkeypatch.setattr(jobcenter.storage.jobs.reads, "LIST_PAGE_MIN", 1)
    with caplog.at_level(logging.WARNING, logger="jobcenter.storage.jobs.reads"):
        assert store.list_jobs(owner="ann", state="failed", limit=5) == []
    assert "read the newest 2 jobs" in caplog.text


def test_history_reads_a_long_history_in_pages(
    store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobcenter.storage.jobs.reads, "HISTORY_PAGE", 3)
    tasks = [{"id": f"t{i}", "task": "t.a"} for i in range(8)]
    held = {"id": "held", "task": "t.a", "queue": "unserved"}  # the job stays running, unpacked
    job_id = submit(store, {"name": "eight", "tasks": [*tasks, held]})
    run_all(store, "complete")

    with CommandLog(redis_url) as log:
        history = store.history(job_id)
        page = store.history(job_id, start=2, count=4)

    assert sorted(h["task"] for h in history) == sorted(t["id"] for t in tasks)
    assert page == history[2:6]
    ranges = [c.args[1:] for c in log.commands if c.name == "LRANGE"]
    assert ranges == [("0", "2"), ("3", "5"), ("6", "8"), ("2", "4"), ("5", "5")]


def test_status_reads_a_large_job_in_pages(
    store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobcenter.storage.jobs.reads, "STATUS_PAGE", 10)
    tasks = [{"id": f"t{i}", "task": "t.a"} for i in range(200)]  # a hashtable, not a listpack
    job_id = submit(store, {"name": "wide", "tasks": tasks})

    with CommandLog(redis_url) as log:
        status = store.status(job_id)

    assert list(status["tasks"]) == [t["id"] for t in tasks]
    assert {t["state"] for t in status["tasks"].values()} == {"queued"}
    tasks_key = store.keys.job(job_id).tasks
    reads = [c for c in log.commands if c.key == tasks_key]
    assert {c.name for c in reads} == {"HSCAN"} and len(reads) > 10
    assert all(c.args[-2:] == ("COUNT", "10") for c in reads)
