"""A small job is split by its submit script; a transition that ends a job's last task
finalizes it; start hands back what later calls of the job need (its queues, its key)."""

from __future__ import annotations

from typing import Any

import pytest
from lua_helpers import (
    H1,
    H2,
    LEADER,
    NO_RETRY,
    NONCE,
    assert_finalized,
    claim,
    complete_one,
    decode,
    job_context,
    job_field,
    leader_messages,
    queued_indexes,
    submit,
    task_states,
    untouched,
)

import jobcenter.storage.jobs.attempts
import jobcenter.storage.jobs.base
import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.errors import IdempotencyConflict
from jobcenter.model import codec
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.leader import Leader
from jobcenter.storage.events import Events
from jobcenter.storage.store import Store

SPEC = {
    "name": "two-queues",
    "idempotency_key": "two-queues-key",
    "tasks": [
        {"id": "a", "task": "t.a"},
        {"id": "b", "task": "t.b", "depends_on": ["a"]},
        {"id": "e", "task": "t.e", "retries": 2},
        {"id": "f", "task": "t.f", "queue": "other"},
    ],
}
A, B, E, F = 0, 1, 2, 3
SPLIT_FIELDS = ("state", "n", "left", "written", "queued", "queues", "nfailed", "ncancelled")


def _split_state(store: Store, job_id: str) -> dict[str, Any]:
    """What a finished split leaves: job fields, tasks hash (times aside), queues."""
    tasks = store.redis.hgetall(store.keys.job(job_id).tasks)
    times = (b"tq:", b"tc:", b"tu:")
    return {
        "job": {name: job_field(store, job_id, name) for name in SPLIT_FIELDS},
        "tasks": {k.decode(): v for k, v in tasks.items() if not k.startswith(times)},
        "default": queued_indexes(store, job_id),
        "other": queued_indexes(store, job_id, "other"),
    }


def test_a_small_job_is_split_by_its_submit_exactly_as_a_leader_splits_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    inline_id = submit(store, {**SPEC, "idempotency_key": "inline"})
    assert job_field(store, inline_id, "state") == "running"
    assert job_field(store, inline_id, "started_at") is not None
    assert not store.redis.hexists(store.keys.job(inline_id).job, "spec")
    assert leader_messages(store, inline_id) == set()
    assert task_states(store, inline_id) == {
        "a": "queued",
        "b": "waiting",
        "e": "queued",
        "f": "queued",
    }
    with untouched(store):  # a leader finds nothing left to split
        Leader(store, LEADER).split(inline_id)

    monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    leader_id = submit(store, {**SPEC, "idempotency_key": "leader"})
    assert job_field(store, leader_id, "state") == "pending"
    assert store.redis.hexists(store.keys.job(leader_id).job, "spec")
    assert leader_messages(store, leader_id) == {"split"}
    assert not store.redis.exists(store.keys.job(leader_id).tasks)
    Leader(store, LEADER).split(leader_id)
    assert not store.redis.hexists(store.keys.job(leader_id).job, "spec")
    assert leader_messages(store, leader_id) == set()

    expected = _split_state(store, leader_id)
    assert expected["job"]["written"] == "4" and expected["job"]["queued"] == "3"
    assert (expected["default"], expected["other"]) == ([A, E], [F])
    assert _split_state(store, inline_id) == expected


# Every field a queue entry is made of: a task priority, a pool, ranks (critical_path: the
# default), a second queue, a mapped task and a trigger rule that are not queued at once.
RICH = {
    "name": "rich",
    "priority": 2,
    "tasks": [
        {"id": "src", "task": "t.src", "priority": 7, "estimate": 5},
        {"id": "gpu", "task": "t.gpu", "pool": "gpu", "pool_slots": 2},
        {"id": "other", "task": "t.o", "queue": "other", "retries": 1},
        {"id": "each", "task": "t.each", "map": {"item": "src"}},
        {"id": "any", "task": "t.any", "depends_on": ["gpu"], "trigger_rule": "all_done"},
    ],
}


