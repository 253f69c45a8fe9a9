"""How the worker's logs and the CLI name a write Redis refused: the reason is the same
whichever way the Redis version words it (a script's refusal at maxmemory reads differently
on Redis 7.0 and 7.2)."""

from __future__ import annotations

import pytest
import redis

from jobcenter.storage.server.errors import trouble, write_refused

SCRIPT_OOM_7_0 = (
    "command not allowed when used memory > 'maxmemory'. script: 22cc8ed9, on @user_script:983."
)
SCRIPT_OOM_7_2 = "OOM command not allowed when used memory > 'maxmemory'. script: 22cc8ed9"


@pytest.mark.parametrize(
    "exc",
    [
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
        redis.ResponseError(SCRIPT_OOM_7_0),
        redis.ResponseError(SCRIPT_OOM_7_2),
    ],
    ids=["command", "script-7.0", "script-7.2"],
)
def test_every_wording_of_out_of_memory_is_named_as_such(exc: redis.ResponseError) -> None:
    assert write_refused(exc) == "out of memory: maxmemory reached and eviction is off"
    assert trouble(exc).startswith("redis refused the write: out of memory")


def test_a_read_only_replica_an_unreachable_server_and_other_refusals_are_told_apart() -> None:
    read_only = redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
    assert trouble(read_only).startswith("redis refused the write: it is a read-only replica")
    assert trouble(redis.ConnectionError("refused")) == "redis unreachable (refused)"
    assert trouble(redis.ResponseError("BUSY script")) == "redis refused (BUSY script)"
    assert write_refused(redis.ResponseError("BUSY script")) is None
