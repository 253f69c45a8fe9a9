"""A job's `timeout` and `sla`, as a recovery pass acts on them: a job still running past its
timeout fails, its running attempt revoked and the rest ended, the error saying it timed
out; a job unfinished past its sla is said late once and goes on."""

from __future__ import annotations

import pytest
from helpers import wait_until
from lua_helpers import H1, claim, job_field, redis_now_ms, submit

from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec
from jobcenter.runtime.recovery import Recovery
from jobcenter.storage.events import Events
from jobcenter.storage.store import Store

TWO = {"name": "two", "tasks": [{"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b"}]}


def past(store: Store, job_id: str, field: str, ms: int) -> None:
    """Wait (on Redis time) until `ms` after the job's `field` time."""
    at = int(float(job_field(store, job_id, field) or 0))
    wait_until(lambda: redis_now_ms(store) > at + ms, timeout=5)


def test_a_job_running_past_its_timeout_fails_with_its_attempts_revoked(store: Store) -> None:
    job_id = submit(store, {**TWO, "timeout": 0.2})
    running = claim(store, H1, 1)[0]
    Recovery(store, "rq:test").run()
    assert job_field(store, job_id, "state") == "running"  # not yet

    past(store, job_id, "started_at", 200)
    report = Recovery(store, "rq:test").run()

    assert report.timed_out == 1
    status = store.status(job_id)
    assert status["state"] == "failed" and "timed out" in (status["error"] or "")
    assert {t["state"] for t in status["tasks"].values()} == {"failed"}
    codes, _ = store.complete(H1, [(job_id, running.index, running.token)])
    assert codes[(job_id, running.index)] != 0  # the revoked attempt's result is refused


def test_a_job_past_its_sla_is_said_late_once_and_goes_on(store: Store) -> None:
    job_id = submit(store, {**TWO, "sla": "100ms"})
    Recovery(store, "rq:test").run()
    assert job_field(store, job_id, "late") is None

    past(store, job_id, "created_at", 100)
    first = Recovery(store, "rq:test").run()
    second = Recovery(store, "rq:test").run()

    assert (first.late, second.late) == (1, 0)
    assert job_field(store, job_id, "state") == "running"
    assert store.status(job_id)["late_at"] is not None
    assert store.list_jobs()[0]["late_at"] is not None
    kinds = [e.kind for e in Events(store).read(job_id=job_id)[0]]
    assert kinds.count("late") == 1


@pytest.mark.parametrize("key", ["timeout", "sla"])
def test_a_bad_deadline_is_refused_naming_it(key: str) -> None:
    with pytest.raises(SpecError, match=key):
        parse_spec({**TWO, key: "soon"})
    with pytest.raises(SpecError, match=key):
        parse_spec({**TWO, key: 0})
