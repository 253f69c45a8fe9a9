"""Every limit of a spec, at `jobcenter submit` against the real test Redis: at the limit the
job is accepted and stored; one past it, exit 2 with a message naming the limit, and
nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lua_helpers import assert_same, snapshot

from jobcenter.cli import EXIT_BAD_INPUT, main
from jobcenter.config import Settings
from jobcenter.model import codec
from jobcenter.model import spec as spec_module
from jobcenter.model.spec import (
    MAX_DEPENDENCIES,
    MAX_JOB_PAYLOAD_BYTES,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_RETRIES,
    MAX_SECONDS,
    MAX_TASK_PAYLOAD_BYTES,
    MAX_TASKS,
)
from jobcenter.storage.store import Store

ID_MAX = 128  # spec.ID_RE
TASK_NAME_MAX = 200  # spec.TASK_NAME_RE


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    store = Store.from_settings(Settings(redis_url=redis_url, namespace=namespace))
    yield store
    for key in store.redis.scan_iter(match=f"jc:{namespace}:*", count=1000):
        store.redis.unlink(key)  # the largest jobs here hold 64 MiB
    store.redis.close()


def submit(store: Store, spec: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    return submit_file(store, path)


def submit_file(store: Store, path: Path) -> tuple[int, str]:
    """`jobcenter submit --json PATH`, in-process: exit code, and the job id or the error."""
    url, namespace = store.settings.redis_url, store.settings.namespace
    args = ["submit", str(path), "--json", "--redis-url", url, "--namespace", namespace]
    result = CliRunner().invoke(main, args)
    if result.exit_code == 0:
        return 0, json.loads(result.stdout)["id"]
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stderr.strip()


def accepted(store: Store, spec: dict[str, Any], tmp_path: Path) -> None:
    code, out = submit(store, spec, tmp_path)
    assert code == 0, out
    assert store.redis.hget(store.keys.job(out).job, "state") is not None


def refused(store: Store, spec: dict[str, Any], tmp_path: Path, problem: str) -> None:
    before = snapshot(store)
    code, out = submit(store, spec, tmp_path)
    assert code == EXIT_BAD_INPUT, out
    assert out.startswith("error: spec file ") and problem in out, out
    assert_same(before, snapshot(store))


def job(**fields: Any) -> dict[str, Any]:
    return {"name": "j", "tasks": [{"id": "a", "task": "app.run"}], **fields}


def task(**fields: Any) -> dict[str, Any]:
    return job(tasks=[{"id": "a", "task": "app.run", **fields}])


def payload(size: int) -> list[str]:
    """args that pack to exactly `size` bytes (one str of at least 64 KiB)."""
    header = len(codec.pack(["x" * 70_000])) - 70_000
    return ["x" * (size - header)]


def full_payloads(one_more: bool = False) -> dict[str, Any]:
    """Tasks whose payloads add up to the job's limit (and one more task with `[1]`)."""
    count = MAX_JOB_PAYLOAD_BYTES // MAX_TASK_PAYLOAD_BYTES
    full = payload(MAX_TASK_PAYLOAD_BYTES)
    tasks = [{"id": f"t{i}", "task": "app.run", "args": full} for i in range(count)]
    if one_more:
        tasks.append({"id": f"t{count}", "task": "app.run", "args": [1]})
    return job(tasks=tasks)


def many_tasks(count: int) -> dict[str, Any]:
    return job(tasks=[{"id": f"t{i}", "task": "app.run"} for i in range(count)])


def dependencies(count: int) -> dict[str, Any]:
    """1,000 parents, then children each depending on up to all of them: `count` edges."""
    parents = [f"p{i}" for i in range(1000)]
    tasks: list[dict[str, Any]] = [{"id": p, "task": "app.run"} for p in parents]
    while count > 0:
        tasks.append({"id": f"c{len(tasks)}", "task": "app.run", "depends_on": parents[:count]})
        count -= len(parents)
    return job(tasks=tasks)


