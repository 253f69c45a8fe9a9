"""Loads the Lua transitions: each file gets the generated state constants and the shared
preludes prepended, and is registered once per connection (EVALSHA, reloaded on NOSCRIPT)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from redis import Redis
from redis.commands.core import Script

from ..states import lua_constants

# Scripts that run in the context of one job (_job.lua); the others see only _common.lua.
JOB_SCRIPTS = frozenset(
    {
        "start",
        "complete",
        "fail",
        "heartbeat",
        "expire",
        "publish_tasks",
        "queue_roots",
        "continue",
        "finalize",
        "cancel",
        "release",
        "repair",
        "resubmit",
        "revive",
        "delete",
    }
)
SHARD_SCRIPTS = frozenset({"submit", "claim", "singleton"})
ALL_SCRIPTS = JOB_SCRIPTS | SHARD_SCRIPTS


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script `name`."""
    if name not in ALL_SCRIPTS:
        raise KeyError(f"no Lua script named {name!r}")
    parts = [lua_constants(), _read("_common")]
    if name in JOB_SCRIPTS:
        parts.append(_read("_job"))
    parts.append(_read(name))
    return "\n".join(parts)


class Scripts:
    """The registered scripts of one Redis client; call as `scripts.run(name, keys, args)`."""

    def __init__(self, redis: Redis) -> None:
        self._scripts: dict[str, Script] = {
            name: redis.register_script(source(name)) for name in ALL_SCRIPTS
        }

    def run(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        """Run script `name`; with a pipeline as `client` the call is queued on it."""
        return self._scripts[name](keys=keys, args=args, client=client)
