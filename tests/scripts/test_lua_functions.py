"""The scripts as Redis Functions libraries (Redis 7 and later): every script loads as one, a
call starts from fresh locals as an EVALSHA's chunk does, a flushed server gets them again,
and a server without functions (Redis 6.2) runs the same scripts as EVALSHA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import FUNCTIONS, server_of_version
from lua_helpers import script_calls

from jobcenter.config import Settings
from jobcenter.model.spec import spec_from_any
from jobcenter.model.states import JobState
from jobcenter.storage import lua
from jobcenter.storage.lua import ALL_SCRIPTS, library
from jobcenter.storage.lua.library import LibraryError, _library_text
from jobcenter.storage.server.embedded import RedisServer
from jobcenter.storage.server.errors import write_refused
from jobcenter.storage.store import Store

HANDLER = "handler-functions"
TWO = {
    "name": "two",
    "tasks": [{"id": "a", "task": "t.a"}, {"id": "b", "task": "t.b", "depends_on": ["a"]}],
}


@pytest.fixture
def functions_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from server_of_version(tmp_path, lambda v: v >= FUNCTIONS, "Redis >= 7 (functions)")


@pytest.fixture
def old_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from server_of_version(tmp_path, lambda v: v < FUNCTIONS, "Redis < 7")


def run_job(store: Store) -> str:
    """Submit TWO and run it to its end through the store's task path."""
    job_id, _ = store.submit(spec_from_any(TWO))
    for _ in range(2):
        (task,) = store.claim(HANDLER, ["default"], max_tasks=1, max_leader=0).tasks
        store.complete(HANDLER, [(task.job_id, task.index, task.token)])
    assert store.job_state(job_id) == JobState.SUCCEEDED
    return job_id


def test_every_script_loads_as_a_library(functions_server: RedisServer) -> None:
    client = redis.Redis.from_url(functions_server.url)
    for name in sorted(ALL_SCRIPTS):
        function, text = library(name)
        assert client.execute_command("FUNCTION", "LOAD", "REPLACE", text) == function.encode()


def test_a_server_with_functions_runs_fcall_and_a_flushed_one_gets_them_again(
    functions_server: RedisServer,
) -> None:
    store = Store.from_settings(Settings(redis_url=functions_server.url, namespace="fn"))
    run_job(store)
    calls = script_calls(store.redis)
    assert calls["fcall"] > 0 and calls["evalsha"] == 0
    store.redis.execute_command("FUNCTION", "FLUSH")  # as a restart without persistence
    run_job(store)  # each script found missing is loaded and its call run again
    assert script_calls(store.redis)["evalsha"] == 0


def test_a_server_without_functions_runs_evalsha(old_server: RedisServer) -> None:
    store = Store.from_settings(Settings(redis_url=old_server.url, namespace="fn"))
    store.scripts.load("claim")  # as a bench loads them all first: SCRIPT LOAD there
    run_job(store)
    assert script_calls(store.redis) == {
        "evalsha": script_calls(store.redis)["evalsha"],
        "fcall": 0,
    }
    assert store.scripts.functions is False


def test_each_call_starts_from_fresh_locals(functions_server: RedisServer) -> None:
    """A local the definitions see lives at the library's top level, but each call assigns
    it again, as each EVALSHA declared it again: no state passes from call to call."""
    source = (
        "local seen = {}\n"
        "local COUNT = {n = 0}\n"
        "function COUNT.add(k) COUNT.n = COUNT.n + 1 seen[#seen + 1] = k end\n"
        "local function total() return #seen end\n"
        "COUNT.add(ARGV[1])\n"
        "return {COUNT.n, total(), KEYS[1]}\n"
    )
    text = _library_text("jobcenter_test_fresh", source)
    client = redis.Redis.from_url(functions_server.url)
    client.execute_command("FUNCTION", "LOAD", "REPLACE", text)
    for key in ("k1", "k2", "k3"):
        assert client.execute_command("FCALL", "jobcenter_test_fresh", 1, key, "x") == [
            1,
            1,
            key.encode(),
        ]


