"""Pools, max_running and concurrency keys in claim.lua: a limit is never exceeded, a task
blocked by one keeps its place, and every ending of a reservation or attempt gives its
slots back exactly once (free_slots in _job.lua)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import wait_until
from lua_helpers import (
    H1,
    H2,
    NO_RETRY,
    claim,
    complete_one,
    heartbeat_one,
    submit_and_split,
    task_states,
)
from prometheus_client.parser import text_string_to_metric_families

from jobcenter.runtime.recovery import Recovery
from jobcenter.storage import limits, views
from jobcenter.storage.store import Store
from jobcenter.web.metrics import exposition

GPU = "gpu"


def pool_job(n: int, *, slots: int = 1, plain: int = 0, name: str = "pooled") -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [
        {"id": f"g{i}", "task": "t.gpu", "pool": GPU, "pool_slots": slots, "retries": 2}
        for i in range(n)
    ]
    tasks += [{"id": f"p{i}", "task": "t.plain"} for i in range(plain)]
    return {"name": name, "tasks": tasks}


def used(store: Store, limit: str = f"p:{GPU}") -> int:
    return int(store.redis.hget(store.keys.slots(0), limit) or 0)


def held(store: Store) -> dict[str, str]:
    """The reservations that hold slots: lease member -> what they hold."""
    fields = store.redis.hgetall(store.keys.slots(0))
    return {k.decode(): v.decode() for k, v in fields.items() if b"|" in k}


def pool(store: Store) -> limits.PoolView:
    (view,) = [p for p in limits.pools(store) if p.name == GPU]
    return view


def ids(started: list[Any], job_index: dict[str, int]) -> list[str]:
    by_index = {i: task_id for task_id, i in job_index.items()}
    return sorted(by_index[t.index] for t in started)


def test_a_full_pool_parks_its_tasks_in_order_and_lets_others_run(store: Store) -> None:
    limits.set_pool(store, GPU, 2)
    job_id, index = submit_and_split(store, pool_job(5, plain=2))

    first = claim(store, H1)
    assert ids(first, index) == ["g0", "g1", "p0", "p1"]  # the plain tasks are not held up
    assert used(store) == 2
    assert pool(store) == limits.PoolView(GPU, 2, 2, 3)
    assert claim(store, H1) == []  # the parked tasks are out of the queue: nothing to do
    assert [task_states(store, job_id)[f"g{i}"] for i in range(2, 5)] == ["queued"] * 3

    g0 = next(t for t in first if t.index == index["g0"])
    assert complete_one(store, H1, job_id, g0.index, g0.token) == 0
    assert used(store) == 1
    (next_one,) = claim(store, H2)
    assert next_one.index == index["g2"]  # its place in the order was kept
    assert pool(store) == limits.PoolView(GPU, 2, 2, 2)


def test_a_later_task_of_a_full_pool_does_not_overtake_parked_ones(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_a, index_a = submit_and_split(store, pool_job(2, name="a"))
    (a0,) = claim(store, H1)
    assert claim(store, H1) == []  # a's g1 parked
    job_b, _ = submit_and_split(store, pool_job(1, name="b"))

    complete_one(store, H1, job_a, a0.index, a0.token)
    (taken,) = claim(store, H1)
    assert (taken.job_id, taken.index) == (job_a, index_a["g1"])
    assert task_states(store, job_b) == {"g0": "queued"}


def test_a_higher_priority_task_goes_before_parked_ones(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_a, _ = submit_and_split(store, pool_job(2, name="a"))
    (a0,) = claim(store, H1)
    assert claim(store, H1) == []
    job_b, _ = submit_and_split(store, {**pool_job(1, name="b"), "priority": 5})

    complete_one(store, H1, job_a, a0.index, a0.token)
    (taken,) = claim(store, H1)
    assert taken.job_id == job_b


def test_a_task_needing_more_slots_than_are_free_waits_and_keeps_the_order(store: Store) -> None:
    limits.set_pool(store, GPU, 3)
    job_id, index = submit_and_split(
        store,
        {
            "name": "mixed",
            "tasks": [
                {"id": "small", "task": "t", "pool": GPU, "pool_slots": 2},
                {"id": "big", "task": "t", "pool": GPU, "pool_slots": 3},
                {"id": "after", "task": "t", "pool": GPU},
            ],
        },
    )
    (small,) = claim(store, H1)  # big needs 3 of the 1 left; after may not jump it
    assert small.index == index["small"] and used(store) == 2
    complete_one(store, H1, job_id, small.index, small.token)
    assert [t.index for t in claim(store, H1)] == [index["big"]]
    assert used(store) == 3


def test_setting_a_pool_larger_or_for_the_first_time_lets_its_tasks_run(store: Store) -> None:
    submit_and_split(store, pool_job(3))
    assert claim(store, H1) == []  # a pool never set has no slots: its tasks wait
    assert pool(store) == limits.PoolView(GPU, None, 0, 3)
    limits.set_pool(store, GPU, 1)
    assert len(claim(store, H1)) == 1
    limits.set_pool(store, GPU, 3)
    assert len(claim(store, H1)) == 2
    assert pool(store) == limits.PoolView(GPU, 3, 3, 0)


def test_a_pool_in_use_cannot_be_deleted_and_an_idle_one_can(store: Store) -> None:
    from jobcenter.errors import WrongState

    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(1))
    (t,) = claim(store, H1)
    with pytest.raises(WrongState, match="in use"):
        limits.delete_pool(store, GPU)
    complete_one(store, H1, job_id, t.index, t.token)
    limits.delete_pool(store, GPU)
    assert limits.pools(store) == []


def test_max_running_caps_a_jobs_running_tasks(store: Store) -> None:
    spec = {
        "name": "capped",
        "max_running": 2,
        "tasks": [{"id": f"t{i}", "task": "t"} for i in range(5)],
    }
    job_id, _ = submit_and_split(store, spec)
    first = claim(store, H1)
    assert len(first) == 2 and claim(store, H2) == []
    complete_one(store, H1, job_id, first[0].index, first[0].token)
    assert len(claim(store, H2)) == 1
    other, _ = submit_and_split(store, {**spec, "name": "other"})
    assert len(claim(store, H2)) == 2  # another job's limit is its own


def test_a_concurrency_key_limits_each_tenant_apart(store: Store) -> None:
    def tenant_job(tenant: str) -> dict[str, Any]:
        task = {
            "task": "t",
            "kwargs": {"tenant": tenant},
            "concurrency_key": "{tenant}",
            "concurrency_limit": 2,
        }
        return {"name": tenant, "tasks": [{"id": f"t{i}", **task} for i in range(4)]}

    acme, _ = submit_and_split(store, tenant_job("acme|1"))  # a key with a separator in it
    globex, _ = submit_and_split(store, tenant_job("globex"))
    started = claim(store, H1)
    assert sorted(t.job_id for t in started) == sorted([acme, acme, globex, globex])
    assert used(store, "k:acme%7C1") == 2 and used(store, "k:globex") == 2


def _ending(name: str) -> Callable[[Store, str, Any], None]:
    def complete(store: Store, job_id: str, t: Any) -> None:
        assert complete_one(store, H1, job_id, t.index, t.token) == 0

    def fail_retry(store: Store, job_id: str, t: Any) -> None:
        assert store.fail(H1, job_id, t.index, t.token, "boom", 60_000)[0] == 0

    def fail_now_retry(store: Store, job_id: str, t: Any) -> None:
        assert store.fail(H1, job_id, t.index, t.token, "boom", 0)[0] == 0

    def fail_final(store: Store, job_id: str, t: Any) -> None:
        assert store.fail(H1, job_id, t.index, t.token, "boom", NO_RETRY)[0] == 0

    def give_back(store: Store, job_id: str, t: Any) -> None:
        assert store.give_back(H1, [(job_id, t.index, t.token, "t.gpu")], 60_000, 60_000)

    def release(store: Store, job_id: str, t: Any) -> None:
        assert store.release(H1, [(job_id, t.index, t.token)]) == 1

    def cancel(store: Store, job_id: str, t: Any) -> None:
        store.cancel_step(job_id, from_client=True)

    def expire(store: Store, job_id: str, t: Any) -> None:
        key = store.keys.leases(0)
        for _ in range(2):  # running -> timed_out -> retried, each past its deadline
            store.redis.zadd(key, {f"{job_id}|{t.index}": 0})
            store.expire([(job_id, t.index)], grace_ms=0)

    return {
        "complete": complete,
        "fail_retry": fail_retry,
        "fail_now_retry": fail_now_retry,
        "fail_final": fail_final,
        "give_back": give_back,
        "release": release,
        "cancel": cancel,
        "expire": expire,
    }[name]


ENDINGS = [
    "complete",
    "fail_retry",
    "fail_now_retry",
    "fail_final",
    "give_back",
    "release",
    "cancel",
    "expire",
]


@pytest.mark.parametrize("ending", ENDINGS)
def test_every_ending_gives_the_slots_back_exactly_once(store: Store, ending: str) -> None:
    limits.set_pool(store, GPU, 4)
    spec = {**pool_job(2, slots=2), "max_running": 5}
    job_id, _ = submit_and_split(store, spec)
    first, second = claim(store, H1)
    assert used(store) == 4 and used(store, f"j:{job_id}") == 2

    end = _ending(ending)
    end(store, job_id, first)
    if ending == "cancel":  # the whole job stops: both attempts end
        assert used(store) == 0 and used(store, f"j:{job_id}") == 0 and held(store) == {}
    else:
        assert used(store) == 2 and used(store, f"j:{job_id}") == 1
        assert list(held(store)) == [f"{job_id}|{second.index}"]
    with contextlib.suppress(AssertionError):  # a repeated report changes nothing
        end(store, job_id, first)
    assert used(store) == (0 if ending == "cancel" else 2)
    assert limits.reconcile(store, correct=False) == limits.SlotCheck(0, 0)


def test_a_reservation_never_started_gives_its_slots_back_when_it_expires(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(2))
    reply = store.reserve(H1, ["default"], max_tasks=5)
    assert len(reply[2]) == 1 and used(store) == 1
    (member,) = reply[2]
    index = int(member.decode().split("|")[2])
    store.redis.zadd(store.keys.leases(0), {f"{job_id}|{index}": 0})
    assert store.expire([(job_id, index)]) == {"requeued": 1}
    assert used(store) == 0 and held(store) == {}
    assert len(claim(store, H2)) == 1  # the parked one or the requeued one: the pool has 1


def test_a_duplicate_queue_entry_of_a_held_task_takes_no_second_slot(store: Store) -> None:
    limits.set_pool(store, GPU, 2)
    job_id, _ = submit_and_split(store, pool_job(1))
    (t,) = claim(store, H1)
    member = store.redis.hget(store.keys.job(job_id).tasks, f"l:{t.index}")
    assert member is not None
    # recovery's rule 2 could at worst add one entry for the task again
    seq = int(store.redis.hget(store.keys.job(job_id).job, "seq"))
    entry = f"{seq:012d}|{job_id}|{t.index:06d}|{member.decode()}"
    store.redis.zadd(store.keys.queue(0, "default"), {entry: 0})
    assert claim(store, H2) == []  # start.lua drops it: the task runs
    assert used(store) == 1
    assert complete_one(store, H1, job_id, t.index, t.token) == 0
    assert used(store) == 0 and held(store) == {}


def test_recovery_does_not_requeue_a_parked_task(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(3))
    claim(store, H1)
    Recovery(store, "rq:test").run()
    assert pool(store) == limits.PoolView(GPU, 1, 1, 2)
    assert len(store.redis.zrange(store.keys.queue(0, "default"), 0, -1)) == 0


def test_reconcile_gives_back_what_a_reservation_without_a_lease_holds(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(2))
    (t,) = claim(store, H1)
    store.redis.zrem(store.keys.leases(0), f"{job_id}|{t.index}")  # an ending that leaked
    store.redis.hincrby(store.keys.slots(0), "p:other", 3)  # a counter that drifted
    # one reservation leaked; one counter is wrong beyond what giving it back fixes
    assert limits.reconcile(store, correct=False) == limits.SlotCheck(1, 1)
    assert limits.reconcile(store) == limits.SlotCheck(1, 1)
    assert used(store) == 0 and used(store, "p:other") == 0 and held(store) == {}
    assert len(claim(store, H2)) == 1  # the parked task got the slot back
    assert limits.reconcile(store) == limits.SlotCheck(0, 0)


def test_concurrent_claims_from_several_clients_never_exceed_a_pool(
    make_store: Callable[..., Store],
) -> None:
    """Clients claim and complete as fast as they can; a watcher reads the running tasks of
    the pool again and again: never more than its slots (each script is atomic, so every
    read sees a state between two transitions)."""
    size, n = 3, 120
    setup = make_store()
    limits.set_pool(setup, GPU, size)
    job_id, _ = submit_and_split(setup, pool_job(n, plain=20))
    done = threading.Event()
    peak = [0]
    errors: list[BaseException] = []

    def watch() -> None:
        watcher = make_store()
        key = watcher.keys.job(job_id).tasks
        fields = [f"s:{i}" for i in range(n)]
        while not done.is_set():
            running = sum(s == b"running" for s in watcher.redis.hmget(key, fields))
            peak[0] = max(peak[0], running)

    def work(handler: str) -> None:
        s = make_store()
        try:
            while not done.is_set():
                for t in claim(s, handler, n=2):
                    complete_one(s, handler, t.job_id, t.index, t.token)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=watch)]
    threads += [threading.Thread(target=work, args=(f"h{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: setup.progress(job_id).left == 0 or bool(errors), timeout=60)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not errors
    assert setup.progress(job_id).left == 0
    assert 1 <= peak[0] <= size
    assert used(setup) == 0 and held(setup) == {} and pool(setup).waiting == 0


def test_a_timed_out_attempt_keeps_its_slots_until_it_is_run_again(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(2))
    (t,) = claim(store, H1)
    store.redis.zadd(store.keys.leases(0), {f"{job_id}|{t.index}": 0})
    store.expire([(job_id, t.index)], grace_ms=60_000)
    assert task_states(store, job_id)["g0"] == "timed_out" and used(store) == 1
    assert heartbeat_one(store, H1, job_id, t.index, t.token) == 0  # it was alive after all
    assert used(store) == 1 and claim(store, H2) == []


def gate_wait(store: Store, job_id: str, t: Any, gate: str = "db", give_up_ms: int = 60_000) -> int:
    codes = store.gate_wait(H1, [(job_id, t.index, t.token, gate, 60_000, give_up_ms)])
    return codes[(job_id, t.index)]


def test_a_closed_gate_sends_the_attempt_back_unused_and_frees_its_slots(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(2))
    (t,) = claim(store, H1)
    assert gate_wait(store, job_id, t) == 0

    status = store.status(job_id)["tasks"]["g0"]
    assert (status["state"], status["attempts"], status["handler"]) == ("queued", 0, None)
    assert status["waiting_for_gate"]["gate"] == "db"
    assert used(store) == 0
    assert [x.index for x in claim(store, H2)] == [1]  # its slot went to the next task
    assert gate_wait(store, job_id, t) == -2  # the token is stale now


def retries_due_now(store: Store) -> None:
    """Every retry waiting out a backoff is due now (the test does not wait it out)."""
    key = store.keys.delayed(0, "default")
    due = {m: 0 for m in store.redis.zrange(key, 0, -1)}
    if due:
        store.redis.zadd(key, due)


def test_a_gate_keeps_its_since_and_fails_the_task_past_its_give_up_time(store: Store) -> None:
    job_id, _ = submit_and_split(store, {"name": "g", "tasks": [{"id": "a", "task": "t"}]})
    tasks = store.keys.job(job_id).tasks
    (t,) = claim(store, H1)
    assert gate_wait(store, job_id, t) == 0
    since = store.redis.hget(tasks, "gw:0")
    retries_due_now(store)
    (t,) = claim(store, H1)
    assert gate_wait(store, job_id, t) == 0
    assert store.redis.hget(tasks, "gw:0") == since  # the same gate: the wait goes on
    store.redis.hset(tasks, "gw:0", b"1|db")  # as if it had said no since 1970
    retries_due_now(store)
    (t,) = claim(store, H1)
    assert gate_wait(store, job_id, t, give_up_ms=1_000) == 1
    status = store.status(job_id)
    assert status["state"] == "failed"
    assert status["tasks"]["a"]["error"].startswith("gate db said no for")


def test_a_queue_rate_limit_starts_at_most_n_per_window_and_says_when_to_come_back(
    store: Store,
) -> None:
    limits.set_rate(store, "queue:default", "3/1h")  # one window for the whole test
    job_id, _ = submit_and_split(store, pool_job(0, plain=5))
    first = store.reserve(H1, ["default"], max_tasks=10)
    assert len(first[2]) == 3
    again = store.reserve(H2, ["default"], max_tasks=10)
    assert again[2] == []
    assert 3_500_000 < int(again[3]) <= 3_600_000  # the wait: until the window ends
    assert len(store.redis.zrange(store.keys.queue(0, "default"), 0, -1)) == 2  # in place

    limits.set_rate(store, "queue:default", "4/1h")  # raised: one more in this window
    assert len(store.reserve(H2, ["default"], max_tasks=10)[2]) == 1
    limits.delete_rate(store, "queue:default")
    assert len(store.reserve(H2, ["default"], max_tasks=10)[2]) == 1
    assert limits.rates(store) == []


def test_a_rate_window_ends_and_the_next_one_starts_counting_afresh(store: Store) -> None:
    limits.set_rate(store, "queue:default", "2/200ms")
    submit_and_split(store, pool_job(0, plain=6))
    assert len(store.reserve(H1, ["default"], max_tasks=10)[2]) == 2
    got = wait_until(
        lambda: store.reserve(H1, ["default"], max_tasks=10)[2], message="no second window"
    )
    assert len(got) == 2
    assert limits.rates(store) == [limits.RateView("queue:default", 2, 0.2)]


def test_the_recovery_pass_reconciles_a_leaked_slot(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, _ = submit_and_split(store, pool_job(2))
    (t,) = claim(store, H1)
    # an ending that forgot its slots: the lease gone, the task back in its queue
    store.redis.zrem(store.keys.leases(0), f"{job_id}|{t.index}")
    report = Recovery(store, "rq:test").run()
    assert (report.slots_leaked, report.slots_corrected) == (1, 0)
    assert used(store) == 0 and held(store) == {}
    assert limits.reconcile(store, correct=False) == limits.SlotCheck(0, 0)


def test_a_pool_rate_limit_parks_its_tasks_until_the_window_ends(store: Store) -> None:
    limits.set_pool(store, GPU, 10)
    limits.set_rate(store, "pool:gpu", "2/300ms")
    job_id, index = submit_and_split(store, pool_job(5, plain=2))
    first = claim(store, H1)
    assert ids(first, index) == ["g0", "g1", "p0", "p1"]  # the plain tasks are not rated
    reply = store.reserve(H2, ["default"], max_tasks=10)
    assert reply[2] == [] and 0 <= int(reply[3]) <= 300  # told when the window ends
    assert pool(store).waiting == 3
    later = wait_until(lambda: claim(store, H2), message="the next window never came")
    assert ids(later, index) == ["g2", "g3"]  # in order, two per window
    assert limits.rates(store) == [limits.RateView("pool:gpu", 2, 0.3)]
    limits.delete_rate(store, "pool:gpu")
    wait_until(lambda: claim(store, H2), message="the last task never ran")
    assert pool(store).waiting == 0


def test_the_instances_of_a_mapped_task_take_its_pool_slots(store: Store) -> None:
    from jobcenter.model import codec

    limits.set_pool(store, GPU, 2)
    spec = {
        "name": "mapped",
        "tasks": [
            {"id": "src", "task": "t.src"},
            {"id": "each", "task": "t.each", "map": {"x": "src"}, "pool": GPU},
        ],
    }
    job_id, _ = submit_and_split(store, spec)
    (src,) = claim(store, H1)
    store.complete(H1, [(job_id, src.index, src.token, codec.pack([1, 2, 3, 4, 5]))])
    instances = claim(store, H1)
    assert len(instances) == 2 and used(store) == 2
    assert pool(store).waiting == 3


def test_metrics_show_each_pools_slots_used_set_and_waiting(store: Store) -> None:
    limits.set_pool(store, GPU, 2)
    submit_and_split(store, pool_job(5))
    claim(store, H1)
    samples = {
        (s.name, s.labels.get("pool")): s.value
        for family in text_string_to_metric_families(exposition(store).decode())
        for s in family.samples
    }
    assert samples[("jobcenter_pool_used", GPU)] == 2
    assert samples[("jobcenter_pool_slots", GPU)] == 2
    assert samples[("jobcenter_pool_waiting", GPU)] == 3


def test_the_dashboards_task_panel_and_metrics_show_what_a_task_waits_for(store: Store) -> None:
    limits.set_pool(store, GPU, 1)
    job_id, index = submit_and_split(store, pool_job(2))
    (t,) = claim(store, H1)  # g0 takes the pool's one slot; g1 is parked

    assert views.task_detail(store, job_id, index["g1"]).waiting_for_limit == f"pool {GPU}"
    assert views.task_detail(store, job_id, t.index).waiting_for_limit is None  # it runs
    assert gate_wait(store, job_id, t, gate="db") == 0  # then a gate says no to g0
    detail = views.task_detail(store, job_id, t.index)
    assert detail.waiting_for_gate is not None and detail.waiting_for_gate["gate"] == "db"
    samples = {
        (s.name, s.labels.get("gate")): s.value
        for family in text_string_to_metric_families(exposition(store).decode())
        for s in family.samples
    }
    assert samples[("jobcenter_gate_waits_total", "db")] == 1
