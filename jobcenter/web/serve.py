"""Run the dashboard: bind the socket first (so `--port 0` can say which port it got), then
hand it to uvicorn, answering only requests for the names it is known by."""

from __future__ import annotations

import ipaddress
import logging
import re
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Sequence

import uvicorn
from starlette.routing import Mount

from jobcenter.client import Client

from .app import LOCAL_HOSTS, create_app

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 3  # open polling connections get this long after Ctrl-C
ALLOWED_HOSTS_ENV = "JOBCENTER_ALLOWED_HOSTS"
HOST_NAME = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?\.?")  # or *.example.com


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections of a socket that says
    # so, and without it a kept-alive connection waits ~40 ms (delayed ACK) on each response
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def _host_pattern(entry: str) -> str:
    """`entry` as the Host check compares it: an IPv6 address in brackets, a name lower-case."""
    try:
        address = ipaddress.ip_address(entry.strip("[]"))
    except ValueError:
        pass
    else:
        return f"[{address}]" if address.version == 6 else str(address)
    name = entry.lower()
    if name != "*" and not HOST_NAME.fullmatch(name):
        raise ValueError(
            f"{ALLOWED_HOSTS_ENV}: {entry!r} is not a host name (example.com, *.example.com) "
            "or an IP address, without a port; * answers any"
        )
    return name


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> list[str]:
    """The names the dashboard answers requests for: loopback's, the address it listens on
    (not a wildcard one, 0.0.0.0 or ::, which is no name), and `extra` (names, *.example.com,
    addresses; * for any). A ValueError names a bad entry."""
    names = [*LOCAL_HOSTS, *(e.strip() for e in extra if e.strip())]
    try:
        wildcard = ipaddress.ip_address(bound).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        names.append(bound)
    return list(dict.fromkeys(_host_pattern(name) for name in names))


def run(
    client: Client,
    *,
    host: str,
    port: int,
    token: str | None,
    access_log: bool,
    announce: Callable[[str], None],
    hosts: Sequence[str] | None = None,
    mounts: Sequence[Mount] = (),
    api_tokens: bool = False,
) -> None:
    """Serve until interrupted, answering requests for `hosts` (allowed_hosts(host) by
    default). Logging is the caller's (uvicorn's own config is off). `mounts` and
    `api_tokens`: as create_app's."""
    hosts = allowed_hosts(host) if hosts is None else list(hosts)
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
            "read job data%s. It answers requests for %s only (%s adds names)",
            host,
            "" if token else " (and no token is set, so nobody can act)",
            ", ".join(hosts),
            ALLOWED_HOSTS_ENV,
        )
    config = uvicorn.Config(
        create_app(client, token, hosts, mounts=mounts, api_tokens=api_tokens),
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
