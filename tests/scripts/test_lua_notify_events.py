"""Notices of a job's events in Lua: mark_late queues one `late` delivery per channel when
`notify.on` lists `late`; a task failing for good queues a `task_failed` delivery of its own,
for the job's first TASK_FAILED_NOTICES_MAX tasks only; neither without them in `on`."""

from __future__ import annotations

from typing import Any

from helpers import wait_until
from lua_helpers import H1, NO_RETRY, claim, submit
from test_lua_notify import URL, due

from jobcenter.model.notify import TASK_FAILED_NOTICES_MAX
from jobcenter.storage import admin, notifications
from jobcenter.storage.keyspace.schema import JobField
from jobcenter.storage.store import Store


def spec(on: list[str], tasks: int = 1, **extra: Any) -> dict[str, Any]:
    notify = {"on": on, "webhook": URL, "hook": True}
    ids = [{"id": f"t{i}", "task": "t.a"} for i in range(tasks)]
    return {"name": "told", "sla": "1h", "notify": notify, "tasks": ids, **extra}


def fail_all(store: Store, job_id: str) -> None:
    for t in claim(store, H1):
        store.fail(H1, t.job_id, t.index, t.token, f"boom {t.index}", NO_RETRY)


def test_a_late_job_queues_one_late_delivery_per_channel_once(store: Store) -> None:
    job_id = submit(store, spec(["late", "failed"]))
    assert store.mark_late(job_id)
    assert set(due(store, job_id)) == {"webhook:late", "hook:late"}
    assert not store.mark_late(job_id)  # said once
    view = store.status(job_id)["notifications"]["deliveries"]
    assert view["webhook:late"]["state"] == view["hook:late"]["state"] == "pending"


def test_a_task_failing_for_good_queues_its_own_delivery_up_to_the_cap(store: Store) -> None:
    job_id = submit(store, spec(["task_failed"], tasks=TASK_FAILED_NOTICES_MAX + 5))
    fail_all(store, job_id)
    told = {c for c in due(store, job_id) if c.startswith("webhook:task_failed:")}
    assert len(told) == TASK_FAILED_NOTICES_MAX
    assert "webhook" not in due(store, job_id)  # its end was not asked for


def test_without_the_events_in_on_nothing_is_queued_for_them(store: Store) -> None:
    job_id = submit(store, spec(["succeeded"], tasks=3))
    assert store.mark_late(job_id)
    fail_all(store, job_id)
    assert due(store, job_id) == {}
    assert store.redis.hget(store.keys.job(job_id).job, JobField.TASK_FAILED_NOTICES) is None


def test_a_notice_told_while_the_job_ran_goes_with_the_expired_job(store: Store) -> None:
    job_id = submit(store, spec(["late"], retention=0.05))
    assert store.mark_late(job_id)
    claimed = notifications.claim_due(store, 0, 60_000, 10)
    for delivery in [d for d, job in claimed if job == job_id]:  # told while the job runs
        attempt = notifications.begin(store, delivery, job_id, H1, 60_000)
        assert attempt is not None
        notifications.finish(
            store, delivery, job_id, attempt, H1, delivered=True, detail="", retry_ms=-1
        )
    record = [store.keys.notifications(job_id), store.keys.deliveries(job_id)]
    assert store.redis.exists(*record) == 2
    fail_all(store, job_id)
    wait_until(lambda: not store.redis.exists(store.keys.job(job_id).job), timeout=5)
    assert admin.trim_expired(store) == 1
    assert store.redis.exists(*record) == 0
