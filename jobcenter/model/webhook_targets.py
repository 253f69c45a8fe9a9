"""Which hosts a webhook may go to. A spec's URL is chosen by whoever submits the job, and
the worker that posts it sits inside the network: left open, a webhook could reach the
cloud's metadata service, an admin port on loopback, or Redis itself. So a webhook goes to
public addresses only, except to the hosts, addresses and networks the setting
JOBCENTER_WEBHOOK_ALLOW lists, and never to a Redis server of the deployment unless an
entry names that host and port exactly.

Pure: the rules over names and addresses. A submit checks the URL as written (an address,
a localhost name, a Redis server's name); a worker checks every address the host resolves
to when it delivers, and connects only to one that passed (jobcenter/runtime/webhook.py),
since a name may point elsewhere by then.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from urllib.parse import urlsplit

from jobcenter.errors import SpecError

from .notify import Notify

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

ALLOW_SETTING = "JOBCENTER_WEBHOOK_ALLOW"
DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 6761: these names are loopback whatever a resolver says; a submit refuses them as such.
LOCALHOST_ADDRESSES = (IPv4Address("127.0.0.1"), IPv6Address("::1"))
NAT64_PREFIX = IPv6Network("64:ff9b::/96")  # its addresses carry an IPv4 one (RFC 6052)
LABEL = r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(\.{LABEL})*")


@dataclass(frozen=True)
class Allowed:
    """One entry of the allow-list: a host name or a network, on any port or on one."""

    name: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def permits(self, name: str, address: IPAddress | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == name
        return address is not None and self.network is not None and address in self.network


def parse_allow(entries: Iterable[str]) -> tuple[Allowed, ...]:
    """The allow-list's entries: `hooks.internal`, `10.0.0.0/8`, `127.0.0.1`, `[::1]`, each
    optionally with `:port` (`127.0.0.1:8080`). A ValueError names a bad entry."""
    return tuple(_parse_entry(entry.strip()) for entry in entries if entry.strip())


def _parse_entry(entry: str) -> Allowed:
    bad = ValueError(
        f"{ALLOW_SETTING}: {entry!r} is not a host name, an IP address or a network "
        f"(10.0.0.0/8), with an optional :port"
    )
    host, port = entry, None
    if entry.startswith("["):  # [IPv6] or [IPv6]:port
        host, bracket, rest = entry[1:].partition("]")
        if not bracket:
            raise bad
        if rest:
            if not rest.startswith(":"):
                raise bad
            port = _port(rest[1:], bad)
    elif entry.count(":") == 1:  # host:port (a bare IPv6 address has several colons)
        host, _, text = entry.partition(":")
        port = _port(text, bad)
    try:
        return Allowed(network=ip_network(host, strict=False), port=port)
    except ValueError:
        pass
    name = _name(host)
    if not HOST_NAME.fullmatch(name):
        raise bad
    return Allowed(name=name, port=port)


def _port(text: str, bad: ValueError) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise bad
    return int(text)


def _name(host: str) -> str:
    return host.lower().rstrip(".")


def embedded(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64), or the address itself:
    ::ffff:127.0.0.1 reaches loopback as surely as 127.0.0.1."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in NAT64_PREFIX:
            return IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def kind_of(address: IPAddress) -> str | None:
    """Why a worker must not post to `address` unasked ('loopback', 'private', ...), or None
    for a public address."""
    for candidate in dict.fromkeys((embedded(address), address)):
        if candidate.is_loopback:
            return "loopback"
        if candidate.is_link_local:  # 169.254.169.254: the cloud's metadata service
            return "link-local"
        if candidate.is_unspecified:
            return "unspecified"
        if candidate.is_multicast:
            return "multicast"
        if candidate.is_private:  # RFC 1918, ULA fc00::/7, documentation and test ranges
            return "private"
        if not candidate.is_global:  # shared (100.64.0.0/10), reserved
            return "non-public"
    return None


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host names without a lookup: an IP literal, including the forms
    a resolver reads as IPv4 (`127.1`, `0x7f000001`, `2130706433`)."""
    try:
        return ip_address(host)
    except ValueError:
        pass
    if host and host[0].isdigit():  # inet_aton accepts a few legacy forms; a name is not one
        try:
            return IPv4Address(socket.inet_aton(host))
        except OSError:
            pass
    return None


def target_of(url: str) -> tuple[str, int]:
    """The host (as urllib reads it: lower-case, no brackets) and port a URL goes to."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or DEFAULT_PORTS.get(parts.scheme, 80)


@dataclass(frozen=True)
class TargetRules:
    """The allow-list, and the Redis servers' (host, port) pairs: no webhook's target."""

    allow: tuple[Allowed, ...] = ()
    redis: frozenset[tuple[str, int]] = frozenset()

    def check_notify(self, notify: Notify | None) -> None:
        """At submit: refuse a `notify:` webhook whose host, as written, may not be posted
        to; a SpecError names the URL and why."""
        if notify is None or not notify.webhook:
            return
        host, port = target_of(notify.webhook)
        address = literal_address(host)
        if address is not None:
            addresses: Sequence[IPAddress] = (address,)
        elif _name(host) == "localhost" or _name(host).endswith(".localhost"):
            addresses = LOCALHOST_ADDRESSES
        else:
            addresses = ()  # a name: the worker checks what it resolves to when it posts
        passed, why = self.permitted(host, port, addresses)
        if why is not None and not passed:
            raise SpecError(f"job: 'notify': webhook {notify.webhook!r} is refused: {why}")

    def permitted(
        self, host: str, port: int, addresses: Sequence[IPAddress]
    ) -> tuple[list[IPAddress], str | None]:
        """Which of `addresses` (what host resolves to, or stands for) a webhook to
        host:port may be sent to, and why the first refused one may not (None: none was)."""
        name = _name(host)
        literal = literal_address(host)
        if (name, port) in self.redis and not self._names_port(name, literal, port):
            return [], self._redis_refusal(host, port)
        named = any(entry.permits(name, None, port) for entry in self.allow)
        passed: list[IPAddress] = []
        why = None
        for address in addresses:
            reason = self._refusal(host, address, port, named)
            if reason is None:
                passed.append(address)
            elif why is None:
                why = reason
        return passed, why

    def _refusal(self, host: str, address: IPAddress, port: int, named: bool) -> str | None:
        name = _name(host)
        if {(str(address), port), (str(embedded(address)), port)} & self.redis:
            if self._names_port(name, address, port):
                return None
            return self._redis_refusal(host, port)
        kind = None if named else kind_of(address)
        if kind is None or any(entry.permits(name, address, port) for entry in self.allow):
            return None
        verb = "is" if literal_address(host) is not None else "resolves to"
        article = "an" if kind[0] in "aeiou" else "a"
        return (
            f"{host} {verb} {article} {kind} address (a worker posts only to public "
            f"addresses and to those {ALLOW_SETTING} lists)"
        )

    def _names_port(self, name: str, address: IPAddress | None, port: int) -> bool:
        """An entry allows this host or address on exactly this port."""
        return any(e.port == port and e.permits(name, address, port) for e in self.allow)

    @staticmethod
    def _redis_refusal(host: str, port: int) -> str:
        return (
            f"{host}:{port} is a Redis server of this deployment (only an entry of "
            f"{ALLOW_SETTING} naming that host and port allows it)"
        )


def redis_text(host: str) -> str:
    """A Redis host as refusal compares it: a name lower-case, an address in its one form."""
    address = literal_address(host.strip("[]"))
    return str(address) if address is not None else _name(host)
