"""Redis refusing writes mid-transition: a private redis-server filled to its maxmemory under
noeviction. Each transition is one Lua script that Redis refuses at its first write, so a
refused submit, complete, fail or cancel changes nothing at all, and the CLI says why (exit
3). Once memory is freed, the same transitions go through: nothing was left half-done."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from harness import CLI_TIMEOUT_SECONDS, subprocess_env
from lua_helpers import NO_RETRY, assert_same, claim, snapshot, submit

from jobcenter.cli import EXIT_NO_REDIS
from jobcenter.config import Settings
from jobcenter.storage.lua import ALL_SCRIPTS, source
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.server.errors import OUT_OF_MEMORY_REPLIES
from jobcenter.storage.store import StartedTask, Store

HANDLER = "oom-handler"
FILLER_BYTES = 10_000  # one filler key: the server is full after a few dozen
# Headroom over what the server uses once the test's jobs are in: some filler fits first.
MAXMEMORY_HEADROOM_BYTES = 200_000
OOM_REPLY = "|".join(OUT_OF_MEMORY_REPLIES)  # a script's refusal is worded apart on Redis 7.0
CLI_REFUSAL = (
    "error: Redis refused the write (out of memory: maxmemory reached and eviction is off); "
    "nothing of it was applied"
)


@pytest.fixture
def store(private_redis: RedisServer) -> Iterator[Store]:
    store = Store.from_settings(Settings(redis_url=private_redis.url, namespace="oom"))
    yield store
    store.redis.close()


def fill_to_maxmemory(client: redis.Redis) -> None:
    """Lower maxmemory to just above what is used, then write filler keys (outside the
    namespace) until Redis refuses one."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", client.info("memory")["used_memory"] + MAXMEMORY_HEADROOM_BYTES)
    for i in range(10_000):
        try:
            client.set(f"filler:{i}", b"x" * FILLER_BYTES)
        except redis.exceptions.OutOfMemoryError:
            return
    raise AssertionError("Redis never refused a write")


def free_memory(client: redis.Redis) -> None:
    client.config_set("maxmemory", 0)


def refused_untouched(store: Store, transition: Callable[[], Any]) -> None:
    """`transition` fails with Redis's OOM reply, and the namespace is exactly as before."""
    before = snapshot(store)
    with pytest.raises(redis.ResponseError, match=OOM_REPLY):
        transition()
    assert_same(before, snapshot(store))


def cli(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    """A real `jobcenter ARGS` process against the private server."""
    return subprocess.run(
        [sys.executable, "-m", "jobcenter", *args],
        env=subprocess_env(store.settings.redis_url, store.settings.namespace),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def running_tasks(store: Store) -> dict[str, StartedTask]:
    """A job of three tasks, all claimed and running: by task id."""
    spec = {"name": "j", "tasks": [{"id": t, "task": "app.run", "retries": 2} for t in "abc"]}
    submit(store, spec)
    return {"abc"[t.index]: t for t in claim(store, HANDLER, 3)}


def test_a_refused_submit_writes_nothing_and_the_cli_says_why(store: Store, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\ntasks: [{id: a, task: app.run}, {id: b, task: app.run}]\n")
    submit(store, {"name": "earlier", "tasks": [{"id": "a", "task": "app.run"}]})
    fill_to_maxmemory(store.redis)
    before = snapshot(store)
    done = cli(store, "submit", str(spec))
    assert done.returncode == EXIT_NO_REDIS, done
    assert done.stderr.strip() == CLI_REFUSAL, done.stderr
    assert_same(before, snapshot(store))

    free_memory(store.redis)
    done = cli(store, "submit", str(spec), "--json")
    assert done.returncode == 0, done


def test_refused_reports_of_running_tasks_change_nothing(store: Store) -> None:
    tasks = running_tasks(store)
    fill_to_maxmemory(store.redis)
    a, b, c = tasks["a"], tasks["b"], tasks["c"]
    refused_untouched(store, lambda: store.complete(HANDLER, [(a.job_id, a.index, a.token)]))
    refused_untouched(store, lambda: store.fail(HANDLER, b.job_id, b.index, b.token, "x", 0))
    refused_untouched(store, lambda: store.fail(HANDLER, c.job_id, c.index, c.token, "x", NO_RETRY))

    free_memory(store.redis)  # the same reports, now accepted: nothing was half-done
    codes, _ = store.complete(HANDLER, [(a.job_id, a.index, a.token)])
    assert codes == {(a.job_id, a.index): 0}
    assert store.fail(HANDLER, b.job_id, b.index, b.token, "x", 0) == (0, "queued")
    assert store.fail(HANDLER, c.job_id, c.index, c.token, "x", NO_RETRY)[0] == 0
    states = {t: s["state"] for t, s in store.status(a.job_id)["tasks"].items()}
    assert states == {"a": "succeeded", "b": "queued", "c": "failed"}


def test_a_refused_cancel_changes_nothing_and_the_cli_says_why(store: Store) -> None:
    job_id = running_tasks(store)["a"].job_id
    fill_to_maxmemory(store.redis)
    before = snapshot(store)
    done = cli(store, "cancel", job_id)
    assert done.returncode == EXIT_NO_REDIS, done
    assert done.stderr.strip() == CLI_REFUSAL, done.stderr
    assert_same(before, snapshot(store))
    refused_untouched(store, lambda: store.cancel_step(job_id, from_client=True))

    free_memory(store.redis)
    done = cli(store, "cancel", job_id)
    assert done.returncode == 0, done
    assert done.stdout.strip() == f"job {job_id} cancelled"


def test_reads_still_work_when_redis_is_full(store: Store) -> None:
    """A person looks at what is going on while Redis refuses writes: status, list and
    history read only, so they answer."""
    job_id = running_tasks(store)["a"].job_id
    fill_to_maxmemory(store.redis)
    for args in (("status", job_id), ("list",), ("history", job_id)):
        done = cli(store, *args)
        assert done.returncode == 0, done
    assert job_id in cli(store, "status", job_id).stdout


@pytest.mark.parametrize("name", sorted(ALL_SCRIPTS))
def test_no_script_swallows_a_refused_write(name: str) -> None:
    """Redis refuses a script's first write under OOM and lets the rest run once one went
    through, so a script is all or nothing unless it catches the refusal with
    redis.pcall and carries on writing: none may."""
    assert "redis.pcall" not in source(name)