def _entries(store: Store, job_id: str) -> dict[str, list[tuple[str, float]]]:
    """Each queue's entries of the job, its sequence number and id blanked (they differ)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for queue in ("default", "other"):
        out[queue] = []
        for member, score in store.redis.zrange(store.keys.queue(0, queue), 0, -1, withscores=True):
            seq, job, *rest = member.decode().split("|")
            if job == job_id:
                out[queue].append(("|".join(["<seq>" + seq[12:], "<job>", *rest]), score))
    return out


def test_a_small_jobs_queue_entries_and_events_are_the_ones_a_leader_writes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit script queues a small job's ready tasks (one read each, then one write per
    queue) exactly as the leader's queue_roots does: same entries, scores, fields, events."""
    events = Events(store)
    start = events.latest()
    inline_id = submit(store, RICH)
    monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    leader_id = submit(store, RICH)
    Leader(store, LEADER).split(leader_id)

    inline, leader = _entries(store, inline_id), _entries(store, leader_id)
    assert [m.split("|")[2] for m, _ in leader["default"]] == ["000000", "000001"]
    assert leader["default"][0][1] == -7 and leader["default"][1][0].endswith("|p:gpu=*2")
    assert inline == leader
    assert _split_state(store, inline_id) == _split_state(store, leader_id)
    seen = [(e.job, e.kind, e.task) for e in events.after(start)]
    assert [(k, t) for j, k, t in seen if j == inline_id] == [
        ("submitted", None), ("queued", "src"), ("queued", "gpu"), ("queued", "other"),
    ]  # fmt: skip
    assert [(k, t) for j, k, t in seen if j == leader_id] == [
        ("submitted", None), ("queued", "src"), ("queued", "gpu"), ("queued", "other"),
    ]  # fmt: skip


@pytest.mark.parametrize(("extra", "split"), [(0, "inline"), (1, "leader")])
def test_jobs_up_to_inline_split_max_tasks_are_split_by_submit_larger_ones_by_a_leader(
    store: Store, extra: int, split: str
) -> None:
    n = jobcenter.storage.jobs.submit.INLINE_SPLIT_MAX + extra
    spec = {"name": "edge", "tasks": [{"id": f"r{k}", "task": "t.r"} for k in range(n)]}
    job_id = submit(store, spec)
    if split == "inline":
        assert job_field(store, job_id, "state") == "running"
        assert leader_messages(store, job_id) == set()
    else:
        assert job_field(store, job_id, "state") == "pending"
        assert leader_messages(store, job_id) == {"split"}
        assert queued_indexes(store, job_id) == []
        Leader(store, LEADER).split(job_id)
    assert job_field(store, job_id, "state") == "running"
    assert queued_indexes(store, job_id) == list(range(n))


def test_start_returns_the_jobs_queues_and_idempotency_key(store: Store) -> None:
    """start runs without the job's meta (a worker may not know the job yet), and returns
    it, so the worker's later calls for the job need no read."""
    job_id = submit(store, SPEC)
    plain_id = submit(store, {**SPEC, "idempotency_key": None, "name": "plain"})
    reserved = decode(store.reserve(H1, ["other"], max_tasks=2))
    assert sorted(m.split("|")[1] for m in reserved[2]) == sorted([job_id, plain_id])
    for job, idem in ((job_id, "two-queues-key"), (plain_id, "")):
        script_keys, argv = job_context(store, job, queues=[], without_idem=True)
        args = [*argv, H1, NONCE, F]
        reply = store.scripts.run("start", script_keys, args)  # payloads stay bytes
        assert reply[0] == 0
        started = jobcenter.storage.jobs.attempts.started_tasks(job, reply[1], H1, NONCE)
        assert [(task.index, task.attempt) for task in started] == [(F, 1)]
        assert decode(reply[2:]) == ["default,other", idem]

    other = jobcenter.storage.store.Store(store.redis, store.settings)  # knows no job yet
    (started,) = other.claim(H2, ["default"], max_tasks=1, max_leader=0).tasks
    assert started.job_id == job_id
    assert other.job_meta(job_id) == jobcenter.storage.jobs.base.JobMeta(
        ("default", "other"), "two-queues-key"
    )


def test_claim_reports_when_the_next_retry_is_due(store: Store) -> None:
    job_id = submit(store, {"name": "later", "tasks": [{"id": "a", "task": "t.a", "retries": 1}]})
    (a,) = claim(store, H1)
    assert store.claim(H1, ["default"], max_tasks=1, max_leader=0).next_retry_ms == -1
    assert store.fail(H1, job_id, A, a.token, "flaky", 60_000) == (0, "retry_wait")
    report = store.claim(H1, ["default"], max_tasks=1, max_leader=0)
    assert report.tasks == []
    assert 0 < report.next_retry_ms <= 60_000


