"""A job's tags: submit files the job under each `tag:<key>=<value>` index, `list --tag`
reads that index (about `limit` job hashes, whatever the namespace holds), and delete and
the trimming of expired jobs take the job out of it."""

from __future__ import annotations

from helpers import CommandLog, wait_until
from lua_helpers import H1, claim

from jobcenter.model.spec import parse_spec
from jobcenter.storage import admin
from jobcenter.storage.store import Store

ONE = {"name": "one", "tasks": [{"id": "a", "task": "t.a"}]}
ACME = {**ONE, "tags": {"team": "data", "customer": "acme"}}
MANY = 300  # jobs in the namespace besides the ones a list asks for
LIMIT = 5


def tagged(store: Store, tag: str) -> set[str]:
    return {m.decode() for m in store.redis.zrange(store.keys.tag_jobs(0, tag), 0, -1)}


def end_all(store: Store, outcome: str) -> None:
    for t in claim(store, H1, 1000):
        if outcome == "complete":
            store.complete(H1, [(t.job_id, t.index, t.token)])
        else:
            store.fail(H1, t.job_id, t.index, t.token, "boom", -1)


def test_jobs_submitted_in_one_call_each_land_in_their_own_tag_indexes(store: Store) -> None:
    specs = [parse_spec(ACME), parse_spec(ONE), parse_spec({**ONE, "tags": {"customer": "zed"}})]
    (acme, _), (plain, _), (zed, _) = store.submit_many(specs)
    assert tagged(store, "customer=acme") == {acme}
    assert tagged(store, "team=data") == {acme}
    assert tagged(store, "customer=zed") == {zed}
    assert store.status(acme)["tags"] == {"customer": "acme", "team": "data"}
    assert store.status(plain)["tags"] == {}


def test_list_by_tag_reads_about_limit_jobs_whatever_the_namespace_holds(
    store: Store, redis_url: str
) -> None:
    asked = {job_id for job_id, _ in store.submit_many([parse_spec(ACME)] * 10)}
    store.submit_many([parse_spec({**ONE, "tags": {"customer": "other"}})] * MANY)

    with CommandLog(redis_url) as log:
        rows = store.list_jobs(tag="customer=acme", limit=LIMIT)

    assert len(rows) == LIMIT and {row["id"] for row in rows} <= asked
    assert all(row["tags"]["customer"] == "acme" for row in rows)
    prefix = store.keys.job("x").job[: -len("x")]
    reads = [c for c in log.commands if c.name == "HMGET" and (c.key or "").startswith(prefix)]
    assert len([c for c in reads if not c.in_script]) == LIMIT


def test_a_tag_combines_with_the_other_filters(store: Store) -> None:
    store.submit_many([parse_spec(ACME)] * 2)
    first = claim(store, H1, 1)[0]
    store.fail(H1, first.job_id, first.index, first.token, "boom", -1)
    failed = first.job_id
    assert [r["id"] for r in store.list_jobs(tag="customer=acme", state="failed")] == [failed]
    assert store.list_jobs(tag="customer=acme", owner="nobody") == []


def test_delete_takes_a_job_out_of_its_tag_indexes(store: Store) -> None:
    job_id, _ = store.submit(parse_spec(ACME))
    end_all(store, "fail")
    admin.delete_job(store, job_id)
    assert tagged(store, "customer=acme") == set() and tagged(store, "team=data") == set()


def test_trimming_takes_an_expired_job_out_of_its_tag_indexes(store: Store) -> None:
    job_id, _ = store.submit(parse_spec({**ACME, "retention": 0.05}))
    end_all(store, "complete")
    wait_until(lambda: not store.redis.exists(store.keys.job(job_id).job), timeout=5)
    assert tagged(store, "customer=acme") == {job_id}  # until recovery trims it
    assert admin.trim_expired(store) == 1
    assert tagged(store, "customer=acme") == set() and tagged(store, "team=data") == set()
