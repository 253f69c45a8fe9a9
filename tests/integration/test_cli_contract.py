"""The CLI contract the README documents: JSON shapes, filters, exit codes and messages."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import Cli
from integration_harness import JOB_SECONDS, Workers

JOB_KEYS = {"id", "name", "owner", "state", "created_at", "finished_at", "error", "tasks",
            "notifications", "schedule_id", "fire_time", "tags", "paused_at",
            "late_at"}  # fmt: skip
TASK_KEYS = {"state", "attempts", "handler", "queued_at", "started_at", "finished_at", "error"}
TASK_KEYS |= {"created_at", "updated_at", "completed_at"}  # the three times a task keeps
LIST_KEYS = {"id", "name", "owner", "state", "created_at", "finished_at", "schedule_id",
             "fire_time", "tags", "paused_at", "late_at"}  # fmt: skip
# Keys a list row has beyond those of `status`, on purpose. Listed, so that a renamed or stray
# key still fails here: a script parsing the JSON would break on it.
LIST_EXTRA_KEYS: set[str] = set()


def assert_keys(found: dict[str, Any], documented: set[str], extra: set[str]) -> None:
    missing = documented - set(found)
    unexpected = set(found) - documented - extra
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"


def write_spec(directory: Path, name: str, spec: dict[str, Any]) -> str:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(spec))
    return str(path)


def submit(cli: Cli, spec_path: str) -> str:
    result = cli("submit", spec_path, "--json")
    assert result.code == 0, result.stderr
    return str(result.json()["id"])


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_status_json_has_exactly_the_documented_keys(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    workers.start()
    spec = {
        "name": "shape",
        "owner": "alice",
        "tasks": [
            {"id": "ok", "task": "tasks_for_tests.record"},
            {"id": "bad", "task": "tasks_for_tests.fatal", "args": ["broken"]},
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["bad"]},
        ],
    }
    result = cli("submit", write_spec(tmp_path, "shape", spec), "--wait", "--json",
                 "--timeout", str(JOB_SECONDS))  # fmt: skip
    assert result.code == 1, result.stderr
    job_id = result.json()["id"]

    result = cli("status", job_id, "--json")

    assert result.code == 0, result.stderr
    status = result.json()
    assert set(status) == JOB_KEYS
    assert (status["id"], status["name"], status["owner"], status["state"]) == (
        job_id, "shape", "alice", "failed",
    )  # fmt: skip
    assert status["finished_at"] >= status["created_at"] > 0
    assert list(status["tasks"]) == ["ok", "bad", "after"]
    for task_id, task in status["tasks"].items():
        assert set(task) >= TASK_KEYS, task_id
    ok, bad, after = (status["tasks"][k] for k in ("ok", "bad", "after"))
    assert ok["state"] == "succeeded" and ok["attempts"] == 1 and ok["error"] is None
    assert ok["queued_at"] <= ok["started_at"] <= ok["finished_at"]
    assert ok["handler"]
    assert bad["state"] == "failed" and "broken" in bad["error"]
    assert after["state"] == "upstream_failed" and after["started_at"] is None

    text = cli("status", job_id)  # the human form names the job and every task
    assert text.code == 0, text.stderr
    for word in (job_id, "failed", "ok", "bad", "after", "upstream_failed"):
        assert word in text.stdout


def test_list_json_rows_are_newest_first_and_filter_by_owner_and_state(
    cli: Cli, workers: Workers, tmp_path: Path
) -> None:
    workers.start()

    def job(name: str, owner: str, task: str) -> str:
        spec = {"name": name, "owner": owner, "tasks": [{"id": "t", "task": task}]}
        result = cli("submit", write_spec(tmp_path, name, spec), "--wait", "--json",
                     "--timeout", str(JOB_SECONDS))  # fmt: skip
        assert result.code in (0, 1), result.stderr
        return str(result.json()["id"])

    first = job("first", "alice", "tasks_for_tests.record")
    broken = job("broken", "bob", "tasks_for_tests.fatal")
    third = job("third", "alice", "tasks_for_tests.record")

    def listed(*options: str) -> list[dict[str, Any]]:
        result = cli("list", "--json", *options)
        assert result.code == 0, result.stderr
        rows = result.json()
        for row in rows:
            assert_keys(row, LIST_KEYS, LIST_EXTRA_KEYS)
        return list(rows)

    rows = listed()
    assert [r["id"] for r in rows] == [third, broken, first]
    assert [(r["name"], r["owner"], r["state"]) for r in rows] == [
        ("third", "alice", "succeeded"),
        ("broken", "bob", "failed"),
        ("first", "alice", "succeeded"),
    ]
    assert all(r["finished_at"] >= r["created_at"] > 0 for r in rows)
    assert [r["id"] for r in listed("--owner", "alice")] == [third, first]
    assert [r["id"] for r in listed("--state", "failed")] == [broken]
    assert [r["id"] for r in listed("--owner", "alice", "--state", "failed")] == []
    assert listed("--owner", "nobody") == []


BAD_SPECS = {
    "cycle": (
        [{"id": "a", "task": "x.y", "depends_on": ["b"]},
         {"id": "b", "task": "x.y", "depends_on": ["a"]}],
        r"a -> b -> a|b -> a -> b",
    ),
    "unknown dependency": (
        [{"id": "load", "task": "x.y", "depends_on": ["extrct"]}],
        r"load.*extrct",
    ),
    "self dependency": (
        [{"id": "a", "task": "x.y", "depends_on": ["a"]}],
        r"'a'",
    ),
    "duplicate id": (
        [{"id": "a", "task": "x.y"}, {"id": "a", "task": "x.y"}],
        r"duplicate.*'a'|'a'.*duplicate",
    ),
}  # fmt: skip


@pytest.mark.parametrize("problem", list(BAD_SPECS))
def test_bad_spec_exits_2_naming_the_problem_and_writes_nothing(
    problem: str, cli: Cli, namespace: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    tasks, pattern = BAD_SPECS[problem]
    path = write_spec(tmp_path, "bad", {"name": "bad", "tasks": tasks})

    result = cli("submit", path)

    assert result.code == 2, (result.stdout, result.stderr)
    assert re.search(pattern, result.stderr, re.IGNORECASE), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert list(redis_client.scan_iter(match=f"*{namespace}*")) == []


@pytest.mark.parametrize(
    "command",
    [
        ["submit", "SPEC"],
        ["status", "01J0000000000000000000000"],
        ["list"],
        ["cancel", "01J0000000000000000000000"],
        ["worker", "tasks_for_tests"],
    ],
    ids=lambda command: command[0],
)
def test_unreachable_redis_exits_3_with_a_clear_message(
    command: list[str], cli: Cli, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path, "ok", {"name": "ok", "tasks": [{"id": "a", "task": "x.y"}]})
    url = f"redis://127.0.0.1:{closed_port()}/0"

    result = cli(*[spec if arg == "SPEC" else arg for arg in command], "--redis-url", url)

    assert result.code == 3, (result.stdout, result.stderr)
    assert "cannot reach Redis" in result.stderr
    assert url.split("/")[2] in result.stderr  # names the host:port it tried
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["status", "cancel", "history", "retry"])
def test_command_on_an_unknown_job_exits_2_naming_it(command: str, cli: Cli) -> None:
    result = cli(command, "01J0000000000000000000000")

    assert result.code == 2, (result.stdout, result.stderr)
    assert "01J0000000000000000000000" in result.stderr
    assert result.stdout == ""