def test_a_revived_job_keeps_its_idempotency_key_while_it_runs_again(store: Store) -> None:
    job_id = submit(store, SPEC)
    idem = store.keys.idempotency(0, "two-queues-key")
    assert store.redis.pttl(idem) == -1  # no TTL while the job runs
    roots = {t.index: t for t in claim(store, H1, queues=["default", "other"])}
    assert sorted(roots) == [A, E, F]
    assert complete_one(store, H1, job_id, E, roots[E].token) == 0
    assert complete_one(store, H1, job_id, F, roots[F].token) == 0
    assert store.fail(H1, job_id, A, roots[A].token, "boom", NO_RETRY) == (0, "failed")
    assert_finalized(store, job_id, "failed")
    assert store.redis.pttl(idem) > 0

    assert store.revive(job_id, [A], [(B, [A])]) == 2
    assert job_field(store, job_id, "state") == "running"
    assert store.redis.pttl(store.keys.job(job_id).job) == -1
    assert store.redis.pttl(idem) == -1


def test_a_finalized_jobs_frontier_keeps_its_retention_while_it_drains(store: Store) -> None:
    """As in test_a_completion_between_cancel_chunks_never_requeues_a_cancelled_child: the
    cancel's last step finalizes the job while p's release is still under way. The release
    goes on (its counter decrements matter to a later retry), and the frontier list, even
    when re-created by a push-back, expires with the job."""
    fillers = [{"id": f"f{k}", "task": "t.f", "depends_on": ["p"]} for k in range(1_000)]
    c = {"id": "c", "task": "t.c", "depends_on": ["p"]}
    spec = {"name": "late-frontier", "tasks": [c, *fillers, {"id": "p", "task": "t.p"}]}
    job_id = submit(store, spec)  # more than INLINE_SPLIT_MAX tasks: a leader splits it
    Leader(store, LEADER).split(job_id)
    (p,) = claim(store, H1)
    code, left = store.cancel_step(job_id, from_client=True)
    assert code == 0 and left > 0  # f999 and p are visited in the next step
    assert complete_one(store, H1, job_id, p.index, p.token) == 0  # a release under way
    assert store.cancel_step(job_id) == (0, 0)  # cancels f999, the last task: finalized
    assert job_field(store, job_id, "state") == "cancelled"
    frontier = store.keys.job(job_id).frontier
    assert store.redis.llen(frontier) == 1 and store.redis.pttl(frontier) > 0
    assert store.continue_frontier(job_id) > 0
    assert store.redis.pttl(frontier) > 0


def test_a_succeeded_job_keeps_its_record_history_and_every_field_a_run_needs(
    store: Store,
) -> None:
    job_id = submit(store, {"name": "small", "tasks": [
        {"id": "a", "task": "t.a", "retries": 2}, {"id": "b", "task": "t.b", "depends_on": ["a"]},
    ]})  # fmt: skip
    (a,) = claim(store, H1)
    assert complete_one(store, H1, job_id, a.index, a.token) == 0
    (b,) = claim(store, H1)
    assert complete_one(store, H1, job_id, b.index, b.token) == 0
    Leader(store, LEADER).compact(job_id)  # its message: pack it
    fields = set(store.records(job_id).every_field())
    assert fields >= {"id:0", "s:0", "a:0", "h:0", "tf:0", "id:1", "s:1", "c:0", "m:0", "p:1"}
    assert fields >= {"d:1", "o:0", "o:1", "k:0", "k:1"}  # a clear runs them again
    status = store.status(job_id)
    assert status["state"] == "succeeded"
    assert {t: s["state"] for t, s in status["tasks"].items()} == {
        "a": "succeeded",
        "b": "succeeded",
    }
    assert [h["task"] for h in store.history(job_id)] == ["a", "b"]


def test_a_large_succeeded_job_is_compacted_by_a_leader(store: Store) -> None:
    tasks = [{"id": f"t{k}", "task": "t.x"} for k in range(1_200)]
    job_id = submit(store, {"name": "large", "tasks": tasks})
    Leader(store, LEADER).split(job_id)
    while started := claim(store, H1, 500):
        codes, _ = store.complete(H1, [(job_id, t.index, t.token) for t in started])
        assert set(codes.values()) == {0}
    assert job_field(store, job_id, "state") == "succeeded"
    assert store.redis.zscore(store.keys.leader(0), f"compact|{job_id}") is not None
    assert store.redis.hexists(store.keys.job(job_id).tasks, "p:0")
    Leader(store, LEADER).compact(job_id)
    assert not store.redis.exists(store.keys.job(job_id).tasks)
    payload, state, rank = store.records(job_id).values(["p:1199", "s:1199", "o:1199"])
    assert codec.unpack(payload or b"")["id"] == "t1199"  # type: ignore[index]
    assert (state, rank) == (b"succeeded", b"1199")
    assert store.redis.zscore(store.keys.leader(0), f"compact|{job_id}") is None
    assert store.status(job_id)["tasks"]["t1199"]["state"] == "succeeded"


