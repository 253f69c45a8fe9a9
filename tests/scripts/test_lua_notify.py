"""Notification deliveries in Lua: the finalizing transition records one due delivery per
channel for a final state the spec asked for (and none otherwise); notify_claim leases them;
notify_attempt counts attempts and logs a lost one; notify_done records the outcome only
for the attempt under way; delete takes every trace away."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from lua_helpers import H1, H2, NO_RETRY, claim, redis_now_ms, submit, untouched

from jobcenter.model.notify import Channel, DeliveryState
from jobcenter.runtime.notifier import SUPERSEDED, Notifier
from jobcenter.storage import admin, notifications
from jobcenter.storage.store import Store

URL = "https://hooks.example.com/hook"  # a name: stored, never posted to by these tests
LEASE_MS = 60_000


def spec(on: list[str], *, webhook: bool = True, hook: bool = True) -> dict[str, Any]:
    notify: dict[str, Any] = {"on": on}
    if webhook:
        notify["webhook"] = URL
    if hook:
        notify["hook"] = True
    return {"name": "told", "notify": notify, "tasks": [{"id": "a", "task": "t.a"}]}


def run(store: Store, job_id: str, outcome: str) -> None:
    (t,) = [t for t in claim(store, H1) if t.job_id == job_id]
    if outcome == "succeed":
        store.complete(H1, [(t.job_id, t.index, t.token)])
    else:
        store.fail(H1, t.job_id, t.index, t.token, "boom", NO_RETRY)


def due(store: Store, job_id: str) -> dict[str, float]:
    """channel -> due ms of the job's deliveries in the due zset."""
    key = store.keys.notify_due(store.keys.job_shard(job_id))
    out = {}
    for member, score in store.redis.zrange(key, 0, -1, withscores=True):
        channel, _, job = member.decode().partition("|")
        if job == job_id:
            out[channel] = score
    return out


def test_the_finalizing_transition_records_a_due_delivery_per_channel(store: Store) -> None:
    job_id = submit(store, spec(["failed"]))
    assert due(store, job_id) == {}  # nothing before the job is final
    run(store, job_id, "fail")
    finished_ms = int(store.redis.hget(store.keys.job(job_id).job, "finished_at"))
    assert due(store, job_id) == {"webhook": finished_ms, "hook": finished_ms}
    view = store.status(job_id)["notifications"]
    assert view["on"] == ["failed"] and view["webhook"] == URL
    assert {c: d["state"] for c, d in view["deliveries"].items()} == {
        "webhook": "pending",
        "hook": "pending",
    }


@pytest.mark.parametrize(
    ("notify", "outcome"),
    [(spec(["failed"]), "succeed"), (spec(["succeeded"]), "fail"), ({"name": "x"}, "fail")],
    ids=["succeeded-not-asked", "failed-not-asked", "no-notify"],
)
def test_no_delivery_for_a_state_the_spec_did_not_ask_for(
    store: Store, notify: dict[str, Any], outcome: str
) -> None:
    job_id = submit(store, {**notify, "tasks": [{"id": "a", "task": "t.a"}]})
    run(store, job_id, outcome)
    assert due(store, job_id) == {}
    assert notifications.claim_due(store, 0, LEASE_MS, 10) == []


def test_a_claimed_delivery_is_leased_until_its_lease_runs_out(store: Store) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    assert notifications.claim_due(store, 0, 300, 10) == [(Channel.WEBHOOK, job_id)]
    assert due(store, job_id)["webhook"] >= redis_now_ms(store) + 100  # held a lease ahead
    assert notifications.claim_due(store, 0, 300, 10) == []  # nobody else takes it meanwhile
    deadline = due(store, job_id)["webhook"]
    while redis_now_ms(store) <= deadline:
        pass
    assert notifications.claim_due(store, 0, 300, 10) == [(Channel.WEBHOOK, job_id)]


def test_a_failed_attempt_is_retried_later_and_a_delivery_ends_the_delivery(store: Store) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    [(channel, _)] = notifications.claim_due(store, 0, LEASE_MS, 10)
    assert notifications.begin(store, channel, job_id, H1, LEASE_MS) == 1
    state = notifications.finish(
        store, channel, job_id, 1, H1, delivered=False, detail="HTTP 500", retry_ms=5_000
    )
    assert state == DeliveryState.RETRYING
    assert due(store, job_id)["webhook"] >= redis_now_ms(store) + 4_000
    assert notifications.claim_due(store, 0, LEASE_MS, 10) == []  # not due before its backoff
    assert notifications.begin(store, channel, job_id, H2, LEASE_MS) == 2
    state = notifications.finish(
        store, channel, job_id, 2, H2, delivered=True, detail="HTTP 204", retry_ms=5_000
    )
    assert state == DeliveryState.DELIVERED
    assert due(store, job_id) == {}
    view = store.status(job_id)["notifications"]
    webhook = view["deliveries"]["webhook"]
    assert webhook["state"] == "delivered" and webhook["attempts"] == 2
    assert webhook["error"] is None and webhook["done_at"] is not None
    assert [(a["attempt"], a["outcome"], a["handler"], a["detail"]) for a in view["attempts"]] == [
        (1, "retrying", H1, "HTTP 500"),
        (2, "delivered", H2, "HTTP 204"),
    ]


