"""Durations wherever a person writes one, through real `jobcenter` runs: a spec's keys,
`submit --timeout`, `schedule add --every`, a rate's period, `--since`, and the JOBCENTER_*
settings take the forms of jobcenter.model.durations (30, 90s, 15m, 1h30m, 3d, PT1H), and a
bad one exits 2 with the one message form, writing nothing. A spec's YAML `on:` is a key."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from harness import Cli
from integration_harness import JOB_SECONDS, Workers

from jobcenter.storage.keyspace.keys import Keys

FORMS = "(seconds, or 90s, 15m, 3d, PT1H)"
DAY_MS = 86_400_000
TTL_SLACK_MS = 60_000  # a finished job's TTL, read after the job ended: well within this

SPEC_YAML = """\
name: durations
retention: 3d
notify: {on: [failed], webhook: "https://ops.example.com/hooks/jobcenter"}
tasks:
  - id: a
    task: tasks_for_tests.record
    timeout: 10m
    retry_backoff: 500ms
    retry_backoff_max: PT1M
    estimate: 1m30s
"""
PLAIN_YAML = """\
name: plain
tasks:
  - {id: a, task: tasks_for_tests.record}
"""


def spec_file(directory: Path, text: str = PLAIN_YAML) -> str:
    path = directory / "spec.yaml"
    path.write_text(text)
    return str(path)


def namespace_keys(client: redis.Redis, namespace: str) -> list[bytes]:
    return list(client.scan_iter(match=f"jc:{namespace}:*", count=1000))


def job_ttl_ms(client: redis.Redis, namespace: str, job_id: str) -> int:
    return int(client.pttl(Keys(namespace).job(job_id).job))


def test_a_yaml_spec_with_durations_and_a_notify_on_key_runs_and_keeps_its_retention(
    cli: Cli, workers: Workers, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    workers.start()

    done = cli("submit", spec_file(tmp_path, SPEC_YAML), "--wait", "--json", "--timeout", "30s")

    assert done.code == 0, done.stderr
    status = done.json()
    assert status["state"] == "succeeded"
    assert status["notifications"]["on"] == ["failed"]  # `on` read as a key, not as True
    ttl = job_ttl_ms(redis_client, namespace, status["id"])
    assert 3 * DAY_MS - TTL_SLACK_MS < ttl <= 3 * DAY_MS  # retention: 3d


@pytest.mark.parametrize(
    ("timeout", "problem"),
    [
        ("2 min", f"--timeout must be a duration {FORMS}, got '2 min'"),
        ("0s", "--timeout must be a duration > 0 and at most 366d, got '0s'"),
        ("P1M", "--timeout must be a duration of fixed length (give days or weeks: months and "
                "years have none), got 'P1M'"),
    ],
)  # fmt: skip
def test_submit_refuses_a_timeout_in_no_form_with_the_one_message_and_writes_nothing(
    cli: Cli, redis_client: redis.Redis, namespace: str, tmp_path: Path, timeout: str, problem: str
) -> None:
    refused = cli("submit", spec_file(tmp_path), "--wait", "--timeout", timeout)

    assert (refused.code, refused.stderr) == (2, f"error: {problem}\n")
    assert namespace_keys(redis_client, namespace) == []


def test_schedule_every_takes_a_duration_and_shows_it_as_written(cli: Cli, tmp_path: Path) -> None:
    added = cli("schedule", "add", spec_file(tmp_path), "--every", "1h30m")
    assert added.code == 0, added.stderr

    [row] = cli("schedule", "list", "--json").json()
    assert (row["kind"], row["expr"]) == ("every", "1h30m")
    assert row["next_fire"] - row["created_at"] == pytest.approx(5400)

    refused = cli("schedule", "add", spec_file(tmp_path), "--every", "90 min")
    assert (refused.code, refused.stderr) == (
        2,
        f"error: --every must be a duration {FORMS}, got '90 min'\n",
    )
    assert len(cli("schedule", "list", "--json").json()) == 1


def test_a_rate_period_takes_a_duration(cli: Cli) -> None:
    assert cli("rate", "set", "queue:metered", "10/1m30s").code == 0
    assert cli("rate", "set", "pool:gpu", "5/PT1H").code == 0

    rates = {r["target"]: r["period"] for r in cli("rate", "list", "--json").json()}
    assert rates == {"queue:metered": 90.0, "pool:gpu": 3600.0}

    refused = cli("rate", "set", "queue:metered", "10/1y")
    assert (refused.code, refused.stderr) == (
        2,
        f"error: the period of rate '10/1y' must be a duration {FORMS}, got '1y'\n",
    )
    refused = cli("rate", "set", "queue:metered", "10/2d")
    assert refused.stderr == (
        "error: the period of rate '10/2d' must be a duration >= 1ms and at most 1d, got '2d'\n"
    )


def test_since_takes_an_age_in_every_duration_form_and_names_them_for_a_bad_one(
    cli: Cli,
) -> None:
    for command in (
        ["list", "--since", "1w"],
        ["events", "--since", "1h30m"],
        ["export", "--since", "PT1H", "--until", "5m"],
    ):
        done = cli(*command)
        assert done.code == 0, (command, done.stderr)

    refused = cli("list", "--since", "2 days")
    assert (refused.code, refused.stderr) == (
        2,
        "error: --since '2 days': give epoch seconds, an ISO time or an age like 15m, 2h, 7d\n",
    )


def test_a_duration_setting_takes_every_form_and_takes_effect(
    cli: Cli, workers: Workers, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    retention = {"JOBCENTER_RETENTION_SECONDS": "P2D", "JOBCENTER_LEASE_SECONDS": "1m"}
    workers.start(env=retention)

    done = cli("submit", spec_file(tmp_path), "--wait", "--json", "--timeout",
               str(JOB_SECONDS), env=retention)  # fmt: skip

    assert done.code == 0, done.stderr
    ttl = job_ttl_ms(redis_client, namespace, done.json()["id"])
    assert 2 * DAY_MS - TTL_SLACK_MS < ttl <= 2 * DAY_MS


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("soon", f"must be a duration {FORMS}, got 'soon'"),
        ("0", "must be a duration > 0 and at most 366d, got '0'"),
    ],
)
def test_a_duration_setting_in_no_form_is_refused_with_the_one_message(
    cli: Cli, value: str, problem: str
) -> None:
    refused = cli("list", env={"JOBCENTER_NOTIFY_TIMEOUT_SECONDS": value})

    assert (refused.code, refused.stderr) == (
        2,
        f"error: JOBCENTER_NOTIFY_TIMEOUT_SECONDS {problem}\n",
    )
