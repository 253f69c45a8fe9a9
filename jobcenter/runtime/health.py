"""How a worker is, told to its supervisor: `/healthz` and `/readyz` over HTTP for Kubernetes
probes (and anyone), and sd_notify(3) READY / WATCHDOG / STOPPING for systemd. Standard
library only: http.server in a daemon thread, a datagram to $NOTIFY_SOCKET.

alive: the worker's heartbeat thread goes round, whether or not Redis answers it. A worker
       whose heartbeat stalled for the worker timeout is one the rest of the fleet already
       counts as gone (recovery takes its tasks over), so restarting it loses nothing; a
       Redis outage alone never makes a worker "not alive": it keeps its unreported results.
ready: its last heartbeat round reached Redis and registered it, Redis answers a PING now,
       it is not draining (a SIGTERM'd worker finishes what runs, then exits), and Redis
       may not evict keys (a worker claims nothing while it may: runtime/eviction_guard.py).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from jobcenter.errors import SpecError
from jobcenter.storage.server.connection import probe_client
from jobcenter.storage.server.errors import RedisError

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger(__name__)

# A probe must answer within its own timeout (Kubernetes: 1 s by default), Redis down or hung.
PING_TIMEOUT_SECONDS = 0.5
# How often the systemd thread looks at the worker (READY once, WATCHDOG each time it is
# alive); a datagram on a local socket is cheap.
NOTIFY_TICK_SECONDS = 0.5


@dataclass(frozen=True)
class Verdict:
    ok: bool
    body: dict[str, Any]


def _facts(worker: Worker) -> dict[str, Any]:
    now = time.monotonic()
    pulse = worker.pulse
    return {
        "handler": worker.handler,
        "heartbeat_age_seconds": round(now - pulse.round_at, 3),
        "redis_ok_age_seconds": None if pulse.ok_at is None else round(now - pulse.ok_at, 3),
        "draining": worker.stopping.is_set(),
        "redis_evicts": worker.eviction.problem,  # None unless its maxmemory-policy evicts
    }


def alive(worker: Worker) -> Verdict:
    """Alive while the heartbeat thread has gone round within the worker timeout."""
    body = _facts(worker)
    limit = worker.store.settings.worker_timeout_seconds
    ok = body["heartbeat_age_seconds"] <= limit
    if not ok:
        body["reason"] = f"heartbeat stalled for over {limit:g}s"
    return Verdict(ok, {"alive": ok, **body})


def ready(worker: Worker, ping: Any) -> Verdict:
    """Ready when alive, registered by its last heartbeat round, Redis answers now, and not
    draining. `ping` is a Redis client with short timeouts, separate from the worker's."""
    body = _facts(worker)
    reason = None
    if body["draining"]:
        reason = "draining: finishing running tasks, claiming no more"
    elif not alive(worker).ok:
        reason = "heartbeat stalled"
    elif not worker.pulse.redis_ok:
        reason = "not registered: the last heartbeat did not reach Redis"
    elif body["redis_evicts"]:
        reason = f"claiming nothing: {body['redis_evicts']}"
    else:
        try:
            ping.ping()
        except (RedisError, OSError) as exc:
            reason = f"redis unreachable: {exc}"
    if reason is not None:
        body["reason"] = reason
    return Verdict(reason is None, {"ready": reason is None, **body})


def _ping_client(url: str) -> Any:
    return probe_client(PING_TIMEOUT_SECONDS, url)


class HealthServer:
    """`GET /healthz` (alive) and `GET /readyz` (ready): 200 or 503 with a small JSON body."""

    def __init__(self, worker: Worker, host: str, port: int) -> None:
        ping = _ping_client(worker.store.settings.redis_url)
        checks = {"/healthz": lambda: alive(worker), "/readyz": lambda: ready(worker, ping)}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    self._send(404, {"error": f"no such path {self.path!r}: /healthz, /readyz"})
                    return
                verdict = check()
                self._send(200 if verdict.ok else 503, verdict.body)

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode() + b"\n"
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("health %s: " + format, self.client_address[0], *args)

        try:
            self.http = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise SpecError(f"--health-port {port}: cannot listen on {host}:{port}: {exc}") from exc
        self.http.daemon_threads = True
        self.port: int = self.http.server_address[1]

    def serve_in_background(self) -> None:
        threading.Thread(
            target=self.http.serve_forever, name="jobcenter-health", daemon=True
        ).start()


# -- systemd ------------------------------------------------------------------------------


def notify(state: str) -> bool:
    """Send an sd_notify(3) message if systemd started us with $NOTIFY_SOCKET; True if sent."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", address, exc)
        return False
    return True


def _watchdog_seconds() -> float | None:
    """The watchdog period systemd asks this process for (WatchdogSec=), else None."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1_000_000


def _systemd_loop(worker: Worker) -> None:
    """READY=1 once registered, STOPPING=1 as soon as it drains, WATCHDOG=1 while alive."""
    watchdog = _watchdog_seconds()
    tick = NOTIFY_TICK_SECONDS if watchdog is None else min(NOTIFY_TICK_SECONDS, watchdog / 3)

    def feed_watchdog() -> None:
        if watchdog is not None and alive(worker).ok:
            notify("WATCHDOG=1")

    sent_ready = False
    while not worker.stopping.wait(tick):
        if not sent_ready and worker.pulse.redis_ok:
            sent_ready = notify(f"READY=1\nSTATUS=serving {','.join(worker.queues)}")
        feed_watchdog()
    notify("STOPPING=1\nSTATUS=draining: finishing running tasks")
    while not worker.stopped.wait(tick):  # a drain may take long: keep the watchdog fed
        feed_watchdog()


def start(worker: Worker, host: str, port: int | None) -> HealthServer | None:
    """Start what the worker's supervisor listens to: the HTTP endpoint if a port is given
    (0: any free port), the systemd notifications if systemd asked for them."""
    server = None
    if port is not None:
        server = HealthServer(worker, host, port)
        server.serve_in_background()
        log.info("health endpoint on http://%s:%d/healthz and /readyz", host, server.port)
    if os.environ.get("NOTIFY_SOCKET"):
        threading.Thread(
            target=_systemd_loop, args=(worker,), name="jobcenter-systemd", daemon=True
        ).start()
    return server