SECONDS_OVER = "must be a duration > 0 and at most 366d"
# (name, spec at the limit, spec one past it, what the refusal says)
LIMITS: list[tuple[str, Callable[[], dict[str, Any]], Callable[[], dict[str, Any]], str]] = [
    (
        "job name",
        lambda: job(name="n" * MAX_NAME_LENGTH),
        lambda: job(name="n" * (MAX_NAME_LENGTH + 1)),
        "'name' must be 1-200 printable characters",
    ),
    (
        "idempotency key",
        lambda: job(idempotency_key="k" * MAX_NAME_LENGTH),
        lambda: job(idempotency_key="k" * (MAX_NAME_LENGTH + 1)),
        "'idempotency_key' must be 1-200 printable characters",
    ),
    (
        "owner",
        lambda: job(owner="o" * ID_MAX),
        lambda: job(owner="o" * 129),
        "'owner' must be 1-128",
    ),
    (
        "job queue",
        lambda: job(queue="q" * ID_MAX),
        lambda: job(queue="q" * 129),
        "'queue' must be 1-128",
    ),
    ("task id", lambda: task(id="i" * ID_MAX), lambda: task(id="i" * 129), "invalid id 'iii"),
    (
        "task name",
        lambda: task(task="t" * TASK_NAME_MAX),
        lambda: task(task="t" * (TASK_NAME_MAX + 1)),
        "'task' must be 1-200 letters",
    ),
    (
        "task queue",
        lambda: task(queue="q" * ID_MAX),
        lambda: task(queue="q" * 129),
        "'queue' must be 1-128",
    ),
    ("node", lambda: task(node="n" * ID_MAX), lambda: task(node="n" * 129), "'node' must be 1-128"),
    (
        "retries",
        lambda: task(retries=MAX_RETRIES),
        lambda: task(retries=MAX_RETRIES + 1),
        "'retries' must be at most 100, got 101",
    ),
    (
        "priority",
        lambda: task(priority=MAX_PRIORITY),
        lambda: task(priority=MAX_PRIORITY + 1),
        "'priority' must be at most 1000000000",
    ),
    (
        "negative priority",
        lambda: job(priority=-MAX_PRIORITY),
        lambda: job(priority=-MAX_PRIORITY - 1),
        "'priority' must be an integer from -1000000000 to 1000000000",
    ),
    (
        "timeout",
        lambda: task(timeout=MAX_SECONDS),
        lambda: task(timeout=MAX_SECONDS + 1),
        "'timeout' " + SECONDS_OVER,
    ),
    (
        "timeout written as a duration",
        lambda: task(timeout="366d"),
        lambda: task(timeout="366d1ms"),
        "'timeout' " + SECONDS_OVER + ", got '366d1ms'",
    ),
    (
        "retry backoff",
        lambda: task(retry_backoff=MAX_SECONDS, retry_backoff_max=MAX_SECONDS),
        lambda: task(retry_backoff=MAX_SECONDS + 0.5, retry_backoff_max=MAX_SECONDS),
        "'retry_backoff' must be a duration >= 0 and at most 366d",
    ),
    (
        "retry backoff cap",
        lambda: task(retry_backoff_max=MAX_SECONDS),
        lambda: task(retry_backoff_max=1e300),
        "'retry_backoff_max' must be a duration >= 0 and at most 366d",
    ),
    (
        "retention",
        lambda: job(retention=MAX_SECONDS),
        lambda: job(retention=10**400),
        "'retention' " + SECONDS_OVER,
    ),
    (
        "task payload",
        lambda: task(args=payload(MAX_TASK_PAYLOAD_BYTES)),
        lambda: task(args=payload(MAX_TASK_PAYLOAD_BYTES + 1)),
        "args and kwargs take more than 524288 bytes packed (the limit per task)",
    ),
    (
        "job payload",
        full_payloads,
        lambda: full_payloads(one_more=True),
        "args and kwargs take more than 67108864 bytes packed in all (the limit per job), "
        "passed at task 't128'",
    ),
    (
        "task count",
        lambda: many_tasks(MAX_TASKS),
        lambda: many_tasks(MAX_TASKS + 1),
        "job has 100001 tasks; the limit is 100000",
    ),
    (
        "dependencies",
        lambda: dependencies(MAX_DEPENDENCIES),
        lambda: dependencies(MAX_DEPENDENCIES + 1),
        "job has more than 1000000 dependencies (the limit), passed at task 'c2000'",
    ),
]


@pytest.mark.parametrize(
    ("at_limit", "past_limit", "problem"),
    [case[1:] for case in LIMITS],
    ids=[case[0] for case in LIMITS],
)
def test_at_the_limit_accepted_past_it_refused_naming_it(
    store: Store,
    tmp_path: Path,
    at_limit: Callable[[], dict[str, Any]],
    past_limit: Callable[[], dict[str, Any]],
    problem: str,
) -> None:
    refused(store, past_limit(), tmp_path, problem)
    accepted(store, at_limit(), tmp_path)


def test_spec_file_size_at_the_limit_accepted_past_it_refused(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit lowered to a small file's size (the real one is 256 MiB)."""
    path = tmp_path / "job.yaml"
    path.write_text("name: j\ntasks: [{id: a, task: app.run}]\n")
    monkeypatch.setattr(spec_module, "MAX_SPEC_FILE_BYTES", path.stat().st_size)
    code, out = submit_file(store, path)
    assert code == 0, out
    path.write_text(path.read_text() + "\n")
    before = snapshot(store)
    code, out = submit_file(store, path)
    assert code == EXIT_BAD_INPUT
    assert out.endswith(f"is larger than {path.stat().st_size - 1} bytes (the limit)"), out
    assert_same(before, snapshot(store))
