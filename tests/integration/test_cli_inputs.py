"""Inputs checked where they enter: worker options, the namespace's shard count, and an
idempotency key resubmitted with another spec. Each is refused with exit 2 and a message
naming it, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Cli
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client
from jobcenter.errors import SettingsMismatch


def namespace_keys(client: redis.Redis, namespace: str) -> list[bytes]:
    return list(client.scan_iter(match=f"jc:{namespace}:*", count=1000))


def write_spec(directory: Path, name: str, spec: dict[str, Any]) -> str:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_worker_strips_the_queue_names_it_is_given_and_serves_them(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    worker = workers.start("--queues", " default , other")
    handler = workers.handler_of(worker)
    assert handler is not None
    info = workers.redis.hget(workers.keys.worker_info(handler), "queues")
    assert info == b"default,other"
    spec = {"name": "other-queue", "queue": "other",
            "tasks": [{"id": "a", "task": "tasks_for_tests.record"}]}  # fmt: skip

    done = cli("submit", write_spec(tmp_path, "other", spec), "--wait", "--json",
               "--timeout", str(JOB_SECONDS))  # fmt: skip

    assert done.code == 0, done.stderr
    assert done.json()["state"] == "succeeded"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--queues", "default,,other"], "--queues 'default,,other': each queue"),
        (["--queues", "default,"], "got an empty name"),
        (["--queues", "a b"], "'a b'"),
        (["--queues", "bulk:high"], "'bulk:high'"),
        (["--node", "db host"], "--node must be"),
        (["--node", "node:1"], "'node:1'"),
        (["--node", ""], "--node must be"),
    ],
)
def test_worker_refuses_a_bad_queue_or_node_name_naming_it_and_writes_nothing(
    cli: Cli, redis_client: redis.Redis, namespace: str, options: list[str], named: str
) -> None:
    # --burst: were the name taken, the worker would exit 0 at once instead of hanging
    result = cli("worker", "tasks_for_tests", "--burst", *options)

    assert result.code == 2, result.stderr
    assert named in result.stderr
    assert "letters, digits" in result.stderr  # the rule it breaks
    assert namespace_keys(redis_client, namespace) == []


@pytest.mark.parametrize(
    ("variable", "raw", "named"),
    [
        (
            "JOBCENTER_LEASE_SECONDS",
            "nan",
            "must be a duration (seconds, or 90s, 15m, 3d, PT1H), got 'nan'",
        ),
        ("JOBCENTER_LEASE_SECONDS", "inf", "got 'inf'"),
        ("JOBCENTER_LEASE_SECONDS", "1e-9", "got '1e-9'"),
        ("JOBCENTER_SHARDS", "nan", "got 'nan'"),
        ("JOBCENTER_CONCURRENCY", "10001", "from 1 to 10000, got 10001"),
    ],
)
def test_worker_refuses_a_numeric_setting_out_of_bounds_with_exit_2_and_no_traceback(
    cli: Cli, redis_client: redis.Redis, namespace: str, variable: str, raw: str, named: str
) -> None:
    # --burst: were the value taken, the worker would exit at once instead of hanging
    result = cli("worker", "tasks_for_tests", "--burst", env={variable: raw})

    assert result.code == 2, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert variable in result.stderr and named in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert namespace_keys(redis_client, namespace) == []


@pytest.mark.parametrize("namespace_arg", ["a:b", "{x}", "has space", ""])
def test_a_namespace_outside_the_id_rule_is_refused(cli: Cli, namespace_arg: str) -> None:
    result = cli("list", "--namespace", namespace_arg)

    assert result.code == 2, result.stderr
    assert "the namespace must be" in result.stderr


def test_a_shard_count_other_than_the_namespaces_is_refused_naming_both(
    cli: Cli, workers: Workers, redis_url: str, namespace: str
) -> None:
    assert cli("list").code == 0  # first use: the namespace keeps 1 shard from now on
    two = {"JOBCENTER_SHARDS": "2"}

    listed = cli("list", env=two)
    assert listed.code == 2, listed.stderr
    assert f"namespace {namespace!r} has shard count 1" in listed.stderr
    assert "JOBCENTER_SHARDS=2" in listed.stderr and "JOBCENTER_SHARDS=1" in listed.stderr

    worker = workers.start("--burst", env=two, wait_ready=False)
    worker.expect_exit = {2}
    assert worker.wait() == 2
    assert "has shard count 1" in worker.log() and "JOBCENTER_SHARDS=2" in worker.log()

    with pytest.raises(SettingsMismatch, match="has shard count 1"):
        Client.from_url(redis_url, namespace, shards=2)
    assert cli("list").code == 0


def test_a_namespace_first_used_with_two_shards_refuses_one(cli: Cli, redis_url: str) -> None:
    assert cli("list", env={"JOBCENTER_SHARDS": "2"}).code == 0

    result = cli("list")

    assert result.code == 2, result.stderr
    assert "has shard count 2" in result.stderr and "JOBCENTER_SHARDS=1" in result.stderr


def test_resubmitting_an_idempotency_key_with_another_spec_exits_2_naming_both(
    cli: Cli, client: Client, tmp_path: Path
) -> None:
    spec = {"name": "nightly", "idempotency_key": "etl-2026-11-22",
            "tasks": [{"id": "x", "task": "tasks_for_tests.record", "args": ["a"]}]}  # fmt: skip
    first = cli("submit", write_spec(tmp_path, "first", spec))
    assert first.code == 0, first.stderr
    job_id = first.stdout.strip()
    again = cli("submit", write_spec(tmp_path, "again", spec))
    assert (again.code, again.stdout.strip()) == (0, job_id)  # the same spec: the same job

    changed = {**spec, "tasks": [{**spec["tasks"][0], "args": ["b"]}]}
    result = cli("submit", write_spec(tmp_path, "changed", changed))

    assert result.code == 2, result.stderr
    assert "idempotency key 'etl-2026-11-22'" in result.stderr
    assert job_id in result.stderr and "different spec" in result.stderr
    assert [row["id"] for row in client.list()] == [job_id]
