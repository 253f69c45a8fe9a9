"""Upgrades: a namespace the previous release (schema version 1) left with jobs half way is
upgraded by the first process of this release that opens it, and finished by its workers; a
namespace of a newer version is refused; a new one gets this release's version.

The previous release's keys come from tests/fixtures/upgrade_v1.json, which
scripts/make_upgrade_fixture.py writes by running that release's code (from git) against a
fresh Redis: vendored, since a CI clone may have no history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from harness import Cli
from helpers import wait_until
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.storage.keyspace.upgrade import SCHEMA_VERSION

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "upgrade_v1.json"
EXIT_REFUSED = 5


def load_fixture(r: redis.Redis, namespace: str) -> dict[str, str]:
    """Write the fixture's keys into `namespace`; returns its job ids by name."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    old = data["namespace"]
    for entry in data["keys"]:
        key = entry["key"].replace(f"jc:{old}:", f"jc:{namespace}:")
        key = key.replace(f"{{{old}.", f"{{{namespace}.")
        value = entry["value"]
        raw = lambda s: s.encode("latin-1")  # noqa: E731 (the generator's encoding)
        if entry["type"] == "hash":
            r.hset(key, mapping={raw(k): raw(v) for k, v in value.items()})
        elif entry["type"] == "list":
            r.rpush(key, *[raw(v) for v in value])
        elif entry["type"] == "zset":
            r.zadd(key, {raw(m): s for m, s in value})
        else:
            r.set(key, raw(value))
        if entry["ttl_ms"] > 0:
            r.pexpire(key, entry["ttl_ms"])
    return data["jobs"]


def test_a_job_half_run_by_the_previous_release_is_finished_by_this_one(
    redis_client: redis.Redis, redis_url: str, namespace: str, workers: Workers
) -> None:
    jobs = load_fixture(redis_client, namespace)
    half, done, failed = jobs["half-run"], jobs["done-before"], jobs["failed-before"]
    schema_key = f"jc:{namespace}:schema"
    assert redis_client.get(schema_key) is None  # version 1: before versions

    client = Client.from_url(redis_url, namespace)  # the first process of this release

    assert redis_client.get(schema_key) == str(SCHEMA_VERSION).encode()
    # the upgrade step indexed the old jobs by state, as this release's transitions do
    assert [j["id"] for j in client.list(state="running")] == [half]
    assert [j["id"] for j in client.list(state="succeeded")] == [done]
    assert [j["id"] for j in client.list(state="failed")] == [failed]
    states = {t: s["state"] for t, s in client.status(half)["tasks"].items()}
    assert states == {
        "t1": "succeeded", "t2": "succeeded", "t3": "succeeded",
        "t4": "queued", "t5": "queued", "t6": "queued",
        "t7": "waiting", "t8": "waiting", "t9": "waiting",
    }  # fmt: skip
    assert client.dead_letter(failed, "x")["error"] == "failed in the old release"

    workers.start()
    status = client.wait(half, JOB_SECONDS)

    assert status["state"] == "succeeded"
    assert {t["state"] for t in status["tasks"].values()} == {"succeeded"}
    history = client.history(half)
    assert len(history) == 9
    assert {h["task"] for h in history if h["handler"] == "old-worker"} == {"t1", "t2", "t3"}
    job_key = client.store.keys.job(half).job  # a leader packs the finished job afterwards
    wait_until(lambda: client.store.redis.hget(job_key, "packed") == b"1", JOB_SECONDS,
               message=f"{half} was never compacted")  # fmt: skip
    assert client.retry(failed) == 1  # an old failed job, unpacked, retried by this release
    assert client.wait(failed, JOB_SECONDS)["state"] == "succeeded"
    assert [h["state"] for h in client.history(failed)] == ["failed", "succeeded"]
    assert {j["id"] for j in client.list(state="succeeded")} == {half, done, failed}
    assert client.list(state="running") == []


def test_a_namespace_of_a_newer_schema_is_refused_with_what_to_do(
    redis_client: redis.Redis, cli: Cli, namespace: str
) -> None:
    redis_client.set(f"jc:{namespace}:schema", SCHEMA_VERSION + 1)

    listing = cli("list")
    worker = cli("worker", "tasks_for_tests")

    for result in (listing, worker):
        assert result.code == EXIT_REFUSED, result.stderr
        assert f"schema version {SCHEMA_VERSION + 1}" in result.stderr
        assert "docs/operations/upgrades.md" in result.stderr
    assert redis_client.get(f"jc:{namespace}:schema") == str(SCHEMA_VERSION + 1).encode()


def test_a_new_namespace_gets_this_releases_version_at_its_first_use(
    redis_client: redis.Redis, cli: Cli, namespace: str
) -> None:
    assert cli("list").code == 0
    assert redis_client.get(f"jc:{namespace}:schema") == str(SCHEMA_VERSION).encode()