@pytest.mark.parametrize(
    "source, problem",
    [
        (  # the definition sees the first `x`; the call would assign the second
            "local x = 1\nlocal function f() return x end\nlocal x = 2\nreturn f()\n",
            "x is declared twice",
        ),
        (  # T's functions would have no table to reach them through
            "local T\nfunction T.f() return 1 end\nreturn 1\n",
            "no top-level table is built for the functions of T",
        ),
    ],
)
def test_a_script_a_library_would_change_is_left_to_evalsha(source: str, problem: str) -> None:
    with pytest.raises(LibraryError, match=problem):
        _library_text("jobcenter_test_refused", source)


def test_a_library_the_server_refuses_runs_as_evalsha(
    functions_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose Lua would not compile a script's library (another build, a limit it
    sets lower) runs that script as EVALSHA and the others as functions."""
    real = lua.library
    broken = "#!lua name=jobcenter_broken\nthis is not Lua\n"
    monkeypatch.setattr(
        lua, "library", lambda name: (real(name)[0], broken) if name == "claim" else real(name)
    )
    store = Store.from_settings(Settings(redis_url=functions_server.url, namespace="fn"))
    run_job(store)
    calls = script_calls(store.redis)
    assert calls["evalsha"] > 0 and calls["fcall"] > 0
    assert store.scripts.refused == {"claim"}


@pytest.mark.parametrize(
    "refusal",
    [("CONFIG", "SET", "maxmemory", "1"), ("REPLICAOF", "127.0.0.1", "1")],
    ids=["out-of-memory", "read-only"],
)
def test_a_library_refused_for_now_is_loaded_by_the_next_call(
    functions_server: RedisServer, refusal: tuple[str, ...]
) -> None:
    """A server that refuses every write (maxmemory reached, a read-only replica) refuses a
    library's load too: that call fails as the write would, and the next one, once the
    server takes writes again, loads the library; the script never falls back to EVALSHA."""
    admin = redis.Redis.from_url(functions_server.url)
    store = Store.from_settings(Settings(redis_url=functions_server.url, namespace="fn"))
    admin.execute_command(*refusal)

    with pytest.raises(redis.ResponseError) as refused:
        store.submit(spec_from_any(TWO))

    assert write_refused(refused.value)
    assert store.scripts.refused == set()
    admin.execute_command("CONFIG", "SET", "maxmemory", "0")
    admin.execute_command("REPLICAOF", "NO", "ONE")
    run_job(store)
    assert script_calls(admin)["evalsha"] == 0


def test_a_user_whose_acl_forbids_functions_runs_evalsha(functions_server: RedisServer) -> None:
    """A managed Redis may deny FCALL and FUNCTION LOAD to the user jobcenter connects as,
    while it allows EVALSHA: the scripts run as EVALSHA."""
    admin = redis.Redis.from_url(functions_server.url)
    admin.execute_command(
        "ACL", "SETUSER", "worker", "on", ">secret", "~*", "&*", "+@all", "-fcall", "-function"
    )
    url = functions_server.url.replace("redis://", "redis://worker:secret@")
    store = Store.from_settings(Settings(redis_url=url, namespace="fn"))
    run_job(store)
    calls = script_calls(admin)
    assert calls["evalsha"] > 0 and calls["fcall"] == 0
    assert store.scripts.functions is False


def test_a_batch_that_finds_its_library_gone_loads_it_once(functions_server: RedisServer) -> None:
    """After a restart or a flush, a pipeline of many calls of one script (submit_many's,
    say) loads its library once, not once a call: each load blocks Redis for its compile."""
    store = Store.from_settings(Settings(redis_url=functions_server.url, namespace="fn"))
    calls = 5
    for attempt in range(2):  # the first loads it as any first call; the second after a flush
        if attempt:
            store.redis.execute_command("FUNCTION", "FLUSH")
        store.redis.config_resetstat()
        batch = store.scripts.batch()
        for _ in range(calls):  # releasing a lease nobody holds: refused, changes nothing
            batch.add("singleton", ["fn:lease", "fn:round"], ["release", "nobody", "1000"])
        assert batch.execute() == [[-1]] * calls
        loads = store.redis.info("commandstats").get("cmdstat_function|load", {"calls": 0})
        assert loads["calls"] == 1
