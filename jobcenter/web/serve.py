"""Run the dashboard: bind the socket first (so `--port 0` can say which port it got), then
hand it to uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Callable, Sequence

import uvicorn
from starlette.routing import Mount

from jobcenter.client import Client

from .app import create_app

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 3  # open polling connections get this long after Ctrl-C


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(
    client: Client,
    *,
    host: str,
    port: int,
    token: str | None,
    access_log: bool,
    announce: Callable[[str], None],
    mounts: Sequence[Mount] = (),
    api_tokens: bool = False,
) -> None:
    """Serve until interrupted. Logging is the caller's (uvicorn's own config is off).
    `mounts` and `api_tokens`: as create_app's."""
    sock = _bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    mode = "actions need the token" if token else "read-only (no --token)"
    if api_tokens:
        mode = "actions need an operate token: jobcenter token create --scope operate"
    announce(f"jobcenter dashboard on {url} ({mode}); namespace {client.settings.namespace!r}")
    for mount in mounts:
        announce(f"{mount.name or 'app'} on {url}{mount.path.lstrip('/')}")
    if not _loopback(host):
        log.warning(
            "the dashboard listens on %s, beyond this machine: anyone who can reach it can "
            "read job data%s",
            host,
            "" if token else " (and no token is set, so nobody can act)",
        )
    config = uvicorn.Config(
        create_app(client, token, mounts=mounts, api_tokens=api_tokens),
        log_config=None,
        access_log=access_log,
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        lifespan="off",
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    # handler it found: a quiet one makes a stopped dashboard exit 0, like a worker
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: None)
    uvicorn.Server(config).run(sockets=[sock])