def _one_call_each(store: Store, spec: dict[str, Any], count: int) -> list[str]:
    """`count` jobs of `spec` submitted one submit call each (as single submits go)."""
    return [job_id for job_id, _ in (store.submit(parse_spec(spec)) for _ in range(count))]


def test_jobs_stored_by_one_submit_call_are_each_the_job_a_call_of_their_own_stores(
    store: Store,
) -> None:
    """submit_many stores a shard's small jobs many per submit.lua call (the job context's
    cost paid once): each job's fields, tasks, queue entries and events are those of a job
    submitted alone, in the order given."""
    events = Events(store)
    start = events.latest()
    alone = _one_call_each(store, RICH, 2)
    specs = [parse_spec(RICH) for _ in range(3)] + [parse_spec({**SPEC, "idempotency_key": None})]
    prepared = store._prepare_submit(specs, None)
    assert len(prepared.batch.calls) == 1  # 3 x 5 + 4 tasks, one shard: one call
    grouped = [job_id for job_id, _ in prepared.results(prepared.batch.execute())]
    assert grouped == prepared.job_ids

    expected = _split_state(store, alone[0])
    for job_id in grouped[:3]:
        assert _split_state(store, job_id) == expected
        assert _entries(store, job_id) == _entries(store, alone[0])
    assert task_states(store, grouped[3]) == {"a": "queued", "b": "waiting", "e": "queued",
                                              "f": "queued"}  # fmt: skip
    seqs = [int(job_field(store, job_id, "seq") or 0) for job_id in alone + grouped]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # submit order kept
    seen = [(e.job, e.kind, e.task) for e in events.after(start)]
    per_job = [[(k, t) for j, k, t in seen if j == job_id] for job_id in alone + grouped[:3]]
    assert all(kinds == per_job[0] for kinds in per_job)
    assert [j for j, k, _ in seen if k == "submitted"] == alone + grouped


def test_a_submit_call_holds_a_bounded_number_of_tasks_and_jobs(store: Store) -> None:
    """At most SUBMIT_CALL_TASKS tasks written and SUBMIT_CALL_JOBS jobs per call: a call
    stays as short as one inline split; a job a leader splits goes alone."""
    store_module = jobcenter.storage.jobs.submit
    one = parse_spec({"name": "one", "tasks": [{"id": "a", "task": "t.a"}]})
    big = parse_spec({"name": "big", "tasks": [
        {"id": f"t{k}", "task": "t.t"} for k in range(store_module.INLINE_SPLIT_MAX)
    ]})  # fmt: skip
    huge = parse_spec({"name": "huge", "tasks": [
        {"id": f"t{k}", "task": "t.t"} for k in range(store_module.INLINE_SPLIT_MAX + 1)
    ]})  # fmt: skip
    jobs_max = store_module.SUBMIT_CALL_JOBS
    cases = [
        ([one] * (jobs_max + 1), [jobs_max, 1]),
        ([one, big, one], [1, 1, 1]),
        ([one, one, huge, one], [2, 1, 1]),
    ]
    for specs, sizes in cases:
        prepared = store._prepare_submit(specs, None)
        assert [len(call.jobs) for call in prepared.calls] == sizes
        results = prepared.results(prepared.batch.execute())
        assert [job_id for job_id, _ in results] == prepared.job_ids
        assert all(created for _, created in results)
    assert job_field(store, prepared.job_ids[2], "state") == "pending"  # huge: a leader's


def test_a_repeated_idempotency_key_within_one_submit_call_returns_the_first_job(
    store: Store,
) -> None:
    keyed = parse_spec({**SPEC, "idempotency_key": "once"})
    other = parse_spec({**SPEC, "idempotency_key": "once", "name": "changed"})
    prepared = store._prepare_submit([keyed, keyed], None)
    assert len(prepared.batch.calls) == 1
    (first, created), (again, created_again) = prepared.results(prepared.batch.execute())
    assert (again, created, created_again) == (first, True, False)
    assert not store.redis.exists(store.keys.job(prepared.job_ids[1]).job)
    prepared = store._prepare_submit([other], None)
    with pytest.raises(IdempotencyConflict, match=f"names job {first}"):
        prepared.results(prepared.batch.execute())
