"""The rules over a webhook's target: a worker posts to public addresses, and to the hosts,
addresses and networks the allow-list names; never, unasked, to loopback, link-local (the
cloud's metadata service), private, unspecified or multicast addresses, in whatever form
they are written, nor to a Redis server of the deployment."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from jobcenter.config import Settings
from jobcenter.errors import SpecError
from jobcenter.model.notify import Notify
from jobcenter.model.webhook_targets import TargetRules, parse_allow

REDIS = frozenset({("127.0.0.1", 6379), ("redis.internal", 6380)})
NO_ALLOW = TargetRules(redis=REDIS)


def refusal(rules: TargetRules, url: str) -> str | None:
    try:
        rules.check_notify(Notify(("failed",), url))
    except SpecError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://127.0.0.1:8080/", "127.0.0.1 is a loopback address"),
        ("http://127.1/", "127.1 is a loopback address"),  # forms a resolver reads as IPv4
        ("http://2130706433/", "2130706433 is a loopback address"),
        ("http://0x7f000001/", "0x7f000001 is a loopback address"),
        ("http://[::1]/", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is a loopback address"),
        ("http://localhost:9000/", "localhost resolves to a loopback address"),
        ("http://api.LOCALHOST./", "api.localhost. resolves to a loopback address"),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://172.16.5.4/", "172.16.5.4 is a private address"),
        ("http://192.168.1.1/", "192.168.1.1 is a private address"),
        ("http://[fd12::1]/", "fd12::1 is a private address"),
        ("http://[64:ff9b::a00:1]/", "64:ff9b::a00:1 is a private address"),  # NAT64 of 10/8
        ("http://[2002:a00:1::]/", "2002:a00:1:: is a private address"),  # 6to4 of 10.0.0.1
        ("http://100.64.0.1/", "100.64.0.1 is a non-public address"),
        ("http://0.0.0.0/", "0.0.0.0 is an unspecified address"),
        ("http://[::]/", ":: is an unspecified address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("http://[ff02::1]/", "ff02::1 is a multicast address"),
        ("http://redis.internal:6380/", "redis.internal:6380 is a Redis server"),
    ],
)
def test_a_target_that_is_not_public_is_refused_at_submit_naming_the_url_and_why(
    url: str, why: str
) -> None:
    message = refusal(NO_ALLOW, url)
    assert message is not None and message.startswith(f"job: 'notify': webhook {url!r}")
    assert why in message and "JOBCENTER_WEBHOOK_ALLOW" in message


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/x", "http://93.184.216.34:8080/", "http://[2606:4700::1]/"]
)
def test_a_public_address_or_a_name_passes_the_submit(url: str) -> None:
    assert refusal(NO_ALLOW, url) is None


def test_the_allow_list_admits_its_hosts_addresses_networks_and_ports() -> None:
    rules = TargetRules(
        parse_allow(["hooks.internal", "10.0.0.0/8", "[::1]:9000", "192.168.1.5:8443"]), REDIS
    )
    for url in [
        "http://hooks.internal/",
        "http://HOOKS.internal.:81/",
        "http://10.200.3.4/",
        "http://[::1]:9000/",
        "https://192.168.1.5:8443/",
    ]:
        assert refusal(rules, url) is None, url
    for url in ["http://[::1]:9001/", "https://192.168.1.5/", "http://192.168.1.6:8443/"]:
        assert refusal(rules, url) is not None, url  # another port, another address


def test_the_redis_port_stays_refused_when_its_host_is_allowed_unless_named_exactly() -> None:
    loopback = TargetRules(parse_allow(["127.0.0.0/8"]), REDIS)
    assert refusal(loopback, "http://127.0.0.1:8080/") is None
    assert "127.0.0.1:6379 is a Redis server" in (refusal(loopback, "http://127.0.0.1:6379/") or "")
    exactly = TargetRules(parse_allow(["127.0.0.1:6379"]), REDIS)
    assert refusal(exactly, "http://127.0.0.1:6379/") is None


def test_at_delivery_only_the_addresses_that_pass_are_kept() -> None:
    rules = TargetRules(parse_allow(["127.0.0.1"]), REDIS)
    both = [ip_address("::1"), ip_address("127.0.0.1")]  # what `localhost` may resolve to
    passed, why = rules.permitted("localhost", 8080, both)
    assert passed == [ip_address("127.0.0.1")]  # the one a delivery may connect to
    assert why is not None and "localhost resolves to a loopback address" in why
    passed, why = NO_ALLOW.permitted("rebound.example", 80, [ip_address("127.0.0.1")])
    assert passed == [] and why is not None and "rebound.example resolves to a loopback" in why
    passed, why = NO_ALLOW.permitted("h.example", 80, [ip_address("93.184.216.34")])
    assert (passed, why) == ([ip_address("93.184.216.34")], None)
    redis_by_address = NO_ALLOW.permitted("other-name.example", 6379, [ip_address("127.0.0.1")])
    assert redis_by_address[0] == [] and "Redis server" in (redis_by_address[1] or "")


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "a b", "[::1", "[::1]x", "h:99999", "*.x", "h:"])
def test_a_bad_allow_list_entry_is_refused_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="JOBCENTER_WEBHOOK_ALLOW: .* is not a host name"):
        parse_allow([entry])
    with pytest.raises(ValueError, match="JOBCENTER_WEBHOOK_ALLOW"):
        Settings(webhook_allow=("127.0.0.1", entry))


def test_the_setting_is_read_as_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBCENTER_WEBHOOK_ALLOW", " 127.0.0.1, hooks.internal:8080 ,,")
    assert Settings.from_env().webhook_allow == ("127.0.0.1", "hooks.internal:8080")
    assert Settings().webhook_allow == ()
