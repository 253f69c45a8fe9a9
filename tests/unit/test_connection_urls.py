"""The URL forms of the one connection factory: redis+cluster:// and redis+sentinel://."""

from __future__ import annotations

import pytest

from jobcenter.storage.server.connection import Address, client_for, parse_multi_host


def test_a_cluster_url_names_every_seed_node_and_the_credentials() -> None:
    address = parse_multi_host("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001")

    assert address == Address([("10.0.0.1", 7000), ("10.0.0.2", 7001)], "app", "s@cret")


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_db() -> None:
    address = parse_multi_host("redis+sentinel://pw@s1:26379,s2:26379/mymaster/3")

    assert address == Address([("s1", 26379), ("s2", 26379)], None, "pw", "mymaster", 3)
    assert parse_multi_host("redis+sentinel://s1:26379/m").db == 0


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis+cluster://localhost", "'localhost' is not host:port"),
        ("redis+cluster://h:1,,h:2", "'' is not host:port"),
        ("redis+cluster://h:1/0", "a cluster URL has no path"),
        ("redis+sentinel://h:26379", "ends in /<master name>[/<db>]"),
        ("redis+sentinel://h:26379/m/x", "ends in /<master name>[/<db>]"),
    ],
)
def test_a_malformed_url_is_refused_naming_the_problem(url: str, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        client_for(url)