def test_the_last_attempt_failing_gives_the_delivery_up(store: Store) -> None:
    job_id = submit(store, spec(["failed"], webhook=False))
    run(store, job_id, "fail")
    assert notifications.begin(store, Channel.HOOK, job_id, H1, LEASE_MS) == 1
    state = notifications.finish(
        store, Channel.HOOK, job_id, 1, H1, delivered=False, detail="down", retry_ms=-1
    )
    assert state == DeliveryState.FAILED
    assert due(store, job_id) == {}
    hook = store.status(job_id)["notifications"]["deliveries"]["hook"]
    assert (hook["state"], hook["error"], hook["attempts"]) == ("failed", "down", 1)


def test_an_attempt_that_never_reported_is_logged_lost_and_its_late_outcome_ignored(
    store: Store,
) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    assert notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS) == 1
    # H1 dies mid-delivery; its lease runs out and H2 takes the delivery over
    assert notifications.begin(store, Channel.WEBHOOK, job_id, H2, LEASE_MS) == 2
    with untouched(store):
        late = notifications.finish(
            store, Channel.WEBHOOK, job_id, 1, H1, delivered=True, detail="HTTP 200", retry_ms=-1
        )
    assert late is None
    view = store.status(job_id)["notifications"]
    assert [(a["attempt"], a["outcome"], a["handler"]) for a in view["attempts"]] == [
        (1, "lost", H1)
    ]
    assert view["deliveries"]["webhook"]["state"] == "delivering"


def test_an_attempt_at_a_delivery_no_longer_due_changes_nothing(store: Store) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS)
    notifications.finish(
        store, Channel.WEBHOOK, job_id, 1, H1, delivered=True, detail="ok", retry_ms=-1
    )
    with untouched(store):
        assert notifications.begin(store, Channel.WEBHOOK, job_id, H2, LEASE_MS) is None


def test_the_delivery_record_expires_with_the_job(store: Store) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS)
    notifications.finish(
        store, Channel.WEBHOOK, job_id, 1, H1, delivered=False, detail="x", retry_ms=1
    )
    for key in (store.keys.notifications(job_id), store.keys.deliveries(job_id)):
        assert store.redis.pttl(key) > 0


def test_a_job_gone_drops_its_due_delivery(store: Store) -> None:
    job_id = submit(store, spec(["failed"], hook=False))
    run(store, job_id, "fail")
    store.redis.delete(store.keys.job(job_id).job)  # its retention ended
    assert notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS) is None
    assert due(store, job_id) == {}


def test_delete_takes_the_deliveries_away(store: Store) -> None:
    job_id = submit(store, spec(["failed"]))
    run(store, job_id, "fail")
    notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS)
    admin.delete_job(store, job_id)
    assert due(store, job_id) == {}
    assert not store.redis.exists(store.keys.notifications(job_id), store.keys.deliveries(job_id))


def test_a_retried_job_finalized_again_is_told_again_from_attempt_one(store: Store) -> None:
    job_id = submit(store, spec(["failed", "succeeded"], hook=False))
    run(store, job_id, "fail")
    notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS)
    notifications.finish(
        store, Channel.WEBHOOK, job_id, 1, H1, delivered=True, detail="ok", retry_ms=-1
    )
    admin.retry_job(store, job_id)
    run(store, job_id, "succeed")
    assert set(due(store, job_id)) == {"webhook"}
    assert notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS) == 1
    notice = notifications.job_notice(store, job_id)
    assert notice is not None and notice["state"] == "succeeded"


def test_the_notice_names_the_job_its_times_and_its_failed_tasks(store: Store) -> None:
    job_id = submit(
        store,
        {
            "name": "nightly",
            "owner": "ops",
            "notify": {"on": ["failed"], "webhook": URL},
            "tasks": [
                {"id": "a", "task": "t.a"},
                {"id": "b", "task": "t.b", "depends_on": ["a"]},
            ],
        },
    )
    run(store, job_id, "fail")
    notice = notifications.job_notice(store, job_id)
    assert notice is not None
    assert notice["job_id"] == job_id and notice["name"] == "nightly"
    assert (notice["owner"], notice["state"], notice["webhook"]) == ("ops", "failed", URL)
    assert notice["created_at"] <= notice["finished_at"]
    assert (notice["tasks"], notice["tasks_failed"]) == (2, 2)  # a failed, b upstream_failed
    assert notice["failed_tasks"] == [{"task": "a", "error": "boom", "attempts": 1}]


def test_a_job_retried_before_it_was_told_is_told_of_its_next_end_instead(store: Store) -> None:
    job_id = submit(store, spec(["failed", "succeeded"], hook=False))
    run(store, job_id, "fail")
    admin.retry_job(store, job_id)  # running again, its failure not told yet
    [(channel, _)] = notifications.claim_due(store, 0, LEASE_MS, 10)

    Notifier(store, H1, threading.Event()).deliver(channel, job_id)  # sends nothing

    webhook = store.status(job_id)["notifications"]["deliveries"]["webhook"]
    assert (webhook["state"], webhook["error"]) == ("failed", SUPERSEDED)
    run(store, job_id, "succeed")
    assert set(due(store, job_id)) == {"webhook"}
    assert notifications.begin(store, Channel.WEBHOOK, job_id, H1, LEASE_MS) == 1
