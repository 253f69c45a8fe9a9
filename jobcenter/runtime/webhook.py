"""One webhook POST, made safe to point anywhere: the host is resolved, every address it
resolves to is checked against the target rules (jobcenter/model/webhook_targets.py), and
the connection goes to a checked address, so a name that resolves elsewhere a moment later
(DNS rebinding) changes nothing. The outcome is told in our words alone (an HTTP status,
"connection failed", no answer in time): what the target said, or the system's error text,
would tell whoever chose the URL which ports of the worker's network are open.
"""

from __future__ import annotations

import http.client
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import replace
from ipaddress import ip_address
from urllib.parse import quote, urlsplit

from jobcenter.model.webhook_targets import IPAddress, TargetRules, redis_text, target_of

log = logging.getLogger(__name__)

CONNECTION_FAILED = "connection failed"
NOT_FOUND = "host name not found"
URL_SAFE = "!#$%&'()*+,/:;=?@[]~"  # kept as written in a path or query; the rest is %-encoded


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to checked addresses only (the Host header keeps the name)."""

    addresses: Sequence[IPAddress] = ()

    def connect(self) -> None:
        failure: OSError = OSError(CONNECTION_FAILED)
        for address in self.addresses:
            try:
                self.sock = socket.create_connection((str(address), self.port), self.timeout)
                return
            except TimeoutError:  # the attempt's time is spent: no next address
                raise
            except OSError as exc:
                failure = exc
        raise failure


class _PinnedHTTPS(http.client.HTTPSConnection, _PinnedHTTP):
    """HTTPS over _PinnedHTTP's socket: its certificate is checked against the host name
    (HTTPSConnection.connect wraps what _PinnedHTTP.connect opened)."""


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to now, in the resolver's order."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ip_address(str(info[4][0]).partition("%")[0]) for info in found]
    return list(dict.fromkeys(addresses))


def delivery_rules(rules: TargetRules) -> TargetRules:
    """`rules` with the addresses the Redis servers' names resolve to now, so that a
    webhook naming one of them by address is refused too."""
    extra: set[tuple[str, int]] = set()
    for host, port in rules.redis:
        try:
            extra.update((str(address), port) for address in resolve(host, port))
        except OSError:
            continue
    return replace(rules, redis=rules.redis | {(redis_text(h), p) for h, p in extra})


def post(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float, rules: TargetRules
) -> tuple[bool, str]:
    """POST `body` to `url` if its host's addresses pass `rules`: (delivered, what happened).
    Any 2xx answer delivers; a redirect is an answer like any other, not followed."""
    host, port = target_of(url)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
        log.info("webhook %s: %s (%s)", host, NOT_FOUND, exc)
        return False, NOT_FOUND
    addresses, refusal = rules.permitted(host, port, addresses)
    if not addresses:
        return False, f"refused: {refusal}"
    parts = urlsplit(url)
    kind = _PinnedHTTPS if parts.scheme == "https" else _PinnedHTTP
    connection = kind(host, port, timeout=timeout)
    connection.addresses = addresses
    path = quote(parts.path or "/", safe=URL_SAFE)  # a request line is ASCII
    if parts.query:
        path += "?" + quote(parts.query, safe=URL_SAFE)
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        status = connection.getresponse().status
    except TimeoutError:
        return False, f"no answer within {timeout:g}s"
    except (OSError, http.client.HTTPException) as exc:
        # the reason stays in this worker's log: the job's record says no more than this
        log.info("webhook to %s: %s (%r)", host, CONNECTION_FAILED, exc)
        return False, CONNECTION_FAILED
    finally:
        connection.close()
    return 200 <= status < 300, f"HTTP {status}"
