"""A worker tells its supervisor how it is: /healthz and /readyz over HTTP, `jobcenter health`,
systemd's sd_notify; worker options from the environment. (Redis going away under a worker
is in tests/chaos/test_chaos_health.py.)"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Cli
from helpers import health_port, probe, wait_probe, wait_until
from integration_harness import Scratch, Workers

from jobcenter import Client
from jobcenter.storage.server.embedded import free_port

NOTIFY_WAIT_SECONDS = 15.0  # a worker process starts, imports and registers on a loaded CI box


def test_readyz_is_200_once_the_worker_registered_and_503_while_it_drains(
    client: Client, workers: Workers, scratch: Scratch
) -> None:
    worker = workers.start("--health-port", "0")
    port = health_port(worker.log)
    code, body = probe(port, "/readyz")
    assert code == 200, body
    assert body["ready"] is True
    assert body["handler"] == workers.handler_of(worker)
    code, body = probe(port, "/healthz")
    assert (code, body["alive"]) == (200, True)

    block = {"id": "a", "task": "tasks_for_tests.block", "args": ["a"]}
    client.submit({"name": "drain", "tasks": [block]})
    wait_until(lambda: scratch.events("started", "a"), message="task never started")
    worker.signal(signal.SIGTERM)

    body = wait_probe(port, "/readyz", 503)
    assert body["draining"] is True and body["reason"].startswith("draining"), body
    code, body = probe(port, "/healthz")
    assert code == 200, "a draining worker is alive: its supervisor must let it finish"
    scratch.open_gate("a")
    assert worker.wait() == 0


def test_unknown_path_is_404(workers: Workers) -> None:
    port = health_port(workers.start("--health-port", "0").log)
    assert probe(port, "/metrics")[0] == 404


def test_health_command_exits_0_when_ready_and_1_when_no_worker_answers(
    workers: Workers, cli: Cli
) -> None:
    port = health_port(workers.start("--health-port", "0").log)
    done = cli("health", "--port", str(port))
    assert done.code == 0, done.stderr
    assert done.json()["ready"] is True
    assert cli("health", "--alive", "--port", str(port)).json()["alive"] is True

    nobody = free_port()
    done = cli("health", "--port", str(nobody))
    assert done.code == 1
    assert f"no worker health endpoint at http://127.0.0.1:{nobody}/readyz" in done.stderr


def test_a_health_port_in_use_exits_2_naming_it_before_registering(workers: Workers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = workers.start("--health-port", str(port), wait_ready=False)
        worker.expect_exit = {2}
        assert worker.wait() == 2
    assert f"--health-port {port}: cannot listen on 127.0.0.1:{port}" in worker.log()
    assert workers.handler_of(worker) is None


def test_worker_options_come_from_the_environment(workers: Workers) -> None:
    worker = workers.start(
        modules=(),
        env={
            "JOBCENTER_MODULES": "tasks_for_tests jobcenter.demo",
            "JOBCENTER_QUEUES": "urgent,default",
            "JOBCENTER_POOL": "process",
            "JOBCENTER_HEALTH_PORT": "0",
        },
    )
    assert probe(health_port(worker.log), "/readyz")[0] == 200
    handler = workers.handler_of(worker)
    assert handler is not None
    info = workers.redis.hgetall(workers.keys.worker_info(handler))
    assert info[b"queues"] == b"urgent,default"
    wait_until(lambda: "serving urgent,default with 4 process slots" in worker.log())


@pytest.fixture
def notify_socket() -> Iterator[socket.socket]:
    """A datagram socket standing in for systemd's $NOTIFY_SOCKET (a short path: the limit of
    a unix socket's path is about 100 bytes)."""
    folder = tempfile.mkdtemp(prefix="jc-notify-")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(Path(folder) / "notify"))
    sock.settimeout(NOTIFY_WAIT_SECONDS)
    yield sock
    sock.close()
    shutil.rmtree(folder, ignore_errors=True)


def _until(sock: socket.socket, wanted: str) -> list[str]:
    """The messages received up to and including the first that contains `wanted`."""
    seen: list[str] = []
    while not any(wanted in m for m in seen):
        with contextlib.suppress(TimeoutError):
            seen.append(sock.recv(4096).decode())
            continue
        raise AssertionError(f"no {wanted!r} from the worker; got {seen}")
    return seen


def test_systemd_hears_ready_then_watchdog_pings_then_stopping(
    workers: Workers, notify_socket: socket.socket
) -> None:
    worker = workers.start(
        env={"NOTIFY_SOCKET": notify_socket.getsockname(), "WATCHDOG_USEC": "1000000"},
        wait_ready=False,
    )
    ready = _until(notify_socket, "READY=1")[-1]
    assert "STATUS=serving default" in ready
    assert workers.handler_of(worker) is not None  # READY only once registered
    _until(notify_socket, "WATCHDOG=1")
    _until(notify_socket, "WATCHDOG=1")
    worker.signal(signal.SIGTERM)
    _until(notify_socket, "STOPPING=1")
    assert worker.wait() == 0


def test_no_watchdog_pings_for_another_process(
    workers: Workers, notify_socket: socket.socket
) -> None:
    """WATCHDOG_PID names the process systemd watches; a process it was not meant for (a
    child that inherited the environment) must not ping for it."""
    worker = workers.start(
        env={
            "NOTIFY_SOCKET": notify_socket.getsockname(),
            "WATCHDOG_USEC": "1000000",
            "WATCHDOG_PID": "1",
        },
        wait_ready=False,
    )
    _until(notify_socket, "READY=1")
    worker.signal(signal.SIGTERM)
    messages = _until(notify_socket, "STOPPING=1")
    assert not any("WATCHDOG=1" in m for m in messages), messages
    # wait for the exit: left still stopping, the worker got the fixture's teardown SIGTERM
    # as a second one (a forced stop), which raced its exit
    assert worker.wait() == 0
